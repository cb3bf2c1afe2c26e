#!/usr/bin/env python3
"""What a client's own log holds of what it sent: the text of the last request a recording
upstream received (upstream.py's RECORD) against the same conversation as ctxgc imports the
client's log (`ctxgc import --out DIR`). Compared line by line (a `<system-reminder>` wrapper,
spacing and the order of a JSON object's keys aside, since a client merges reminders and
re-serialises tool inputs), it prints the characters of the request's messages, the share the
imported log lacks, and the largest texts it lacks.

Usage: log_vs_request.py RECORD IMPORTED.jsonl [MAX_LACKING_PERCENT]
With a maximum, exits 1 when the log lacks more than that share.
"""
import json
import re
import sys


def texts(content):
    """Every text of a message's content, tool inputs and results included."""
    if isinstance(content, str):
        return [content]
    out = []
    for block in content or []:
        kind = block.get("type")
        if kind in ("text", "input_text", "output_text"):
            out.append(block.get("text", ""))
        elif kind == "tool_result":
            out.extend(texts(block.get("content")))
        elif kind == "tool_use":
            out.append(json.dumps(block.get("input", {})))
        elif kind == "thinking":
            out.append(block.get("thinking", ""))
    return out


def request_texts(body):
    """Every text of a request's conversation: Messages `messages`, or Responses `input`."""
    out = []
    for m in body.get("messages", []):
        out.extend(texts(m.get("content")))
    for item in body.get("input", []) if isinstance(body.get("input"), list) else []:
        kind = item.get("type", "message")
        if kind == "message":
            out.extend(texts(item.get("content")))
        elif kind in ("function_call", "custom_tool_call"):
            out.append(item.get("arguments") or item.get("input") or "")
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            out.extend(texts(output) if isinstance(output, list) else [output or ""])
    return out


def lines(text):
    """The comparable lines of a text."""
    try:
        value = json.loads(text)
        if isinstance(value, (dict, list)):
            return [json.dumps(value, sort_keys=True, separators=(",", ":"))]
    except ValueError:
        pass
    text = re.sub(r"</?system-reminder>", "", text)
    return [re.sub(r"\s+", " ", line).strip() for line in text.splitlines() if line.strip()]


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def main():
    record, imported = sys.argv[1], sys.argv[2]
    last = [json.loads(line) for line in open(record)][-1]["body"]
    sent = request_texts(last)
    logged = set()
    for line in open(imported):
        for s in strings(json.loads(line)):
            logged.update(lines(s))
    total = lacking = 0
    lacks = []
    for t in sent:
        size = sum(len(line) for line in lines(t))
        missing = sum(len(line) for line in lines(t) if line not in logged)
        total += size
        lacking += missing
        if missing:
            lacks.append((missing, t))
    print(f"request messages: {total} characters (compared by line); the log lacks {lacking} "
          f"({100.0 * lacking / max(total, 1):.1f}%)")
    for missing, t in sorted(lacks, key=lambda x: x[0], reverse=True)[:6]:
        print(f"  {missing:>7}  {t[:90]!r}")
    if len(sys.argv) > 3 and 100.0 * lacking / max(total, 1) > float(sys.argv[3]):
        sys.exit(1)


if __name__ == "__main__":
    main()
