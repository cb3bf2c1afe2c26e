"""Whether what the agent uses of an output later sits near what it used of it before.

Reads the references an instrumented build dumps (see run.sh): per reference, the output it
is credited to, that output's line count and the lines holding the string. For each later use
of an output the agent already used, checks whether the use falls within W lines of a line used
before, and how much of the output those windows are: keeping only them is worth it when the
first share is well above the second.
"""

from __future__ import annotations

import sys
from collections import defaultdict


def main() -> None:
    path = (
        sys.argv[1] if len(sys.argv) > 1 else "target/relevance-features/references.tsv"
    )
    uses: dict[tuple[str, int], dict[int, set[int]]] = defaultdict(
        lambda: defaultdict(set)
    )
    lines_of: dict[tuple[str, int], int] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) != 6:
                continue
            try:
                key = (p[0], int(p[1]))
                lines_of[key] = int(p[2])
                uses[key][int(p[4])].update(int(x) for x in p[5].split())
            except ValueError:
                continue
    print(
        "| window | outputs of | later uses | within the windows | windows' share of lines |"
    )
    print("|---|---|---|---|---|")
    for width in (5, 15, 40):
        for min_lines in (50, 200):
            count = within = 0
            share = 0.0
            for key, by_request in uses.items():
                n = lines_of[key]
                if n < min_lines:
                    continue
                before: set[int] = set()
                for request in sorted(by_request):
                    now = by_request[request]
                    if before and now:
                        window: set[int] = set()
                        for u in before:
                            window.update(
                                range(max(0, u - width), min(n, u + width + 1))
                            )
                        count += 1
                        within += any(x in window for x in now)
                        share += len(window) / n
                    before |= now
            print(
                f"| +/-{width} lines | {min_lines}+ lines | {count} | {within / count:.2f} | "
                f"{share / count:.2f} |"
            )


if __name__ == "__main__":
    main()
