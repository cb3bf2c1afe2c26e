#!/usr/bin/env python3
"""How far can a policy without foresight go on file views before it loses recall?

Reads mini-swe-agent trajectories (default: ../shared/data/transcripts/mini-swe-agent-gpt5mini)
and measures two predictors a context manager could use at insertion time, against the replay
lab's reference recall (the same salient-string patterns as crates/ctxgc-replay/src/recall.rs,
counted over the whole request text, no token counts and no cache):

- relevance: a file view (`nl -ba`, `cat`, `sed -n`, `head`, `tail`) keeps its first 5 and last 3
  lines plus the lines within W of a line naming a code-like identifier that the task, the
  agent's own messages or the command had named before it ("what the agent is looking for");
  every other output stays whole. Reported: the share of file-view cost kept (bytes weighted by
  the requests that will still carry them) and recall.
- recency: only the newest K tool outputs are kept whole, older ones dropped entirely (what an
  event that prunes everything but the last K outputs would show). Reported: recall.

Usage: python3 scripts/analysis/frontier.py [DIR]
"""

import glob
import json
import os
import re
import sys

PATTERNS = [
    re.compile(p)
    for p in [
        r'"([^"\n]{4,60})"',
        r"'([^'\n]{4,60})'",
        r"`([^`\n]{4,60})`",
        r"((?:[\w.-]+/)+[\w.-]+|[\w-]+\.(?:py|rs|js|ts|tsx|go|java|c|h|cpp|rb|php|json|toml|yaml|yml|md|txt|cfg|ini|sh|html|css))",
        r"\b([A-Z][A-Za-z]*(?:Error|Exception)|E\d{4}|[A-Z]{2,}\d{3,})\b",
        r"\b(\d{4,})\b",
        r"\b([A-Za-z_][A-Za-z0-9_]{5,})\b",
    ]
]
IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{3,}\b")
VIEW = re.compile(r"(nl -ba|cat -n|\bcat |sed -n|head -|tail -)")


def code_like(word):
    return "_" in word or any(c.isdigit() for c in word) or any(c.isupper() for c in word[1:])


def salient(text):
    out = []
    for i, pattern in enumerate(PATTERNS):
        for m in pattern.finditer(text):
            s = m.group(1)
            if len(s) < 4 or (i == len(PATTERNS) - 1 and not code_like(s)) or s in out:
                continue
            out.append(s)
    return out[:64]


def text_of(message):
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(x.get("text", "") for x in content if isinstance(x, dict))
    content = content or ""
    for call in message.get("tool_calls") or []:
        content += "\n" + call["function"]["arguments"]
    return content


def recall(messages, prompt_before):
    """(found, probes): strings each assistant message uses that only a tool output told it,
    and how many of them `prompt_before(i)`, the request text before message i, shows."""
    found = probes = 0
    tool_text = other = ""
    for i, m in enumerate(messages):
        t = text_of(m)
        if m["role"] == "assistant":
            prompt = prompt_before(i)
            for s in salient(t):
                if s in tool_text and s not in other:
                    probes += 1
                    found += s in prompt
            other += t
        elif m["role"] == "tool":
            tool_text += t
        else:
            other += t
    return found, probes


def relevance(messages, width):
    shown, kept_cost, view_cost = [], 0, 0
    context, command = "", ""
    for i, m in enumerate(messages):
        t = text_of(m)
        if m["role"] == "tool" and VIEW.search(command) and len(t) > 2000:
            lines = t.split("\n")
            terms = {w for s in salient(context + "\n" + command) for w in IDENT.findall(s)}
            keep = set(range(min(5, len(lines)))) | set(range(max(0, len(lines) - 3), len(lines)))
            for j, line in enumerate(lines):
                if set(IDENT.findall(line)) & terms:
                    keep |= set(range(max(0, j - width), min(len(lines), j + width + 1)))
            cut = "\n".join(line for j, line in enumerate(lines) if j in keep)
            carried = sum(1 for x in messages[i:] if x["role"] == "assistant")
            view_cost += len(t) * carried
            kept_cost += len(cut) * carried
            shown.append(cut)
        else:
            shown.append(t)
            if m["role"] != "tool":
                context += "\n" + t
        if m["role"] == "assistant":
            for call in m.get("tool_calls") or []:
                command = call["function"]["arguments"]
    return shown, kept_cost, view_cost


def recency(messages, newest):
    tools = [i for i, m in enumerate(messages) if m["role"] == "tool"]

    def prompt_before(i):
        recent = set([j for j in tools if j < i][-newest:])
        return "\n".join(
            text_of(messages[j]) for j in range(i) if messages[j]["role"] != "tool" or j in recent
        )

    return recall(messages, prompt_before)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.normpath(os.path.join(here, "../../../shared/data/transcripts/mini-swe-agent-gpt5mini"))
    folder = sys.argv[1] if len(sys.argv) > 1 else default
    sessions = [json.load(open(f))["messages"] for f in sorted(glob.glob(folder + "/*.json"))]
    if not sessions:
        sys.exit(f"no *.json trajectories in {folder}")
    print(f"{len(sessions)} sessions in {folder}")
    print("relevance (lines near identifiers named before the view):")
    for width in (0, 4, 8, 12):
        found = probes = kept = cost = 0
        for messages in sessions:
            shown, k, c = relevance(messages, width)
            f, p = recall(messages, lambda i, shown=shown: "\n".join(shown[:i]))
            found, probes, kept, cost = found + f, probes + p, kept + k, cost + c
        print(f"  +-{width:2} lines: file-view cost kept {kept / cost:.3f}, recall {found / probes:.4f} ({probes} probes)")
    print("recency (only the newest K outputs shown):")
    for newest in (2, 5, 8, 12, 20):
        found = probes = 0
        for messages in sessions:
            f, p = recency(messages, newest)
            found, probes = found + f, probes + p
        print(f"  K = {newest:2}: recall {found / probes:.4f}")


if __name__ == "__main__":
    main()
