"""Every id the model sees answers a recall, from either of two replicas on one store.

Three modes, driven by scripts/proxy-replay/replicas.sh:

`replicas.py upstream PORT` is the scripted upstream behind both replicas. It speaks the Chat
Completions wire protocol over a socket and answers "ok", except to a request whose last message
is the user's `ctxgc-check: recall ID`, which it answers with a call of `recall_tool_result` for
that id (the tool the replicas inject): the replica runs the call itself and sends the answer
back up, which the upstream keeps for `GET /recalled`. It keeps the last body for `GET /last`.

`replicas.py policy --via URL+URL --upstream URL --out FILE` is a replay-lab exec policy
(crates/ctxgc-replay/src/policies/exec.rs): each request of a session goes to the next replica
in turn, and what reached the upstream is answered back to the lab. It appends to FILE, per
request, the session, the messages the agent sent and every id (`r-` and 16 hex digits) the
forwarded request showed, with the kind of text that named it.

`replicas.py recall --via URL+URL --upstream URL --out FILE` then asks, for every id of every
session, from the replica the session did not use last, and prints what answered and what did
not (exit status 1 when any id did not answer).
"""
import argparse
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The lab's exec-policy side is through.py's: its HTTP client and the agent's own messages.
from through import as_sent, post as call

ID = re.compile(r"\br-[0-9a-f]{16}\b")
CHECK = "ctxgc-check: recall "


def upstream(port):
    state = {"last": None, "recalled": []}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

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
                if self.path == "/last" and state["last"] is not None:
                    self._send(200, state["last"])
                elif self.path == "/recalled":
                    self._send(200, state["recalled"])
                    state["recalled"] = []
                else:
                    self._send(404, {"error": {"message": "nothing received yet"}})

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            try:
                body = json.loads(raw)
                messages = body["messages"]
            except (ValueError, KeyError) as e:
                self._send(400, {"error": {"message": f"invalid body: {e}", "type": "invalid_request_error"}})
                return
            last = messages[-1] if messages else {}
            message = {"role": "assistant", "content": "ok"}
            finish = "stop"
            text = last.get("content") if isinstance(last.get("content"), str) else ""
            if last.get("role") == "user" and text.startswith(CHECK):
                names = [t.get("function", {}).get("name") for t in body.get("tools") or []]
                if "recall_tool_result" not in names:
                    self._send(400, {"error": {"message": "recall_tool_result was not offered", "type": "invalid_request_error"}})
                    return
                rid = text[len(CHECK):].strip()
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "call_check", "type": "function", "function": {"name": "recall_tool_result", "arguments": json.dumps({"id": rid})}}],
                }
                finish = "tool_calls"
            elif last.get("role") == "tool" and last.get("tool_call_id") == "call_check":
                with lock:
                    state["recalled"].append(last.get("content"))
            with lock:
                state["last"] = {"messages": messages}
            self._send(200, {
                "id": "chatcmpl-replicas", "object": "chat.completion", "created": 0,
                "model": body.get("model", ""),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            })

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def kind_of(line):
    """What kind of text names an id: a trim marker, a repeat pointer, an abstract, a summary."""
    if "same as the result of" in line or "same output as the later result of" in line:
        return "repeat pointer"
    if "trimmed" in line or "cut" in line or "omitted" in line:
        return "trim marker"
    return "abstract or other"


def ids_of(messages):
    found = {}
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        summary = "compacted into this summary" in (content or "")
        for line in (content or "").splitlines():
            for rid in ID.findall(line):
                found.setdefault(rid, "summary" if summary else kind_of(line))
    return found


def policy(vias, upstream_url, out_path, model):
    turn = {}
    out = open(out_path, "a")
    for line in sys.stdin:
        request = json.loads(line)
        session, messages = request["session"], as_sent(request["messages"])
        n = turn.get(session, 0)
        turn[session] = n + 1
        via = vias[n % len(vias)]
        status, data = call(via, "/chat/completions", {"model": model, "messages": messages})
        if status != 200:
            print(f"replicas: {via} answered {status}: {data[:300]!r}", file=sys.stderr)
            sys.stdout.write(json.dumps(messages) + "\n")
            sys.stdout.flush()
            continue
        _, data = call(upstream_url, "/last")
        forwarded = json.loads(data)["messages"]
        out.write(json.dumps({"session": session, "replica": n % len(vias), "messages": messages, "ids": ids_of(forwarded)}) + "\n")
        out.flush()
        sys.stdout.write(json.dumps(forwarded) + "\n")
        sys.stdout.flush()


def recall(vias, upstream_url, out_path, model):
    sessions = {}
    for line in open(out_path):
        row = json.loads(line)
        s = sessions.setdefault(row["session"], {"ids": {}, "messages": None, "replica": 0})
        for rid, kind in row["ids"].items():
            s["ids"].setdefault(rid, kind)
        s["messages"], s["replica"] = row["messages"], row["replica"]
    asked = answered = 0
    failed = {}
    by_kind = {}
    for name, s in sorted(sessions.items()):
        other = vias[(s["replica"] + 1) % len(vias)]
        for rid, kind in sorted(s["ids"].items()):
            messages = s["messages"] + [
                {"role": "assistant", "content": "Let me look at that again."},
                {"role": "user", "content": CHECK + rid},
            ]
            # The agent's own tool declared, so that the replica offers its tools beside it (these
            # agents' commands are text: they declare none).
            shell = {"type": "function", "function": {"name": "bash", "description": "Run a command", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}
            status, answer = call(other, "/chat/completions", {"model": model, "messages": messages, "tools": [shell]})
            _, data = call(upstream_url, "/recalled")
            got = json.loads(data)
            ok = status == 200 and len(got) == 1 and isinstance(got[0], str) and not got[0].startswith("error")
            asked += 1
            answered += ok
            k = by_kind.setdefault(kind, [0, 0])
            k[0] += 1
            k[1] += ok
            if not ok:
                failed.setdefault(kind, []).append(f"{name} {rid}: {status} {(got[0] if got else answer)!s:.200}")
    for kind, (n, ok) in sorted(by_kind.items()):
        print(f"{kind}: {ok} of {n} ids answered")
    print(f"all: {answered} of {asked} ids answered, each from the replica the session did not use last")
    for kind, lines in failed.items():
        for line in lines[:5]:
            print(f"  not answered ({kind}): {line}")
    return 0 if asked and answered == asked else 1


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    up = sub.add_parser("upstream")
    up.add_argument("port", type=int)
    for mode in ("policy", "recall"):
        p = sub.add_parser(mode)
        p.add_argument("--via", required=True, help="the replicas' base URLs, joined by +")
        p.add_argument("--upstream", required=True)
        p.add_argument("--out", required=True)
        p.add_argument("--model", default="gpt-5-mini")
        p.add_argument("--label", default="replicas")
    args = parser.parse_args()
    if args.mode == "upstream":
        upstream(args.port)
        return 0
    vias = args.via.split("+")
    if args.mode == "policy":
        policy(vias, args.upstream, args.out, args.model)
        return 0
    return recall(vias, args.upstream, args.out, args.model)


if __name__ == "__main__":
    sys.exit(main())
