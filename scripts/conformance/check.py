#!/usr/bin/env python3
"""Checks what the scripted upstream recorded during one conformance run.

Usage: check.py RECORD STATS_JSON CONFIG [CLIENT_RECORD]
- every request was accepted (no 400: pairs, order, breakpoints and thinking rules held);
- a client's pinned messages (system/developer notes after the first user message) are in
  every request of its session;
- between the proxy's events, each request of a session extends the previous one (append-only,
  as a prompt cache sees it): prefix breaks are at most the events the proxy ran plus the
  model's agent-tool calls (a trim replaces the latest result);
- with the agent tools and a small window (CONFIG `agent`), the proxy ran at least one event and
  the model's trim and recall ran inside the proxy;
- in observe mode (CONFIG `observe`), every body the upstream received is one the client sent,
  byte for byte (CLIENT_RECORD: their SHA-256, as the relay in front of the proxy saw them), and
  the proxy observed the requests and says what it would have saved;
- what the model must see reached it: the error line from the middle of the long log, in a
  request after the one that ran it; the system prompt the same in every request of a session
  and the task (the first user text) in every one; where the model recalled, the recalled lines;
- CONFIG `plugin` (no proxy: ctxgc inside the client): an event ran (a prefix break) and the
  model's recall ran; the proxy's counters do not apply.
Prints one line and exits 1 on the first failed check.
"""
import json
import os
import re
import sys

PINNED = "this note is pinned by the client"
# The error line as output shows it: after a line break, a kept-line number (`[line 701] `) or
# a recalled line's number (`   701| `); the command that prints it names it too, after `echo '`.
# An abstract of the output (an event's, or a window fit's when the newest output had no room
# for its lines) names it as its first error.
ERROR_SHOWN = re.compile(
    r"(\\n|\] |\| |first error: )2026-11-24T10:00:01Z ERROR disk quota exceeded at step 700"
)
# The long log's output (its first line). Some clients cut an output themselves before sending
# it (Codex CLI keeps its head and tail; mini-swe-agent's observation template its first and
# last 5,000 characters): the error line is then gone before the proxy sees it, and run.sh says
# so with CLIENT_CUTS_OUTPUTS=1.
ERROR_LOG_OUTPUT = "INFO step 1 ok"
# A recall answer's numbered lines (`recall_tool_result {id, lines: "1-5"}`).
RECALLED = re.compile(r" {5}1\| ")
# The MCP server's answer to the recall of a log's error line by its id: the line, numbered (701
# in the log; Codex CLI sends a cut of it, which the proxy then trims and files).
RECALLED_ERROR = re.compile(r" +\d+\| 2026-11-24T10:00:01Z ERROR disk quota exceeded at step 700")
# A trim marker with its id, as the proxy or a hook writes it.
TRIM_MARKER = re.compile(r"\[\.\.\. [0-9,]+ chars \([^)]*\) trimmed from [^\]\n]*; id r-[0-9a-f]{16}")


def items(r):
    b = r["body"]
    if r["api"] == "gemini":
        return b.get("contents")
    return b.get("input") if r["api"] == "responses" else b.get("messages")


def as_cached(x):
    """What a provider's prompt cache sees: where breakpoints sit is not content, and a string
    content is shorthand for one text block."""
    if isinstance(x, dict):
        out = {k: as_cached(v) for k, v in x.items() if k not in ("cache_control", "prompt_cache_breakpoint")}
        if isinstance(out.get("content"), str) and out.get("role") in ("user", "assistant", "system") and "type" not in out:
            out["content"] = [{"type": "text", "text": out["content"]}]
        return out
    if isinstance(x, list):
        return [as_cached(v) for v in x]
    return x


def text_of(content):
    if isinstance(content, str):
        return content
    out = []
    for b in content or []:
        if isinstance(b, dict) and isinstance(b.get("text"), str):
            out.append(b["text"])
    return "\n".join(out)


