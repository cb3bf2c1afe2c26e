"""hermes-agent 0.19: the plugin as Hermes loads it (the ``hermes_agent.plugins`` entry point
the wheel declares, ``register(ctx)`` on Hermes's own PluginContext), its hook invoked through
Hermes's PluginManager, and the context engine driven the way Hermes drives one."""

from __future__ import annotations

import copy
import importlib.metadata
import json

from conftest import pairs_intact, require, tool_session

require("hermes_cli.plugins")


def test_plugin_registers_the_transform_and_the_engine(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CTXGC_STORE", str(tmp_path / "originals.sqlite"))
    from agent.context_engine import ContextEngine
    from hermes_cli.plugins import PluginContext, PluginManager, PluginManifest

    (entry,) = [
        ep
        for ep in importlib.metadata.entry_points(group="hermes_agent.plugins")
        if ep.name == "ctxgc"
    ]
    module = entry.load()
    manager = PluginManager()
    module.register(
        PluginContext(
            PluginManifest(name="ctxgc", source="entrypoint", path=entry.value, key="ctxgc"),
            manager,
        )
    )

    # Insertion: what model_tools.handle_function_call does with a tool's result.
    result = "".join(f"collecting item {i}\n" for i in range(30_000)) + "ERROR: 2 failed\n"
    (trimmed,) = manager.invoke_hook(
        "transform_tool_result",
        tool_name="terminal",
        args={},
        result=result,
        task_id="",
        session_id="sess-1",
        tool_call_id="c1",
        turn_id="",
        api_request_id="",
        duration_ms=5,
        status="ok",
        error_type=None,
        error_message=None,
    )
    assert isinstance(trimmed, str) and len(trimmed) < len(result) / 5
    assert trimmed.endswith("ERROR: 2 failed\n")
    assert (
        manager.invoke_hook(
            "transform_tool_result",
            tool_name="terminal",
            args={},
            result="short\n",
            session_id="sess-1",
        )
        == []
    ), "short results stay as they are"

    # The engine, as Hermes selects it: a deep copy of the registered plugin engine.
    engine = copy.deepcopy(manager._context_engine)
    assert isinstance(engine, ContextEngine) and engine.name == "ctxgc"
    engine.summarizer = None  # no auxiliary model configured here: extractive summaries
    engine.update_model("test-model", 16_000)
    engine.on_session_start("sess-1")
    schemas = engine.get_tool_schemas()
    assert {s["name"] for s in schemas} == {"trim_tool_result", "recall_tool_result"}

    history = tool_session(30, lines=300)
    engine.update_from_response(
        {"prompt_tokens": 15_000, "completion_tokens": 10, "total_tokens": 15_010}
    )
    assert engine.should_compress()
    compacted = engine.compress(history)
    assert compacted[0] == history[0] and compacted[1] == history[1]
    assert pairs_intact(compacted)
    assert engine.compression_count == 1
    assert len(json.dumps(compacted)) < len(json.dumps(history)) / 2

    # Recall through the engine's tool, of the original the transform stored.
    rid = "r-" + trimmed.split(" id r-")[1][:16]
    answer = json.loads(
        engine.handle_tool_call("recall_tool_result", {"id": rid, "pattern": "ERROR"})
    )
    assert "ERROR: 2 failed" in answer["result"]
    # A whole recall stays under what Hermes would move to a file (it would show a preview).
    whole = json.loads(engine.handle_tool_call("recall_tool_result", {"id": rid}))["result"]
    assert "recall cut at" in whole and len(whole) < module.hermes_spill_chars(16_000)
    unknown = json.loads(engine.handle_tool_call("lcm_grep", {}))
    assert "error" in unknown


def test_hermes_terminal_envelope_is_trimmed_as_the_output_it_holds(monkeypatch, tmp_path) -> None:
    """Hermes's own terminal tool (``tool_output.max_bytes`` raised as the setup says) runs a
    command printing 300 KB with an error line in its middle and hands the plugin its JSON
    envelope ``{"output": ..., "exit_code": ..., "error": null}``: the model gets valid JSON
    whose output keeps the error line, the tail and a recall id, at most a quarter of it;
    recall returns the whole envelope and finds the error line in its output."""
    home = tmp_path / "hermes"
    home.mkdir()
    (home / "config.yaml").write_text("tool_output:\n  max_bytes: 2000000\n")
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setenv("CTXGC_STORE", str(tmp_path / "originals.sqlite"))
    from tools import tool_output_limits
    from tools.terminal_tool import terminal_tool

    import ctxgc
    from conftest import ERROR_LINE, long_log, shows_what_matters
    from ctxgc.integrations import hermes

    tool_output_limits._reset_tool_output_limits_cache()
    assert hermes.capture_cap_warning() is None, "the cap the setup asks for"
    log = tmp_path / "build.log"
    log.write_text(long_log(0))
    envelope = terminal_tool(command=f"cat {log}; exit 2")
    assert json.loads(envelope)["exit_code"] == 2 and len(envelope) > 300_000

    engine = hermes.CtxgcContextEngine()
    trimmed = engine.transform_tool_result(
        tool_name="terminal", result=envelope, session_id="sess-9"
    )
    assert isinstance(trimmed, str) and len(trimmed) <= len(envelope) / 4
    fields = json.loads(trimmed)
    assert fields["exit_code"] == 2 and fields["error"] is None, "the other fields whole"
    shows_what_matters(fields["output"], 0)
    rid = "r-" + fields["output"].split(" id r-")[1][:16]
    store = ctxgc.Store(str(tmp_path / "originals.sqlite"))
    assert store.get(rid, session="sess-9") == envelope, "the whole envelope is stored"
    found = store.recall(rid, pattern="ERROR", session="sess-9")
    assert f"{ERROR_LINE} (step 0)" in found and len(found) < 1_000


def test_the_plugin_warns_when_hermes_would_cut_outputs_first(monkeypatch, tmp_path) -> None:
    """Hermes's default cap (50,000 characters) cuts an output before any plugin sees it: the
    plugin says so once at start, naming the setting that fixes it."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    from tools import tool_output_limits

    from ctxgc.integrations import hermes

    tool_output_limits._reset_tool_output_limits_cache()
    warning = hermes.capture_cap_warning()
    assert warning is not None and "50,000" in warning and "tool_output" in warning
    tool_output_limits._reset_tool_output_limits_cache()
