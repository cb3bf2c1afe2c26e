#!/usr/bin/env python3
"""A scripted upstream speaking the OpenAI Chat Completions, OpenAI Responses, Anthropic
Messages and Gemini generateContent APIs (JSON and SSE, gzip when the client accepts it), for
driving real clients through `ctxgc serve`. Loopback only; standard library only.

It enforces the rules the real APIs enforce on a conversation, answering a violation with the
real API's 400 and its text:
- every tool result answers a call made before it, and every call is answered (Chat: the
  results follow the assistant message; Anthropic: in the next message; Responses: anywhere
  after), no call id twice;
- Anthropic: at most 4 blocks with `cache_control`, each TTL "5m" or "1h" and no hour after five
  minutes (tools, system, messages); with `thinking` enabled, the assistant
  message of an ongoing tool loop starts with its thinking block.
- OpenAI: `prompt_cache_retention` is "in_memory" or "24h", and GPT-5.6 or later refuses it
  (those models take `prompt_cache_options` and breakpoints instead).
- Gemini: a function call turn comes right after a user turn or a function response turn, a
  function response turn right after a function call turn, with as many responses as calls;
  an API key (`x-goog-api-key` or `?key=`) is required; a thought signature the model sent with
  a call must come back with it.

The "model" follows a script per session (a session is the system text and the first user
text): shell calls with large outputs, a long log with an error line in the middle and exit 3,
two calls in parallel, the agent tools when the request offers them (a trim of the latest
result, a recall of a trimmed output by its id; through ctxgc's MCP server, a recall of the long
log's error line by the id its trim marker showed), more large outputs, then a final answer that
starts with "Done". Every request, its verdict and its response ids are appended to RECORD
(JSON lines) for `check.py`.

Usage: upstream.py PORT RECORD    (UPSTREAM_HOST: the address to bind, 127.0.0.1 by default)
"""
import base64
import gzip
import hashlib
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
SUBMIT = b"COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
# A task that asks for it gets a longer script (scripts/agent-histories/generate.sh).
LONG_RUN = b"Agent history run"
SESSIONS = {}  # session key -> steps issued
COUNTER = [0]

BIG_LOG = ("seq 1 %d | awk '{print \"2026-11-24T09:00:00Z INFO request \" $1 \" served in \" $1%%97 \" ms\"}'")
ERROR_LOG = ("for i in $(seq 1 1500); do echo \"2026-11-24T10:00:00Z INFO step $i ok\"; "
             "if [ $i = 700 ]; then echo '2026-11-24T10:00:01Z ERROR disk quota exceeded at step 700'; fi; done; exit 3")

# 741 lines, about 28 KB: over the proxy's trim of a shell output (about 24 KB), under what each
# client cuts itself (Claude Code 30,000 characters, Gemini CLI 40,000, Codex CLI its
# `max_output_tokens`); lines of their own, so no repeat pointer replaces them; no `$(...)`,
# which Gemini CLI refuses.
MID_LOG = ("seq 1 740 | awk '{print \"2026-11-24T11:00:00Z INFO task \" $1 \" done\"; "
           "if ($1 == 700) print \"2026-11-24T10:00:01Z ERROR disk quota exceeded at step 700\"}'")