def system_of(r):
    """The request's system prompt, as a provider's cache sees it."""
    b = r["body"]
    if r["api"] == "gemini":
        return as_cached(b.get("systemInstruction"))
    if r["api"] == "responses":
        return b.get("instructions")
    if r["api"] == "messages":
        return as_cached(b.get("system"))
    return [as_cached(m) for m in b.get("messages") or [] if m.get("role") in ("system", "developer")][:1]


def task_of(r):
    """The first user text of the request (the task the client was given)."""
    for m in items(r) or []:
        if r["api"] == "gemini":
            if m.get("role", "user") == "user":
                texts = [p.get("text", "") for p in m.get("parts") or [] if isinstance(p, dict)]
                text = next((t for t in texts if t.strip()), "")
                if text:
                    return text
        elif m.get("role") == "user":
            text = text_of(m.get("content"))
            if text.strip():
                return text
    return ""


def seen_by_model(rs, problems, session):
    """The error line and the task reached the model; the system prompt never changed."""
    dumps = [json.dumps(items(r)) for r in rs]
    # The first request that shows the long log's output, whole, trimmed or as its abstract.
    ran = next(
        (k for k, d in enumerate(dumps) if ERROR_LOG_OUTPUT in d or ERROR_SHOWN.search(d)), None
    )
    cut_by_client = os.environ.get("CLIENT_CUTS_OUTPUTS") == "1"
    if ran is not None and not cut_by_client and not ERROR_SHOWN.search(dumps[ran]):
        problems.append("session %s: the error line in the middle of the long log did not reach the model with its output" % session)
    system = system_of(rs[0])
    task = json.dumps(task_of(rs[0]))[1:-1][:300]
    for k, (r, d) in enumerate(zip(rs, dumps)):
        if system_of(r) != system:
            problems.append("request %d of session %s changed the system prompt" % (k, session))
            break
        if task and task not in d:
            problems.append("request %d of session %s lost the task (the first user text)" % (k, session))
            break
    return any(RECALLED.search(d) for d in dumps)


def leading_breakpoints(r):
    """GPT-5.6 and later (whose cache matches only at breakpoints): the `prompt_cache_breakpoint`
    marks of an OpenAI request, as (item index, block index), and the item where ctxgc ends the
    stable prefix (the first user item after the leading system or developer ones, else the
    last of those; -1: none)."""
    if r["api"] not in ("chat", "responses"):
        return None
    m = re.match(r"gpt-(\d+)(?:\.(\d+))?", (r["body"].get("model") or "").rsplit("/", 1)[-1])
    if not m or (int(m.group(1)), int(m.group(2) or 0)) < (5, 6):
        return None
    marks, leading, in_lead = [], 0, True
    its = items(r) or []
    for i, item in enumerate(its):
        in_lead = in_lead and item.get("role") in ("system", "developer")
        leading += in_lead
        for k, block in enumerate(item.get("content") if isinstance(item.get("content"), list) else []):
            if isinstance(block, dict) and "prompt_cache_breakpoint" in block:
                marks.append((i, k))
    end = leading if leading < len(its) and its[leading].get("role") == "user" else leading - 1
    return marks, end


def cache_controls(value):
    """Every `cache_control` object in a request body."""
    if isinstance(value, dict):
        if isinstance(value.get("cache_control"), dict):
            yield value["cache_control"]
        for v in value.values():
            yield from cache_controls(v)
    elif isinstance(value, list):
        for v in value:
            yield from cache_controls(v)


