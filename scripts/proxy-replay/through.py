"""Replays sessions through a proxy: the two ends of `scripts/proxy-replay/run.sh`.

`through.py upstream PORT` is the fake upstream behind the proxy. It speaks the Chat Completions
wire protocol over a socket: it answers every POST to /v1/chat/completions with a valid
completion, and keeps the last body it received (with when it arrived and when it answered) for
`GET /last`.

`through.py policy --via URL --upstream URL --stats FILE --model M` is a replay-lab exec policy
(crates/ctxgc-replay/src/policies/exec.rs): for each line {"session", "window", "messages"}
it posts the agent's own history, as the agent would, to `--via` (the proxy, or the upstream
itself for the direct row), then fetches what the upstream received and answers with its
messages: the replay lab then prices and checks what the provider would have been sent. Per
request it appends {"session", "stable", "ms"} to FILE: whether the messages sent extend those
of the session's previous request (the provider's prompt cache survives), and the time the
request spent outside the client and the upstream (client to upstream, then upstream to client).

Requests must go one at a time (run.sh sets RAYON_NUM_THREADS=1): /last is the body of the
request in flight.
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def upstream(port):
    last = {"body": None, "received": 0.0, "answered": 0.0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # One send per response, no Nagle: else delayed ACKs add 40 ms to what is measured.
        wbufsize = 1 << 16
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def _send(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            with lock:
                snapshot = dict(last)
            if self.path == "/last" and snapshot["body"] is not None:
                self._send(200, snapshot)
            else:
                self._send(404, {"error": {"message": "nothing received yet"}})

        def do_POST(self):
            received = time.time()
            length = int(self.headers.get("content-length", "0"))
            raw = self.rfile.read(length)
            if not self.path.split("?")[0].endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"unknown path {self.path}"}})
                return
            try:
                body = json.loads(raw)
                messages = body["messages"]
            except (ValueError, KeyError) as e:
                self._send(400, {"error": {"message": f"invalid body: {e}", "type": "invalid_request_error"}})
                return
            answer = {
                "id": "chatcmpl-replay",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", ""),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
            with lock:
                last["body"] = {"messages": messages, "tools": body.get("tools")}
                last["received"] = received
                last["answered"] = time.time()
            self._send(200, answer)

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def post(url, path, body=None, timeout=120):
    parsed = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=timeout)
    headers = {"content-type": "application/json", "authorization": "Bearer sk-replay-not-a-key"}
    if body is None:
        conn.request("GET", path)
    else:
        # Bytes, so http.client sends the headers and the body in one segment.
        data = json.dumps(body).encode()
        conn.request("POST", parsed.path.rstrip("/") + path, body=data, headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data


def as_sent(messages):
    """The messages as the agent sent them. A text-protocol agent's commands (the replay lab's
    implicit calls) were text in its reply, and their outputs came back as user messages."""
    implicit = set()
    sent = []
    for m in messages:
        calls = m.get("tool_calls") or []
        if m.get("role") == "assistant" and calls and all(c.get("implicit") for c in calls):
            implicit.update(c["id"] for c in calls)
            sent.append({"role": "assistant", "content": m.get("content") or ""})
        elif m.get("role") == "tool" and m.get("tool_call_id") in implicit:
            sent.append({"role": "user", "content": m.get("content") or ""})
        else:
            sent.append(m)
    return sent


def policy(via, upstream_url, stats_path, model):
    previous = {}
    stats = open(stats_path, "a")
    for line in sys.stdin:
        request = json.loads(line)
        session, messages = request["session"], as_sent(request["messages"])
        body = {"model": model, "messages": messages}
        # The body's size, measured outside the timed span: the added time grows with it.
        size = len(json.dumps(body).encode())
        sent = time.time()
        status, data = post(via, "/chat/completions", body)
        back = time.time()
        if status != 200:
            print(f"through: {via} answered {status}: {data[:300]!r}", file=sys.stderr)
            sys.stdout.write(json.dumps(messages) + "\n")
            sys.stdout.flush()
            continue
        status, data = post(upstream_url, "/last")
        last = json.loads(data)
        forwarded = last["body"]["messages"]
        ms = ((last["received"] - sent) + (back - last["answered"])) * 1000
        before = previous.get(session)
        stable = before is None or forwarded[: len(before)] == before
        previous[session] = forwarded
        stats.write(json.dumps({"session": session, "stable": stable, "ms": ms, "bytes": size}) + "\n")
        stats.flush()
        sys.stdout.write(json.dumps(forwarded) + "\n")
        sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    up = sub.add_parser("upstream")
    up.add_argument("port", type=int)
    pol = sub.add_parser("policy")
    pol.add_argument("--via", required=True)
    pol.add_argument("--upstream", required=True)
    pol.add_argument("--stats", required=True)
    pol.add_argument("--model", default="gpt-5-mini")
    pol.add_argument("--label", default="proxy", help="the row's name (the replay names it by the last word)")
    args = parser.parse_args()
    if args.mode == "upstream":
        upstream(args.port)
    else:
        policy(args.via, args.upstream, args.stats, args.model)


if __name__ == "__main__":
    main()