def script(tools, raw=b""):
    """The steps of a session: each a list of (tool, arguments) calls, or None for the answer."""
    shell = shell_tool(tools)
    steps = [
        [shell("seq 1 20000 | sed 's/^/line /'")],
        [shell(ERROR_LOG)],
        [shell("ls -la /"), shell("git --version || true")],
    ]
    if "trim_tool_result" in tools:
        steps.append([("trim_tool_result", {"summary": "ls and git ran fine; nothing to keep."})])
    if "recall_tool_result" in tools:
        steps.append([("recall_tool_result", {"id": "$TRIMMED_ID", "lines": "1-5"})])
    # ctxgc's MCP server, as the client names its tool (`mcp__ctxgc__recall_tool_result`): the
    # error line of the long log, by the id its trim marker showed.
    mcp = next((t for t in tools if t.endswith("recall_tool_result") and t != "recall_tool_result"), None)
    deferred = re.search(rb"(mcp__\w*recall_tool_result)", raw)
    if deferred and "ToolSearch" in tools:
        # Claude Code defers MCP tools (its opening messages list them): a model loads one with
        # ToolSearch before calling it.
        mcp = deferred.group(1).decode()
        steps.append([("ToolSearch", {"query": "select:" + mcp, "max_results": 1})])
    if mcp:
        # A log short enough that no client cuts it (Claude Code keeps a result under 30,000
        # characters in the conversation), its error at line 701: the proxy trims it, and the
        # model recalls the error line by the id its marker showed, right after.
        name, args = shell(MID_LOG)
        steps.append([(name, args)])
        steps.append([(mcp, {"id": "$MARKER_ID", "pattern": "ERROR disk quota"})])
    steps += [[shell(BIG_LOG % n)] for n in (3000, 4000, 2500, 5000)]
    return steps


def shell_tool(tools):
    """The client's shell tool, and how its arguments are spelled."""
    for name in ("Bash", "exec_command", "shell_command", "shell", "bash", "terminal", "run_command", "run_shell_command"):
        if name in tools:
            break
    else:
        name = next((t for t in tools if not t.endswith(("trim_tool_result", "recall_tool_result"))), "bash")

    def call(command):
        if name == "Bash":
            return name, {"command": command, "description": "Run a scripted step"}
        if name == "exec_command":
            return name, {"cmd": command}
        if name == "shell":
            return name, {"command": ["bash", "-lc", command]}
        return name, {"command": command}
    return call


def fail(message, kind="invalid_request_error"):
    return 400, message, kind


# --- Validation, per API, with the real APIs' texts ----------------------------------------

def explicit_breakpoint_model(model):
    """GPT-5.6 or later (`gpt-5.6-terra`, `gpt-6`)."""
    m = re.match(r"gpt-(\d+)(?:\.(\d+))?", (model or "").rsplit("/", 1)[-1])
    return bool(m) and (int(m.group(1)), int(m.group(2) or 0)) >= (5, 6)


def check_retention(body):
    """OpenAI's `prompt_cache_retention`: `in_memory` or `24h`, on the models before GPT-5.6."""
    retention = body.get("prompt_cache_retention")
    if retention is not None and explicit_breakpoint_model(body.get("model")):
        return fail("prompt_cache_retention is not supported on this model", "invalid_request_error")
    if retention is not None and retention not in ("in_memory", "24h"):
        return fail("Invalid value: '%s'. Supported values are: 'in_memory' and '24h'." % retention, "invalid_request_error")
    return None


