"""mini-swe-agent 2.4.6: CtxgcModel, named by import path as in the YAML, wraps the package's own
DeterministicToolcallModel in a real DefaultAgent running real shell commands."""

from __future__ import annotations

from typing import Any

from conftest import pairs_intact, require

require("minisweagent")


def test_a_real_agent_run_through_ctxgc_model() -> None:
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models import get_model
    from minisweagent.models.test_models import make_toolcall_output

    def step(k: int, command: str) -> dict[str, Any]:
        call = {
            "id": f"call_{k}",
            "type": "function",
            "function": {"name": "bash", "arguments": f'{{"command": "{command}"}}'},
        }
        return make_toolcall_output(
            f"step {k}", [call], [{"command": command, "tool_call_id": f"call_{k}"}]
        )

    outputs = [step(k, f"seq {k + 1} 3 120000; echo done-{k}") for k in range(12)]
    outputs.append(step(12, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"))
    model = get_model(
        "deterministic_toolcall",
        {
            "model_class": "ctxgc.integrations.minisweagent.CtxgcModel",
            "inner_model_class": "minisweagent.models.test_models.DeterministicToolcallModel",
            "outputs": outputs,
            "ctxgc": {"window": 12_000, "store": ":memory:"},
        },
    )
    sent: list[list[dict[str, Any]]] = []
    inner_query = model.inner.query
    model.inner.query = lambda messages, **kw: (sent.append(messages), inner_query(messages, **kw))[
        1
    ]

    agent = DefaultAgent(
        model,
        LocalEnvironment(),
        system_template="You are a test agent.",
        instance_template="Task: {{task}}",
        step_limit=20,
        cost_limit=100.0,
    )
    agent.run("count to forty thousand")

    assert len(sent) == 13
    first = sent[0]
    assert first[0]["content"] == "You are a test agent."
    assert first[1]["content"] == "Task: count to forty thousand"
    last = sent[-1]
    assert last[0] == first[0] and last[1] == first[1], "system prompt and task unchanged"
    tool_texts = [m["content"] for m in last if m.get("role") == "tool"]
    assert tool_texts and all(len(t) < 12_000 for t in tool_texts), "the model got trims"
    assert any("done-11" in t for t in tool_texts), "the end of an output is kept"
    assert pairs_intact(last)
    kinds = [e["kind"] for e in model.session.events]
    assert any(k in ("prune-only", "compaction") for k in kinds), kinds
    # The marker's id recalls the whole output.
    marker = next(t for t in tool_texts if " id r-" in t)
    rid = "r-" + marker.split(" id r-")[1][:16]
    original = model.store.get(rid, session=model.session.session_id)
    assert original is not None and "done-" in original
    assert original.count("\n") > 39_000
    assert "done-" in model.session.recall(rid, pattern="^done-")
