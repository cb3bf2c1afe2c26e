"""The bindings: the same bytes as the Rust engine, recall, sessions, errors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import ctxgc
from conftest import pairs_intact, require_path, tool_session

WINDOW = 32_000


def shared_tool_outputs() -> list[tuple[str, str]]:
    """(tool, text) of every tool output of every shared transcript and client log, from the
    canonical JSONL ``ctxgc import --out`` wrote."""
    folder = require_path("CTXGC_CANONICAL")
    outputs = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").split("\n"):
            if not line.strip():
                continue
            message = json.loads(line)
            if message.get("role") == "tool" and isinstance(message.get("content"), str):
                outputs.append((message.get("name") or "tool", message["content"]))
    assert len(outputs) > 1000, "the shared sets hold thousands of tool outputs"
    return outputs


def cli_trim(binary: Path, tool: str, text: str, window: int) -> str:
    done = subprocess.run(
        [str(binary), "trim", "--tool", tool, "--window", str(window)],
        input=text.encode(),
        capture_output=True,
        check=True,
        env={**os.environ, "CTXGC_CONFIG": ""},
    )
    return done.stdout.decode()


def test_trim_is_byte_equal_to_ctxgc_trim_on_every_shared_output() -> None:
    binary = require_path("CTXGC_BIN")
    outputs = shared_tool_outputs()
    checked_by_cli = 0
    for tool, text in outputs:
        out = ctxgc.trim(text, tool=tool, window=WINDOW)
        assert out.original_bytes == len(text.encode())
        assert out.id == ctxgc.Store().put(text)
        if out.text == text and not any(c in text for c in "\x1b\r\x08"):
            # Nothing to trim or render: both paths pass the bytes through.
            assert not out.trimmed
            continue
        assert out.trimmed or out.text == text
        assert out.text == cli_trim(binary, tool, text, WINDOW), f"{tool}: {out!r}"
        checked_by_cli += 1
    assert checked_by_cli > 100


@pytest.mark.parametrize("window", [200_000, 32_000])
def test_outputs_wrapped_as_hermes_does_keep_the_lines_they_keep_unwrapped(window: int) -> None:
    """Every shared tool output, wrapped as Hermes hands it (``{"output": ..., "exit_code": 0,
    "error": null}``), trims to the same lines as the output itself (the markers name the
    envelope's id), in valid JSON no longer than the unwrapped trim plus the envelope's keys
    and JSON's escapes."""
    import re

    ids = re.compile(r"r-[0-9a-f]{16}")
    compared = 0
    for tool, text in shared_tool_outputs():
        plain = ctxgc.trim(text, tool=tool, window=window)
        envelope = json.dumps({"output": text, "exit_code": 0, "error": None}, ensure_ascii=False)
        wrapped = ctxgc.trim(envelope, tool=tool, window=window)
        if not plain.trimmed and not wrapped.trimmed:
            continue
        compared += 1
        fields = json.loads(wrapped.text)
        assert fields["exit_code"] == 0 and fields["error"] is None
        assert ids.sub("ID", fields["output"]) == ids.sub("ID", plain.text), tool
        keys = len(envelope) - len(json.dumps(text, ensure_ascii=False))
        escapes = len(json.dumps(plain.text, ensure_ascii=False)) - len(plain.text)
        assert len(wrapped.text) <= len(plain.text) + escapes + keys, tool
    assert compared > 100, compared


def test_trim_keeps_the_end_and_the_error() -> None:
    log = "".join(f"compiling crate {i}\n" for i in range(20_000))
    log += "error[E0308]: mismatched types\n" + "".join(f"note {i}\n" for i in range(5000))
    log += "exit code: 101\n"
    out = ctxgc.trim(log, tool="bash", window=WINDOW)
    assert out.trimmed and out.shape == "lines"
    assert "error[E0308]" in out.text and out.text.endswith("exit code: 101\n")
    assert out.id in out.text, "the marker names the original"
    assert len(out.text) <= out.limit * 1.2


def test_trim_renders_terminal_output() -> None:
    raw = "".join(f"\r\x1b[K[{i:3}%] downloading" for i in range(101)) + "\n\x1b[32mok\x1b[0m\n"
    out = ctxgc.trim(raw, tool="terminal", window=WINDOW)
    assert out.text == "[100%] downloading\nok\n"
    assert out.trimmed


def test_trim_releases_the_gil() -> None:
    text = "".join(f"line {i} of a long build log\n" for i in range(400_000))
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    thread = threading.Thread(target=count)
    thread.start()
    time.sleep(0.01)
    before = ticks
    ctxgc.trim(text, tool="bash", window=WINDOW)
    during = ticks - before
    stop.set()
    thread.join()
    assert during > 1000, "another Python thread ran while trim worked"


def test_store_round_trip_in_memory_sqlite_and_redis(tmp_path: Path, redis_url: str) -> None:
    original = "".join(f"{i}: value {i * i}\n" for i in range(1, 501))
    for location in (None, str(tmp_path / "originals.sqlite"), redis_url):
        store = ctxgc.Store(location)
        rid = store.put(original, session="s1")
        assert store.get(rid, session="s1") == original
        assert store.get(rid, session="other") is None, "sessions are apart"
        assert store.recall(rid, session="s1") == original
        part = store.recall(rid, lines="10-12", session="s1")
        assert part.splitlines() == [
            "    10| 10: value 100",
            "    11| 11: value 121",
            "    12| 12: value 144",
        ]
        assert "value 2500" in store.recall(rid, pattern=r"^50:", session="s1")
        with pytest.raises(ctxgc.RecallError, match="lines"):
            store.recall(rid, lines="ten", session="s1")
        with pytest.raises(ctxgc.RecallError, match="no original"):
            store.recall("r-0000000000000000", session="s1")
    assert "s3cret" not in repr(ctxgc.Store(redis_url)), "no password in a repr"


def test_a_bad_redis_password_is_a_store_error(redis_url: str) -> None:
    with pytest.raises(ctxgc.StoreError):
        ctxgc.Store(redis_url.replace("s3cret-pass", "wrong")).put("x")


def test_config_from_toml_keys(tmp_path: Path) -> None:
    path = tmp_path / "ctxgc.toml"
    path.write_text("[trim]\ndefault_window = 64000\n[engine]\ntrigger_share = 0.6\n")
    config = ctxgc.Config.load(path)
    assert config.default_window == 64_000 and config.trigger == pytest.approx(0.6)
    assert "default_window = 64000" in config.to_toml()
    with pytest.raises(ctxgc.ConfigError, match="bogus"):
        ctxgc.Config("[trim]\nbogus = 1\n")
    with pytest.raises(ctxgc.ConfigError, match="cannot read"):
        ctxgc.Config.load(tmp_path / "missing.toml")
    with pytest.raises(ctxgc.ConfigError, match="api"):
        ctxgc.Session("cohere")  # type: ignore[arg-type]


def test_session_trims_stores_and_runs_events_keeping_pairs() -> None:
    store = ctxgc.Store()
    session = ctxgc.Session("openai", store=store, window=WINDOW, session_id="t")
    history = tool_session(40)
    last: list[dict] = []
    for end in range(4, len(history) + 1, 2):
        prompt = session.prepare(history[:end])
        assert prompt[0] == history[0], "the system prompt reaches the model unchanged"
        assert prompt[1] == history[1], "so does the user's task"
        assert pairs_intact(prompt)
        if session.last_event is None and last:
            assert prompt[: len(last)] == last, "append-only between events"
        last = prompt
    kinds = [e["kind"] for e in session.events]
    assert "insert-trim" in kinds
    assert any(k in ("prune-only", "compaction") for k in kinds), kinds
    # Each event says what it did with each output it touched, and why.
    decided = [d for e in session.events for d in e.get("decisions", [])]
    assert decided, session.events
    assert {d["action"] for d in decided} <= {"pruned", "kept", "summarised"}
    assert all(d["call_id"] and d["tool"] for d in decided)
    assert all("reason" in d for d in decided if d["action"] == "pruned")
    assert session.prompt_tokens < WINDOW
    # Every original is recallable, whole, by the id its abstract or marker shows.
    original = history[-1]["content"]
    rid = ctxgc.trim(original, tool="bash", window=WINDOW).id
    assert session.recall(rid) == original
    assert session.handle_tool_call("recall_tool_result", {"id": rid, "lines": "1-1"}) == (
        "     1| tests/test_io.py::test_case_39_0 PASSED\n"
    )
    assert session.handle_tool_call("bash", {}) is None


def test_a_session_told_the_providers_counts_stays_inside_the_window() -> None:
    # The provider counts 40% more than ctxgc: told so, the session's events come early enough.
    window = 12_000
    history = tool_session(60)

    def peak(observe: bool) -> int:
        session = ctxgc.Session("openai", window=window, session_id="w")
        highest = 0
        for end in range(4, len(history) + 1, 2):
            session.prepare(history[:end])
            counted = session.prompt_tokens * 14 // 10
            highest = max(highest, counted)
            if observe:
                session.observe_usage(counted)
        return highest

    assert peak(False) > window, "uncalibrated, the provider's count passes the window"
    assert peak(True) <= window


def test_summarizer_sync_async_and_failing() -> None:
    asked: list[dict] = []

    def summarize(request: ctxgc.SummaryRequest) -> str:
        asked.append(dict(request))
        return "## Progress\nRan the tests 30 times; test_io fails on an assertion."

    async def summarize_async(request: ctxgc.SummaryRequest) -> str:
        await asyncio.sleep(0)
        return summarize(request)

    def broken(request: ctxgc.SummaryRequest) -> str:
        raise RuntimeError("model down")

    history = tool_session(60, lines=60)
    for summarizer, run_async in ((summarize, False), (summarize_async, True), (broken, False)):
        session = ctxgc.Session("openai", window=8_000, summarizer=summarizer)
        for end in range(4, len(history) + 1, 2):
            if run_async:
                prompt = asyncio.run(session.aprepare(history[:end]))
            else:
                prompt = session.prepare(history[:end])
            assert pairs_intact(prompt)
        kinds = [e["kind"] for e in session.events]
        if summarizer is broken:
            assert "fallback" in kinds, kinds
        else:
            assert "compaction" in kinds, kinds
            assert any("Ran the tests 30 times" in json.dumps(m) for m in prompt)
    assert asked and asked[0]["budget"] > 0
    assert asked[0]["messages"][-1]["role"] == "user", "the instruction comes last"
    session = ctxgc.Session("openai", window=8_000, summarizer=summarize_async)
    with pytest.raises(TypeError, match="aprepare"):
        for end in range(4, len(history) + 1, 2):
            session.prepare(history[:end])


def test_anthropic_and_responses_shapes() -> None:
    anthropic = [{"role": "user", "content": [{"type": "text", "text": "task"}]}]
    responses: list[dict] = [{"role": "user", "content": "task"}]
    for k in range(30):
        body = "".join(f"row {k} {j} of a long listing\n" for j in range(3000))
        anthropic += [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": f"tu_{k}",
                        "name": "Bash",
                        "input": {"command": "ls"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"tu_{k}", "content": body}],
            },
        ]
        responses += [
            {"type": "function_call", "call_id": f"fc_{k}", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"fc_{k}", "output": body},
        ]
    for api, history in (("anthropic", anthropic), ("responses", responses)):
        session = ctxgc.Session(api, window=WINDOW)  # type: ignore[arg-type]
        prompt = session.prepare(history)
        assert prompt[0] == history[0]
        text = json.dumps(prompt)
        assert len(text) < len(json.dumps(history)) / 2
        assert any(e["kind"] == "insert-trim" for e in session.events)
        names = {t.get("name") or t.get("function", {}).get("name") for t in session.tools()}
        assert names == {"trim_tool_result", "recall_tool_result"}


def test_bad_messages_are_format_errors() -> None:
    session = ctxgc.Session("openai")
    with pytest.raises(ctxgc.FormatError, match="role"):
        session.prepare([{"content": "no role"}])
    with pytest.raises(ctxgc.FormatError, match="JSON"):
        session.prepare([{"role": "user", "content": object()}])
    assert issubclass(ctxgc.FormatError, ctxgc.CtxgcError)
