#!/usr/bin/env python3
"""A scripted OpenAI Responses upstream for driving Codex CLI through a tool-using session.

It answers POST /v1/responses with a Server-Sent Events stream (`response.created`,
`response.output_item.added` / `.done` for each item, `response.completed` with usage), the
way the Responses API streams. The reply depends only on how many tool outputs the request's
`input` already holds, so a whole session is scripted: a few shell calls with large and failing
outputs (two of them in parallel), then a final answer. Usage is estimated from the request
body (about 4 bytes a token) and the cached part from the longest prefix shared with an
earlier request of the same `prompt_cache_key`, in 128-token steps from 1,024, as OpenAI
reports it. Loopback only; standard library only.

Usage: upstream.py PORT [SCRIPT]   (SCRIPT: `default` or `long`)
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCRIPTS = {
    "default": [
        [("exec_command", "seq 1 3000 | sed 's/^/line /'")],
        [("exec_command", "printf 'ok\\n%.0s' $(seq 1 400); echo 'ERROR: disk quota exceeded at step 217' >&2; printf 'ok\\n%.0s' $(seq 1 400); exit 3")],
        [("exec_command", "ls -la /"), ("exec_command", "git --version")],
    ],
    "long": [
        [("exec_command", "seq 1 %d | awk '{print \"2025-12-02T09:00:00Z INFO request \" $1 \" served in \" $1%%97 \" ms\"}'" % n)]
        for n in (500, 1500, 2500, 800, 4000)
    ] + [[("exec_command", "echo done")]],
}

earlier = {}  # prompt_cache_key -> list of earlier bodies
steps = {}  # prompt_cache_key -> script steps issued


def shared_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length)
        if not self.path.rstrip("/").endswith("/responses"):
            self.send_error(404)
            return
        body = json.loads(raw)
        items = body.get("input", [])
        outputs = sum(1 for i in items if i.get("type", "").endswith("_output"))
        script = SCRIPTS[self.server.script]
        key = body.get("prompt_cache_key", "")
        # Progress is kept per session, not read off the input: the client's own compaction
        # drops the earlier calls and outputs from it.
        step = steps.get(key, 0)
        past = earlier.setdefault(key, [])
        shared = max((shared_prefix(p, raw) for p in past), default=0)
        past.append(raw)
        input_tokens = max(1, len(raw) // 4)
        cached = shared // 4
        cached = cached // 128 * 128 if cached >= 1024 else 0
        rid = "resp_%06d" % (len(past) + 1000 * len(earlier))
        out_items = []
        last = items[-1] if items else {}
        last_text = " ".join(c.get("text", "") for c in last.get("content", []) if isinstance(c, dict)) if last.get("type", "message") == "message" and last.get("role") == "user" else ""
        if outputs and ("summar" in last_text.lower() or "compact" in last_text.lower() or "handoff" in last_text.lower()):
            # The client's own compaction: it asks for a summary of the history.
            out_items.append({"type": "message", "id": "msg_" + rid, "role": "assistant", "status": "completed",
                              "content": [{"type": "output_text", "text": "Summary: ran %d scripted steps; the logs were long." % step, "annotations": []}]})
        elif step < len(script):
            steps[key] = step + 1
            out_items.append({"type": "reasoning", "id": "rs_%s_%d" % (rid, step), "summary": [{"type": "summary_text", "text": "Step %d of the script." % (step + 1)}]})
            for j, (name, command) in enumerate(script[step]):
                out_items.append({
                    "type": "function_call", "id": "fc_%s_%d" % (rid, j), "status": "completed",
                    "call_id": "call_%d_%d" % (step, j), "name": name,
                    "arguments": json.dumps({"cmd": command}),
                })
        else:
            out_items.append({"type": "message", "id": "msg_" + rid, "role": "assistant", "status": "completed",
                              "content": [{"type": "output_text", "text": "Done: the script ran to its end.", "annotations": []}]})
        usage = {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": cached},
                 "output_tokens": 20 * len(out_items), "output_tokens_details": {"reasoning_tokens": 10},
                 "total_tokens": input_tokens + 20 * len(out_items)}
        events = [("response.created", {"type": "response.created", "response": {"id": rid, "object": "response", "status": "in_progress", "output": []}})]
        for n, item in enumerate(out_items):
            events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": n, "item": item}))
            events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": n, "item": item}))
        events.append(("response.completed", {"type": "response.completed", "response": {"id": rid, "object": "response", "status": "completed", "output": out_items, "usage": usage}}))
        payload = b"".join(
            b"event: " + name.encode() + b"\ndata: " + json.dumps(dict(data, sequence_number=i)).encode() + b"\n\n"
            for i, (name, data) in enumerate(events)
        )
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        # Codex may list models; answer with an empty list.
        payload = json.dumps({"object": "list", "data": []}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.script = sys.argv[2] if len(sys.argv) > 2 else "default"
    server.serve_forever()
