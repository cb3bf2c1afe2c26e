"""mini-swe-agent 2.4.6: CtxgcModel, named by import path as in the YAML, wraps the package's own
DeterministicToolcallModel in a real DefaultAgent running real shell commands."""

from __future__ import annotations

import json
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


def test_the_default_template_keeps_ctxgcs_trim_and_the_agent_can_recall(tmp_path) -> None:
    """mini-swe-agent's own default ``observation_template`` (it keeps the first and last 5,000
    characters of anything over 10,000): ctxgc's trim reaches the model whole, with the error
    line from the middle, the tail and a recall command the agent runs in its own shell."""
    import shlex
    import subprocess
    from importlib.resources import files

    import yaml
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models import get_model
    from minisweagent.models.test_models import make_toolcall_output

    from conftest import ERROR_LINE, long_log, shows_what_matters

    default = yaml.safe_load((files("minisweagent") / "config" / "default.yaml").read_text())
    template = default["model"]["observation_template"]
    assert "output.output[:5000]" in template, "mini's default still cuts at 10,000"
    log = tmp_path / "build.log"
    log.write_text(long_log(0))

    def step(k: int, command: str) -> dict[str, Any]:
        call = {
            "id": f"call_{k}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})},
        }
        return make_toolcall_output(
            f"step {k}", [call], [{"command": command, "tool_call_id": f"call_{k}"}]
        )

    outputs = [step(0, f"cat {shlex.quote(str(log))}")]
    outputs.append(step(1, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"))
    model = get_model(
        "deterministic_toolcall",
        {
            "model_class": "ctxgc.integrations.minisweagent.CtxgcModel",
            "inner_model_class": "minisweagent.models.test_models.DeterministicToolcallModel",
            "outputs": outputs,
            "observation_template": template,
            "ctxgc": {"window": 200_000, "store": str(tmp_path / "originals.sqlite")},
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
        step_limit=5,
        cost_limit=100.0,
    )
    agent.run("fix the build")
    seen = next(m["content"] for m in sent[-1] if m.get("role") == "tool")
    assert "<elided_chars>" not in seen, "mini's template did not cut ctxgc's trim again"
    body = seen.split("<output>\n", 1)[1].rsplit("</output>", 1)[0]
    shows_what_matters(body, 0)
    # The way back is a shell command naming the session, printed where the agent sees it.
    command = next(line for line in body.splitlines() if "-m ctxgc recall" in line)
    command = command.split(": ", 1)[1].split(" --pattern REGEX")[0] + " --pattern ERROR"
    assert model.session.session_id in command
    done = subprocess.run(command, shell=True, capture_output=True, text=True, check=True)
    assert f"{ERROR_LINE} (step 0)" in done.stdout
