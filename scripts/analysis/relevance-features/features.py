"""Whether more of what is known at a decision tells apart the old outputs the agent uses again.

Reads the examples an instrumented build dumps (see run.sh): one row per tool output per later
request, with the relevance table's features and a few candidate ones. For each feature set,
fits the engine's kind of table (cells backing off to coarser ones, 40 examples at least,
smoothed with the weight of 10) on every user but one, ranks the left-out user's examples by
it, and prints the share of old-output bytes it could prune while hiding at most 10%, 20% and
40% of their later uses (higher is better; ranking at random gives 0.10/0.20/0.40).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable

Row = tuple[str, str, str, str, bool, int, int, int, int, int, bool]
MINI_SWE = ("pylint", "pytest", "scikit", "sphinx")


def read(path: str) -> list[Row]:
    rows: list[Row] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            p = line.rstrip("\n").split(",")
            if len(p) != 12:
                continue
            user = p[0].split("-")[0]
            if "__" in user or user in MINI_SWE:
                user = "mini-swe-agent"
            rows.append(
                (
                    user,
                    p[1],
                    p[2],
                    p[3],
                    p[4] == "true",
                    int(p[5]),
                    int(p[6]),
                    int(p[7]),
                    int(p[8]),
                    int(p[9]),
                    p[11] == "1",
                )
            )
    return rows


def size(b: int) -> str:
    return "xs" if b < 1000 else "s" if b < 4000 else "m" if b < 16000 else "l"


def since(s: int) -> str:
    return "never" if s < 0 else "0-4" if s < 5 else "5-19" if s < 20 else "20+"


def uses(n: int) -> str:
    return "0" if n == 0 else "1" if n == 1 else "2-3" if n < 4 else "4+"


def user_turns(u: int) -> str:
    return "0" if u == 0 else "1" if u == 1 else "2+"


Keys = Callable[[Row], list[str]]
# Row: user, class, age, used, named, bytes, uses so far, turns since the last use, turns since
# its file was named, user messages since it entered, messages since, used again.
VARIANTS: dict[str, Keys] = {
    # The shipped table's cells (`Features::keys`).
    "table": lambda r: [
        f"{r[1]}/{r[2]}/{r[3]}/{r[4]}",
        f"{r[1]}/*/{r[3]}/{r[4]}",
        f"*/{r[3]}/{r[4]}",
        "*",
    ],
    "+since-use": lambda r: [
        f"{r[1]}/{r[2]}/{since(r[7])}/{r[4]}",
        f"{r[1]}/*/{r[3]}/{r[4]}",
        f"*/{r[3]}/{r[4]}",
        "*",
    ],
    "+uses": lambda r: [
        f"{r[1]}/{r[2]}/{r[3]}/{uses(r[6])}/{r[4]}",
        f"{r[1]}/{r[2]}/{r[3]}/{r[4]}",
        f"*/{r[3]}/{r[4]}",
        "*",
    ],
    "+user-turns": lambda r: [
        f"{r[1]}/{r[2]}/{r[3]}/{r[4]}/{user_turns(r[9])}",
        f"{r[1]}/{r[2]}/{r[3]}/{r[4]}",
        f"*/{r[3]}/{r[4]}",
        "*",
    ],
    "+size": lambda r: [
        f"{r[1]}/{r[2]}/{r[3]}/{r[4]}/{size(r[5])}",
        f"{r[1]}/{r[2]}/{r[3]}/{r[4]}",
        f"*/{r[3]}/{r[4]}",
        "*",
    ],
}


def fit(rows: list[Row], keys: Keys) -> dict[str, list[int]]:
    cells: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        for k in keys(r):
            cells[k][0] += r[10]
            cells[k][1] += 1
    return cells


def estimate(cells: dict[str, list[int]], keys: Keys, r: Row) -> float:
    prior, chosen = 0.5, None
    for k in reversed(keys(r)):
        if k not in cells:
            continue
        used, n = cells[k]
        likelihood = (used + 10 * prior) / (n + 10)
        if n >= 40 or chosen is None:
            chosen = likelihood
        prior = likelihood
    return 0.5 if chosen is None else chosen


def pruned_at(scored: list[tuple[float, int, bool]], budget: float) -> float:
    """Bytes pruned, lowest estimates first (ties together), before hiding over `budget`."""
    total_bytes = sum(s[1] for s in scored) or 1
    total_uses = sum(s[2] for s in scored) or 1
    pruned = hidden = i = 0
    while i < len(scored):
        j, group_bytes, group_uses = i, 0, 0
        while j < len(scored) and scored[j][0] == scored[i][0]:
            group_bytes += scored[j][1]
            group_uses += scored[j][2]
            j += 1
        if (hidden + group_uses) / total_uses > budget:
            break
        pruned, hidden, i = pruned + group_bytes, hidden + group_uses, j
    return pruned / total_bytes


def main() -> None:
    rows = read(
        sys.argv[1] if len(sys.argv) > 1 else "target/relevance-features/examples.csv"
    )
    users = sorted(
        {r[0] for r in rows if r[0] not in ("HillviewCap", "PythonAISolutions")}
    )
    print("| features | " + " | ".join(users) + " |")
    print("|---" * (len(users) + 1) + "|")
    for name, keys in VARIANTS.items():
        cols = []
        for user in users:
            cells = fit([r for r in rows if r[0] != user], keys)
            scored = sorted(
                ((estimate(cells, keys, r), r[5], r[10]) for r in rows if r[0] == user),
                key=lambda s: s[0],
            )
            cols.append(
                "/".join(f"{pruned_at(scored, b):.2f}" for b in (0.1, 0.2, 0.4))
            )
        print(f"| {name} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
