#!/usr/bin/env python3
"""What the Codex agents' command outputs read: their instructions, their own plans, or the project.

For each user of a set of Codex rollouts (default: ../shared/data/client-logs/codex, files named
USER-rollout-...), splits the weight of the command outputs (bytes times the requests after them
that carry them, as the replay lab's `input tokens` count them) by what the command read, from
the paths it names:

- instructions: the agent's workflow steps, agents, tasks and skills (`_bmad/`, `.codex/`,
  `.claude/`, `SKILL.md`, `AGENTS.md`, `CLAUDE.md`, a path naming a workflow);
- plans: documents the agent wrote for itself to work from (`_bmad-output/`, PRDs, epics,
  stories, planning);
- project: everything else.

An agent follows its instructions without quoting them, so the lab's `foresight` (which keeps
only what the agent quotes later) counts them as unused: this says how much of its savings come
from there (docs/replay.md, "Why Codex's aggregate stays far from foresight").

Usage: python3 scripts/analysis/instruction-reads.py [DIR]
"""

import collections
import glob
import json
import os
import re
import sys

INSTRUCTIONS = re.compile(
    r"(_bmad/|\.codex/|\.claude/|SKILL\.md|AGENTS\.md|CLAUDE\.md|workflow)"
)
PLANS = re.compile(r"(_bmad-output/|planning|prd|stor(y|ies)|epics)", re.IGNORECASE)


def kind(command: str) -> str:
    if INSTRUCTIONS.search(command):
        return "instructions"
    if PLANS.search(command):
        return "plans"
    return "project"


def command_of(arguments: str) -> str:
    try:
        args = json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        return ""
    if not isinstance(args, dict):
        return ""
    command = args.get("command") or args.get("cmd") or ""
    return " ".join(command) if isinstance(command, list) else str(command)


def session_weights(path: str) -> collections.Counter:
    """Weight of each kind of output in one rollout."""
    commands: dict[str, str] = {}
    outputs: list[tuple[int, str, int]] = []  # (requests before it, kind, bytes)
    requests = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                payload = json.loads(line).get("payload", {})
            except json.JSONDecodeError:
                continue
            if not isinstance(payload, dict):
                continue
            t = payload.get("type")
            if t == "function_call":
                commands[payload.get("call_id", "")] = command_of(
                    payload.get("arguments", "")
                )
                requests += 1
            elif t == "message" and payload.get("role") == "assistant":
                requests += 1
            elif t == "function_call_output":
                out = payload.get("output")
                text = out if isinstance(out, str) else json.dumps(out)
                outputs.append(
                    (
                        requests,
                        kind(commands.get(payload.get("call_id", ""), "")),
                        len(text),
                    )
                )
    weights: collections.Counter = collections.Counter()
    for before, k, size in outputs:
        weights[k] += size * (requests - before)
    return weights


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/client-logs/codex"
    by_user: dict[str, collections.Counter] = collections.defaultdict(
        collections.Counter
    )
    for path in sorted(glob.glob(os.path.join(folder, "*.jsonl"))):
        user = os.path.basename(path).split("-")[0]
        by_user[user].update(session_weights(path))
    if not by_user:
        sys.exit(f"no rollouts (*.jsonl) in {folder}")
    print("| user | instructions | plans | project |")
    print("|---|---|---|---|")
    for user, weights in sorted(by_user.items()):
        total = sum(weights.values()) or 1
        shares = " | ".join(
            f"{weights[k] / total:.1%}" for k in ("instructions", "plans", "project")
        )
        print(f"| {user} | {shares} |")


if __name__ == "__main__":
    main()
