"""OpenAI Agents SDK 0.24: a real ``Runner.run`` with wrapped function tools, the input filter
and the recall tool, against a scripted ``Model`` that records every input it is given."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from conftest import require

require("agents")

from agents import ToolOutputText  # noqa: E402  (tool annotations resolve at module level)
from pydantic import BaseModel  # noqa: E402  (the SDK depends on pydantic)


class BuildResult(BaseModel):
    """A tool's structured result (the SDK resolves its annotations at module level)."""

    output: str
    exit_code: int


def test_runner_with_ctxgc() -> None:
    from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    import ctxgc
    from ctxgc.integrations.openai_agents import Ctxgc

    @function_tool
    def run_tests(step: int) -> str:
        """Run the test suite."""
        body = "".join(f"tests/test_{step}_{j}.py PASSED\n" for j in range(3000))
        return body + f"FAILED tests/test_io.py::test_read - step {step}\nexit code: 1\n"

    steps = 14
    first_id = ctxgc.trim(
        "".join(f"tests/test_0_{j}.py PASSED\n" for j in range(3000))
        + "FAILED tests/test_io.py::test_read - step 0\nexit code: 1\n",
        tool="run_tests",
        window=16_000,
    ).id
    inputs: list[tuple[str | None, list[dict[str, Any]]]] = []

    def call(name: str, args: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
        return ResponseFunctionToolCall(
            type="function_call",
            call_id=call_id,
            name=name,
            arguments=json.dumps(args),
            id=f"fc_{call_id}",
        )

    class Scripted(Model):
        async def get_response(
            self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
        ) -> ModelResponse:
            inputs.append((system_instructions, json.loads(json.dumps(input, default=str))))
            n = len(inputs) - 1
            if n < steps:
                output: list[Any] = [call("run_tests", {"step": n}, f"c{n}")]
            elif n == steps:
                output = [
                    call("recall_tool_result", {"id": first_id, "pattern": "FAILED"}, "crecall")
                ]
            else:
                output = [
                    ResponseOutputMessage(
                        id="m1",
                        type="message",
                        role="assistant",
                        status="completed",
                        content=[
                            ResponseOutputText(type="output_text", text="Done.", annotations=[])
                        ],
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    cx = Ctxgc(window=16_000, store=ctxgc.Store())
    agent = Agent(
        name="fixer",
        instructions="You fix tests.",
        model=Scripted(),
        tools=[*cx.wrap_tools([run_tests]), cx.recall_tool()],
    )
    result = asyncio.run(
        Runner.run(
            agent,
            "Make the suite pass.",
            max_turns=30,
            run_config=RunConfig(call_model_input_filter=cx.input_filter),
        )
    )
    assert result.final_output == "Done."
    assert len(inputs) == steps + 2
    for instructions, items in inputs:
        assert instructions == "You fix tests."
        assert items[0]["content"] == "Make the suite pass."
    last = inputs[-1][1]
    outputs = [i for i in last if i.get("type") == "function_call_output"]
    calls = {i["call_id"] for i in last if i.get("type") == "function_call"}
    assert calls == {o["call_id"] for o in outputs}, "every call keeps its output"
    assert all(len(str(o["output"])) < 20_000 for o in outputs), "the model got trims"
    recalled = next(o for o in outputs if o["call_id"] == "crecall")
    assert "FAILED tests/test_io.py::test_read - step 0" in str(recalled["output"])
    kinds = [e["kind"] for e in cx.session.events]
    assert any(k in ("prune-only", "compaction") for k in kinds), kinds


def test_every_tool_output_shape_reaches_the_model_trimmed_and_recallable() -> None:
    """A ``str``, a pydantic model, a ``dict`` (both of which the SDK would send as a one-line
    Python repr) and ``ToolOutputText``, each holding a 300 KB log with an error line in its
    middle: the model gets the error line, the tail and a recall id (objects as pretty JSON);
    after events, recall by the id the model saw returns the error line."""
    from agents import (
        Agent,
        Model,
        ModelResponse,
        RunConfig,
        Runner,
        Usage,
        function_tool,
    )
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    import ctxgc
    from conftest import ERROR_LINE, long_log, recall_id, shows_what_matters
    from ctxgc.integrations.openai_agents import Ctxgc

    @function_tool
    def run_str(step: int) -> str:
        """Run the build."""
        return long_log(step)

    @function_tool
    def run_model(step: int) -> BuildResult:
        """Run the build."""
        return BuildResult(output=long_log(step), exit_code=2)

    @function_tool
    def run_dict(step: int) -> dict:
        """Run the build."""
        return {"output": long_log(step), "exit_code": 2}

    @function_tool
    def run_text(step: int) -> ToolOutputText:
        """Run the build."""
        return ToolOutputText(text=long_log(step))

    shapes = [run_str, run_model, run_dict, run_text]
    steps = 2 * len(shapes)
    inputs: list[list[dict[str, Any]]] = []

    def call(name: str, args: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
        return ResponseFunctionToolCall(
            type="function_call", call_id=call_id, name=name, arguments=json.dumps(args)
        )

    def output_of(items: list[dict[str, Any]], call_id: str) -> Any:
        return next(
            i["output"]
            for i in items
            if i.get("type") == "function_call_output" and i["call_id"] == call_id
        )

    class Scripted(Model):
        async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any):
            inputs.append(json.loads(json.dumps(input, default=str)))
            n = len(inputs) - 1
            if n < steps:
                output: list[Any] = [call(shapes[n % len(shapes)].name, {"step": n}, f"c{n}")]
            elif n < steps + len(shapes):
                k_ = n - steps
                rid = recall_id(json.dumps(output_of(inputs[k_ + 1], f"c{k_}")))
                output = [call("recall_tool_result", {"id": rid, "pattern": "ERROR"}, f"r{k_}")]
            else:
                text = ResponseOutputText(type="output_text", text="Done.", annotations=[])
                output = [
                    ResponseOutputMessage(
                        id="m1",
                        type="message",
                        role="assistant",
                        status="completed",
                        content=[text],
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    cx = Ctxgc(window=40_000, store=ctxgc.Store())
    agent = Agent(
        name="fixer",
        instructions="You fix builds.",
        model=Scripted(),
        tools=[*cx.wrap_tools(shapes), cx.recall_tool()],
    )
    result = asyncio.run(
        Runner.run(
            agent,
            "Make the build pass.",
            max_turns=40,
            run_config=RunConfig(call_model_input_filter=cx.input_filter),
        )
    )
    assert result.final_output == "Done."
    for n in range(steps):
        seen = output_of(inputs[n + 1], f"c{n}")
        if isinstance(seen, list):  # ToolOutputText stays structured: input_text parts
            assert seen[0]["type"] == "input_text"
            seen = seen[0]["text"]
        assert "BuildResult(" not in seen, "an object reaches the model as JSON, not its repr"
        if seen.lstrip().startswith("{"):
            assert "\n" in seen, "pretty JSON: lines to keep"
            seen = json.loads(seen)["output"]
        shows_what_matters(seen, n)
    assert any(e["kind"] in ("prune-only", "compaction") for e in cx.session.events)
    assert cx.session.report()["insert_trims"] >= steps, "every trim counts in the report"
    last = inputs[-1]
    for k in range(len(shapes)):
        assert f"{ERROR_LINE} (step {k})" in str(output_of(last, f"r{k}"))
