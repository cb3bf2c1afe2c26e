"""OpenAI Agents SDK 0.24: a real ``Runner.run`` with wrapped function tools, the input filter
and the recall tool, against a scripted ``Model`` that records every input it is given."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from conftest import require

require("agents")


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