def main():
    record, stats, config = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
    requests = [json.loads(line) for line in open(record)]
    problems = []
    if not requests:
        problems.append("the upstream saw no request")
    for r in requests:
        if r["status"] != 200:
            problems.append("%s answered %d: %s" % (r["path"], r["status"], r.get("error")))
    by_session = {}
    for r in requests:
        by_session.setdefault((r["api"], r["session"]), []).append(r)
    breaks = 0
    recalled = False
    for (api, session), rs in by_session.items():
        recalled |= seen_by_model(rs, problems, session)
        pinned = PINNED in json.dumps(items(rs[0]))
        for k, r in enumerate(rs):
            if pinned and PINNED not in json.dumps(items(r)):
                problems.append("request %d of session %s lost the client's pinned message" % (k, session))
            if k and isinstance(items(r), list) and isinstance(items(rs[k - 1]), list):
                before, now = as_cached(items(rs[k - 1])), as_cached(items(r))
                if now[:len(before)] != before:
                    breaks += 1
    events = stats.get("events", 0)
    # A model's trim replaces its latest tool result: a break by design, like an event.
    allowed = events + stats.get("agent_tool_calls", 0)
    if config == "plugin":
        # ctxgc runs inside the client: its events are the prefix breaks, no proxy counts them.
        if breaks < 1:
            problems.append("no event ran inside the client (no prefix break)")
        if not recalled:
            problems.append("the model's recall returned no lines")
    elif breaks > allowed:
        problems.append("%d prefix breaks but only %d events and agent tool calls: history was rewritten outside them" % (breaks, allowed))
    if stats.get("fail_open", 0):
        problems.append("the proxy failed open %d times" % stats["fail_open"])
    if config == "observe":
        sent = [json.loads(line)["sha256"] for line in open(sys.argv[4])]
        for k, r in enumerate(requests):
            if r.get("sha256") not in sent:
                problems.append("request %d (%s) reached the upstream changed in observe mode" % (k, r["path"]))
        observe = stats.get("observe") or {}
        if observe.get("observed", 0) < 1:
            problems.append("the proxy observed no request: %s" % observe)
        if not stats.get("would_have_saved_tokens"):
            problems.append("the proxy says it would have saved nothing")
        if breaks:
            problems.append("observe mode broke a prefix %d times" % breaks)
    for k, r in enumerate(requests):
        found = leading_breakpoints(r)
        if found is None:
            continue
        marks, end = found
        # The scripted clients place none: ctxgc's one, on the last block of the item that ends
        # the stable prefix, or none.
        want = [(end, len(items(r)[end]["content"]) - 1)] if end >= 0 and config != "observe" else []
        if marks != want:
            problems.append("request %d (GPT-5.6) has breakpoints %s where %s was expected" % (k, marks, want))
    if config == "cache1h":
        # `[cache] ttl = "1h"`: every breakpoint of every Messages request asks for the hour
        # (and the upstream, which enforces the TTLs' values and order, took them all).
        marked = 0
        for k, r in enumerate(requests):
            if r["api"] != "messages":
                continue
            for cc in cache_controls(r["body"]):
                marked += 1
                if cc.get("ttl") != "1h":
                    problems.append("request %d has a breakpoint without the hour: %s" % (k, cc))
        if not marked:
            problems.append("no Messages request carried a breakpoint")
    if config in ("mcp", "plugin-hooks"):
        # The client ran ctxgc's MCP tool on the id a trim showed: the original's error line,
        # numbered, is in a later request.
        if not any(RECALLED_ERROR.search(json.dumps(items(r))) for r in requests):
            problems.append("no request carried the MCP recall's answer (the error line, numbered)")
    if config == "plugin-hooks":
        # No proxy: the hook trimmed the long Bash outputs before the client sent them.
        if not any(TRIM_MARKER.search(json.dumps(items(r))) for r in requests):
            problems.append("no Bash output reached the upstream trimmed with its id")
    if config == "agent":
        if events < 1:
            problems.append("no event ran at the small window")
        if stats.get("agent_tool_calls", 0) < 1:
            problems.append("the model's trim/recall calls did not run in the proxy")
        if not recalled:
            problems.append("the model's recall returned no lines")
    summary = "%d requests in %d sessions, %d events, %d prefix breaks, %d agent tool calls, %d fail-open" % (
        len(requests), len(by_session), events, breaks, stats.get("agent_tool_calls", 0), stats.get("fail_open", 0))
    if config == "observe":
        summary += ", %d observed, %s tokens it would have saved" % (
            (stats.get("observe") or {}).get("observed", 0), stats.get("would_have_saved_tokens"))
    if problems:
        print("FAIL: " + summary + "\n  " + "\n  ".join(problems[:10]))
        sys.exit(1)
    print("ok: " + summary)


if __name__ == "__main__":
    main()
