"""One Chat Completions request through each ctxgc proxy named, each carrying a 949 KB build log
as a tool output, then a look at what the scripted upstream (scripts/conformance/upstream.py)
received: one request per proxy, each log trimmed to under a quarter with its error line and
its exit code kept. Standard library only.

Usage: python trimmed_request.py RECORD PORT [PORT...]
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request

LOG = "".join(f"compiling module {i} of 30000\n" for i in range(30000))
LOG += "error[E0308]: mismatched types at src/lib.rs:42\nexit code 101\n"


def send(port: str, n: int) -> None:
    body = {
        "model": "gpt-5-mini",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            # One session per proxy: the upstream's script follows each from its start.
            {"role": "user", "content": f"Build the project and fix what fails ({n})."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "shell", "arguments": "{\"command\": \"cargo build\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": LOG},
        ],
        "tools": [{"type": "function", "function": {"name": "shell", "parameters": {
            "type": "object", "properties": {"command": {"type": "string"}}}}}],
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "authorization": "Bearer sk-test-release"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.load(response)["choices"][0]["message"], port


def main() -> int:
    record, ports = sys.argv[1], sys.argv[2:]
    for n, port in enumerate(ports):
        send(port, n)
    sent: list[dict] = []
    for _ in range(50):  # the upstream appends its record as it answers
        if os.path.exists(record):
            with open(record) as lines:
                sent = [json.loads(line) for line in lines]
        if len(sent) == len(ports):
            break
        time.sleep(0.1)
    assert len(sent) == len(ports), f"the upstream saw {len(sent)} requests, not {len(ports)}"
    for request in sent:
        tool = next(m for m in request["body"]["messages"] if m["role"] == "tool")["content"]
        assert len(tool) < len(LOG) / 4, f"{len(tool):,} bytes: not trimmed"
        assert "error[E0308]" in tool and "exit code 101" in tool, tool[:500]
    print(f"{len(ports)} request(s) proxied, each {len(LOG):,}-byte tool output sent as "
          + ", ".join(f"{len(next(m for m in r['body']['messages'] if m['role'] == 'tool')['content']):,}"
                      for r in sent) + " bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
