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
    unknown = json.loads(engine.handle_tool_call("lcm_grep", {}))
    assert "error" in unknown