def check_chat(body):
    bad = check_retention(body)
    if bad:
        return bad
    messages = body.get("messages") or []
    open_calls, seen = [], set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid not in open_calls:
                return fail("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
            open_calls.remove(cid)
            continue
        if open_calls:
            return fail("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + ", ".join(open_calls))
        if role == "assistant":
            for c in m.get("tool_calls") or []:
                if c.get("id") in seen:
                    return fail("Duplicate tool_call id %s in messages[%d]." % (c.get("id"), i))
                seen.add(c.get("id"))
                open_calls.append(c.get("id"))
    if open_calls:
        return fail("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + ", ".join(open_calls))
    return None


CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call", "tool_search_call")


def check_responses(body):
    bad = check_retention(body)
    if bad:
        return bad
    items = body.get("input")
    if not isinstance(items, list):
        return None
    calls, answered = [], set()
    for item in items:
        kind = item.get("type", "message")
        if kind in CALL_TYPES:
            calls.append(item.get("call_id"))
        elif kind.endswith("_call_output"):
            cid = item.get("call_id")
            if cid not in calls:
                return fail("No tool call found for function call output with call_id %s." % cid)
            answered.add(cid)
    for cid in calls:
        if cid not in answered and not body.get("previous_response_id"):
            return fail("No tool output found for function call %s." % cid)
    return None


def blocks(content):
    return content if isinstance(content, list) else [{"type": "text", "text": content or ""}]


def check_messages(body):
    messages = body.get("messages") or []
    breakpoints = 0
    system = body.get("system")
    for b in system if isinstance(system, list) else []:
        breakpoints += "cache_control" in b
    for t in body.get("tools") or []:
        breakpoints += "cache_control" in t
    for m in messages:
        for b in blocks(m.get("content")):
            breakpoints += isinstance(b, dict) and "cache_control" in b
    if breakpoints > 4:
        return fail("A maximum of 4 blocks with cache_control may be provided. Found %d." % breakpoints)
    # TTLs: "5m" (the default) or "1h"; in processing order (tools, system, messages) an
    # hour never comes after five minutes.
    seen_short = False
    marked = [("tools.%d" % i, t) for i, t in enumerate(body.get("tools") or [])]
    marked += [("system.%d" % i, b) for i, b in enumerate(system if isinstance(system, list) else [])]
    for i, m in enumerate(messages):
        marked += [("messages.%d.content.%d" % (i, j), b) for j, b in enumerate(blocks(m.get("content")))]
    for where, b in marked:
        cc = b.get("cache_control") if isinstance(b, dict) else None
        if not isinstance(cc, dict):
            continue
        ttl = cc.get("ttl", "5m")
        if ttl not in ("5m", "1h"):
            return fail("%s.cache_control.ttl: Input should be '5m' or '1h'" % where)
        if ttl == "1h" and seen_short:
            return fail("%s.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`, `system`, `messages`." % where)
        seen_short |= ttl == "5m"
    if messages and messages[0].get("role") != "user":
        return fail("messages: first message must use the \"user\" role")
    thinking = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
    for i, m in enumerate(messages):
        content = blocks(m.get("content"))
        uses = [b.get("id") for b in content if b.get("type") == "tool_use"]
        if m.get("role") == "assistant" and uses:
            following = messages[i + 1] if i + 1 < len(messages) else None
            results = [b.get("tool_use_id") for b in blocks(following.get("content"))
                       if b.get("type") == "tool_result"] if following and following.get("role") == "user" else []
            missing = [u for u in uses if u not in results]
            if missing and following is not None:
                return fail("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message." % (i, ", ".join(missing)))
        if m.get("role") == "user":
            previous = messages[i - 1] if i > 0 else {}
            offered = [b.get("id") for b in blocks(previous.get("content")) if b.get("type") == "tool_use"] if previous.get("role") == "assistant" else []
            for j, b in enumerate(content):
                if b.get("type") == "tool_result" and b.get("tool_use_id") not in offered:
                    return fail("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message." % (i, j, b.get("tool_use_id")))
    # The assistant turn of the ongoing tool loop starts with its thinking block.
    if thinking and messages and messages[-1].get("role") == "user":
        last_results = any(b.get("type") == "tool_result" for b in blocks(messages[-1].get("content")))
        if last_results and len(messages) >= 2 and messages[-2].get("role") == "assistant":
            first = blocks(messages[-2].get("content"))[0]
            if first.get("type") not in ("thinking", "redacted_thinking"):
                return fail("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking" % (len(messages) - 2, first.get("type")))
    return None


def gemini_fail(message, code=400, status="INVALID_ARGUMENT"):
    return code, message, status


def check_gemini(body):
    contents = body.get("contents") or []

    def count(turn, kind):
        return sum(1 for p in turn.get("parts") or [] if isinstance(p, dict) and kind in p)
    for i, turn in enumerate(contents):
        calls, responses = count(turn, "functionCall"), count(turn, "functionResponse")
        before = contents[i - 1] if i > 0 else None
        if calls and (before is None or before.get("role") == "model"):
            return gemini_fail("Please ensure that function call turn comes immediately after a user turn or after a function response turn.")
        if responses:
            asked = count(before, "functionCall") if before is not None and before.get("role") == "model" else 0
            if not asked:
                return gemini_fail("Please ensure that function response turn comes immediately after a function call turn.")
            if asked != responses:
                return gemini_fail("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.")
        if calls and i + 1 < len(contents) and count(contents[i + 1], "functionResponse") != calls:
            return gemini_fail("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.")
        # The signature this upstream put on a turn's first call comes back with it.
        if turn.get("role") == "model" and calls:
            first = next(p for p in turn["parts"] if "functionCall" in p)
            if not str(first.get("thoughtSignature", "")).startswith("c2ln"):
                return gemini_fail("Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:%s` , position %d. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details." % (first["functionCall"].get("name"), i + 1))
    return None


# --- The script -----------------------------------------------------------------------------

def text_of(content):
    if isinstance(content, str):
        return content
    out = []
    for b in content or []:
        if isinstance(b, dict):
            for field in ("text", "content"):
                if isinstance(b.get(field), str):
                    out.append(b[field])
                    break
    return " ".join(out)


def session_key(api, body):
    if api == "gemini":
        system = text_of((body.get("systemInstruction") or {}).get("parts"))
        users = [text_of(c.get("parts")) for c in body.get("contents") or [] if c.get("role", "user") == "user"]
        first = next((u for u in users if u.strip()), "")
        return hashlib.sha256((system[:4000] + "\0" + first).encode()).hexdigest()[:16]
    if api == "responses":
        system = body.get("instructions") or ""
        items = body.get("input") if isinstance(body.get("input"), list) else [{"role": "user", "content": body.get("input") or ""}]
        users = [text_of(i.get("content")) for i in items if i.get("role") == "user"]
    else:
        system = body.get("system") or ""
        if isinstance(system, list):
            # Where breakpoints sit, and their TTLs, are not the session's identity.
            system = [{k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b
                      for b in system]
        msgs = body.get("messages") or []
        if api == "chat":
            system = " ".join(text_of(m.get("content")) for m in msgs if m.get("role") in ("system", "developer"))[:2000]
        users = [text_of(m.get("content")) for m in msgs if m.get("role") == "user"]
    first = next((u for u in users if u.strip()), "")
    return hashlib.sha256((json.dumps(system, sort_keys=True)[:4000] + "\0" + first).encode()).hexdigest()[:16]


def tool_names(api, body):
    names = []
    for t in body.get("tools") or []:
        for d in t.get("functionDeclarations") or []:
            names.append(d.get("name") or "")
        if t.get("type") == "namespace":
            # Responses namespaces (Codex's MCP servers): `{namespace}__{tool}`, called as the
            # tool's name within its namespace.
            names.extend("%s__%s" % (t.get("name"), inner.get("name")) for inner in t.get("tools") or [])
            continue
        names.append(t.get("name") or (t.get("function") or {}).get("name") or "")
    return [n for n in names if n]


def next_step(api, body, raw):
    """The calls (name, arguments) the model makes now, or None for the final answer."""
    tools = tool_names(api, body)
    if not tools or body.get("tool_choice") in ("none", {"type": "none"}):
        return None
    if ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode") == "NONE":
        return None
    key = session_key(api, body)
    with LOCK:
        step = SESSIONS.get(key, 0)
        steps = script(tools, raw)
        if SUBMIT in raw:
            # mini-swe-agent ends on a command, not on an answer without calls.
            steps.append([shell_tool(tools)("echo " + SUBMIT.decode())])
        if LONG_RUN in raw:
            # A history long enough that a client compacting at 75% of a 64K window (Hermes
            # 0.19.0's floor) does it twice.
            steps.append([shell_tool(tools)(BIG_LOG % 3500)])
        if step >= len(steps):
            return None
        SESSIONS[key] = step + 1
    calls = []
    for name, args in steps[step]:
        if args.get("id") == "$MARKER_ID":
            # The id the latest trim marker showed (not a pointer's or an abstract's).
            found = re.findall(rb"trimmed from [^\]]*?; id (r-[0-9a-f]{16})", raw)
            if not found:
                continue
            args = dict(args, id=found[-1].decode())
        if args.get("id") == "$TRIMMED_ID":
            found = re.findall(rb"r-[0-9a-f]{16}", raw)
            if not found:
                continue
            args = dict(args, id=found[-1].decode())
        calls.append((name, args))
    return calls or None


def new_id(prefix):
    with LOCK:
        COUNTER[0] += 1
        return "%s%06d" % (prefix, COUNTER[0])


def usage_of(raw):
    return max(1, len(raw) // 4)


# --- Replies --------------------------------------------------------------------------------

def sse(events):
    out = b""
    for name, data in events:
        if name:
            out += b"event: " + name.encode() + b"\n"
        out += b"data: " + (data if isinstance(data, bytes) else json.dumps(data).encode()) + b"\n\n"
    return out


def chat_reply(body, raw, calls):
    rid = new_id("chatcmpl-")
    n = usage_of(raw)
    usage = {"prompt_tokens": n, "completion_tokens": 20, "total_tokens": n + 20, "prompt_tokens_details": {"cached_tokens": 0}}
    tool_calls = [{"id": new_id("call_"), "type": "function", "function": {"name": name, "arguments": json.dumps(args)}} for name, args in calls or []]
    message = {"role": "assistant", "content": None if tool_calls else "Done: the script ran to its end."}
    if tool_calls:
        message["tool_calls"] = tool_calls
    finish = "tool_calls" if tool_calls else "stop"
    if not body.get("stream"):
        return "application/json", json.dumps({"id": rid, "object": "chat.completion", "created": 0, "model": body.get("model"),
                                               "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}).encode(), [rid]
    base = {"id": rid, "object": "chat.completion.chunk", "created": 0, "model": body.get("model")}
    chunks = [dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": None if tool_calls else ""}, "finish_reason": None}])]
    if tool_calls:
        for k, c in enumerate(tool_calls):
            chunks.append(dict(base, choices=[{"index": 0, "delta": {"tool_calls": [{"index": k, "id": c["id"], "type": "function", "function": {"name": c["function"]["name"], "arguments": ""}}]}, "finish_reason": None}]))
            chunks.append(dict(base, choices=[{"index": 0, "delta": {"tool_calls": [{"index": k, "function": {"arguments": c["function"]["arguments"]}}]}, "finish_reason": None}]))
    else:
        chunks.append(dict(base, choices=[{"index": 0, "delta": {"content": message["content"]}, "finish_reason": None}]))
    chunks.append(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": finish}]))
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append(dict(base, choices=[], usage=usage))
    return "text/event-stream", sse([(None, c) for c in chunks] + [(None, b"[DONE]")]), [rid]


def responses_reply(body, raw, calls):
    rid = new_id("resp_")
    n = usage_of(raw)
    usage = {"input_tokens": n, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": n + 20}
    items = []
    namespaces = {t.get("name") for t in body.get("tools") or [] if t.get("type") == "namespace"}
    for name, args in calls or []:
        item = {"type": "function_call", "id": new_id("fc_"), "status": "completed", "call_id": new_id("call_"), "name": name, "arguments": json.dumps(args)}
        namespace, _, inner = name.rpartition("__")
        if namespace in namespaces:
            item.update(name=inner, namespace=namespace)
        items.append(item)
    if not items:
        items.append({"type": "message", "id": new_id("msg_"), "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": "Done: the script ran to its end.", "annotations": []}]})
    response = {"id": rid, "object": "response", "created_at": 0, "status": "completed", "model": body.get("model"), "output": items,
                "usage": usage, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None, "incomplete_details": None}
    if not body.get("stream"):
        return "application/json", json.dumps(response).encode(), [rid]
    events = [("response.created", {"type": "response.created", "response": dict(response, status="in_progress", output=[], usage=None)}),
              ("response.in_progress", {"type": "response.in_progress", "response": dict(response, status="in_progress", output=[], usage=None)})]
    for k, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": k, "item": dict(item, status="in_progress", content=[])}))
            events.append(("response.content_part.added", {"type": "response.content_part.added", "item_id": item["id"], "output_index": k, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}))
            events.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"], "output_index": k, "content_index": 0, "delta": text, "logprobs": []}))
            events.append(("response.output_text.done", {"type": "response.output_text.done", "item_id": item["id"], "output_index": k, "content_index": 0, "text": text, "logprobs": []}))
            events.append(("response.content_part.done", {"type": "response.content_part.done", "item_id": item["id"], "output_index": k, "content_index": 0, "part": item["content"][0]}))
        else:
            events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": k, "item": dict(item, status="in_progress", arguments="")}))
            events.append(("response.function_call_arguments.delta", {"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": k, "delta": item["arguments"]}))
            events.append(("response.function_call_arguments.done", {"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": k, "arguments": item["arguments"], "name": item["name"]}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": k, "item": item}))
    events.append(("response.completed", {"type": "response.completed", "response": response}))
    return "text/event-stream", sse([(name, dict(data, sequence_number=i)) for i, (name, data) in enumerate(events)]), [rid]


def messages_reply(body, raw, calls):
    rid = new_id("msg_")
    n = usage_of(raw)
    usage = {"input_tokens": n, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 20}
    content = []
    if (body.get("thinking") or {}).get("type") in ("enabled", "adaptive"):
        content.append({"type": "thinking", "thinking": "Following the script.", "signature": "c2lnLQ" + rid})
    for name, args in calls or []:
        content.append({"type": "tool_use", "id": new_id("toolu_"), "name": name, "input": args})
    if not calls:
        content.append({"type": "text", "text": "Done: the script ran to its end."})
    stop = "tool_use" if calls else "end_turn"
    message = {"id": rid, "type": "message", "role": "assistant", "model": body.get("model"), "content": content,
               "stop_reason": stop, "stop_sequence": None, "usage": usage}
    if not body.get("stream"):
        return "application/json", json.dumps(message).encode(), [rid]
    events = [("message_start", {"type": "message_start", "message": dict(message, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))})]
    for k, b in enumerate(content):
        if b["type"] == "thinking":
            events.append(("content_block_start", {"type": "content_block_start", "index": k, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": k, "delta": {"type": "thinking_delta", "thinking": b["thinking"]}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": k, "delta": {"type": "signature_delta", "signature": b["signature"]}}))
        elif b["type"] == "tool_use":
            events.append(("content_block_start", {"type": "content_block_start", "index": k, "content_block": dict(b, input={})}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": k, "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": k, "content_block": {"type": "text", "text": ""}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": k, "delta": {"type": "text_delta", "text": b["text"]}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": k}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 20}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return "text/event-stream", sse(events), [rid]


def gemini_reply(body, raw, calls, stream):
    n = usage_of(raw)
    rid = new_id("gresp-")
    parts = []
    for k, (name, args) in enumerate(calls or []):
        part = {"functionCall": {"name": name, "args": args}}
        if k == 0:
            part["thoughtSignature"] = base64.b64encode(b"sig-" + rid.encode()).decode()
        parts.append(part)
    text = None if calls else "Done: the script ran to its end."
    usage = {"promptTokenCount": n, "cachedContentTokenCount": 0, "candidatesTokenCount": 20, "totalTokenCount": n + 20}

    def chunk(chunk_parts, last):
        c = {"candidates": [{"content": {"role": "model", "parts": chunk_parts}, "index": 0}],
             "usageMetadata": usage, "modelVersion": "gemini-2.5-pro", "responseId": rid}
        if last:
            c["candidates"][0]["finishReason"] = "STOP"
        return c
    if not stream:
        return "application/json", json.dumps(chunk(parts or [{"text": text}], True)).encode(), [rid]
    if text:
        chunks = [chunk([{"text": text[:6]}], False), chunk([{"text": text[6:]}], True)]
    else:
        chunks = [chunk([{"text": "Running it.", "thought": True}], False), chunk(parts, True)]
    # Google's event streams end their events with CRLF.
    return "text/event-stream", b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks), [rid]


GEMINI_PATH = re.compile(r"^/v1(?:beta)?/models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, content_type, payload):
        if content_type == "application/json" and "gzip" in (self.headers.get("accept-encoding") or ""):
            payload = gzip.compress(payload)
            self.send_response(status)
            self.send_header("content-encoding", "gzip")
        else:
            self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        self.reply(200, "application/json", json.dumps({"object": "list", "data": [], "has_more": False}).encode())

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        if (self.headers.get("content-encoding") or "") == "gzip":
            raw = gzip.decompress(raw)
        path = self.path.split("?")[0].rstrip("/")
        try:
            body = json.loads(raw)
        except ValueError:
            return self.reply(400, "application/json", json.dumps({"error": {"message": "We could not parse the JSON body of your request.", "type": "invalid_request_error"}}).encode())
        if path.endswith("/count_tokens"):
            return self.reply(200, "application/json", json.dumps({"input_tokens": usage_of(raw)}).encode())
        gemini = GEMINI_PATH.match(path)
        if gemini:
            return self.gemini(gemini.group(2), body, raw)
        api, check, answer = {
            "/v1/chat/completions": ("chat", check_chat, chat_reply),
            "/v1/responses": ("responses", check_responses, responses_reply),
            "/v1/messages": ("messages", check_messages, messages_reply),
        }.get(path, (None, None, None))
        if api is None:
            return self.reply(404, "application/json", b'{"error":{"message":"not found"}}')
        verdict = check(body)
        record = {"api": api, "path": path, "session": session_key(api, body), "stream": bool(body.get("stream")),
                  "status": 200, "body": body, "sha256": hashlib.sha256(raw).hexdigest()}
        if verdict:
            status, message, kind = verdict
            record.update(status=status, error=message)
            payload = {"type": "error", "error": {"type": kind, "message": message}} if api == "messages" else {"error": {"message": message, "type": kind, "param": None, "code": None}}
            self.write_record(record)
            return self.reply(status, "application/json", json.dumps(payload).encode())
        content_type, payload, ids = answer(body, raw, next_step(api, body, raw))
        record["response_ids"] = ids
        self.write_record(record)
        self.reply(200, content_type, payload)

    def gemini(self, method, body, raw):
        query = self.path.partition("?")[2]
        if not self.headers.get("x-goog-api-key") and "key=" not in query:
            message = "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API."
            return self.reply(403, "application/json", json.dumps({"error": {"code": 403, "message": message, "status": "PERMISSION_DENIED"}}).encode())
        if method == "countTokens":
            return self.reply(200, "application/json", json.dumps({"totalTokens": usage_of(raw)}).encode())
        record = {"api": "gemini", "path": self.path.split("?")[0], "session": session_key("gemini", body),
                  "stream": method == "streamGenerateContent", "status": 200, "body": body,
                  "sha256": hashlib.sha256(raw).hexdigest()}
        verdict = check_gemini(body)
        if verdict:
            status, message, kind = verdict
            record.update(status=status, error=message)
            self.write_record(record)
            return self.reply(status, "application/json", json.dumps({"error": {"code": status, "message": message, "status": kind}}).encode())
        content_type, payload, ids = gemini_reply(body, raw, next_step("gemini", body, raw), method == "streamGenerateContent")
        record["response_ids"] = ids
        self.write_record(record)
        self.reply(200, content_type, payload)

    def write_record(self, record):
        with LOCK, open(self.server.record, "a") as f:
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    # Loopback, unless a test runs it inside a container network (UPSTREAM_HOST=0.0.0.0 there).
    server = ThreadingHTTPServer((os.environ.get("UPSTREAM_HOST", "127.0.0.1"), int(sys.argv[1])), Handler)
    server.record = sys.argv[2]
    server.serve_forever()
