"""LangChain 1.5: CtxgcMiddleware in a real ``create_agent`` graph, with LangChain's own fake
chat model scripted to call a real tool, recording every prompt it is given."""

from __future__ import annotations

import json
from typing import Any

from conftest import require

require("langchain")


def test_create_agent_with_ctxgc_middleware() -> None:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool

    import ctxgc
    from ctxgc.integrations.langchain import CtxgcMiddleware

    @tool
    def run_tests(step: int) -> str:
        """Run the test suite."""
        body = "".join(f"tests/test_{step}_{j}.py PASSED\n" for j in range(3000))
        return body + f"FAILED tests/test_io.py::test_read - step {step}\nexit code: 1\n"

    prompts: list[list[Any]] = []

    class Recording(FakeMessagesListChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Recording:
            return self

        def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            prompts.append(list(messages))
            return super()._generate(messages, *args, **kwargs)

    steps = 14
    replies: list[Any] = [
        AIMessage(
            content="", tool_calls=[{"name": "run_tests", "args": {"step": k}, "id": f"call_{k}"}]
        )
        for k in range(steps)
    ]
    replies.append(
        AIMessage(
            content="",
            tool_calls=[
                {
                    "name": "recall_tool_result",
                    "args": {"id": "PLACEHOLDER", "pattern": "FAILED"},
                    "id": "call_recall",
                }
            ],
        )
    )
    replies.append(AIMessage(content="Done: test_read fails."))
    model = Recording(responses=replies)
    store = ctxgc.Store()
    middleware = CtxgcMiddleware(window=16_000, store=store)
    agent = create_agent(
        model, tools=[run_tests], system_prompt="You fix tests.", middleware=[middleware]
    )

    # The recall call names the id of the first output, known once it is trimmed.
    first_id = ctxgc.trim(run_tests.invoke({"step": 0}), tool="run_tests", window=16_000).id
    replies[steps].tool_calls[0]["args"]["id"] = first_id

    result = agent.invoke(
        {"messages": [HumanMessage("Make the suite pass.")]},
        config={"configurable": {"thread_id": "t1"}},
    )

    assert len(prompts) == steps + 2
    for prompt in prompts:
        assert isinstance(prompt[0], SystemMessage) and prompt[0].content == "You fix tests."
        assert prompt[1].content == "Make the suite pass."
    tool_messages = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    trimmed = [m for m in tool_messages if m.name == "run_tests"]
    assert all(len(m.content) < 20_000 for m in trimmed), "the state holds trims"
    assert all("exit code: 1" in m.content for m in trimmed)
    recalled = next(m for m in tool_messages if m.name == "recall_tool_result")
    assert "FAILED tests/test_io.py::test_read - step 0" in recalled.content
    session = middleware.session("t1")
    kinds = [e["kind"] for e in session.events]
    assert any(k in ("prune-only", "compaction") for k in kinds), kinds
    last = prompts[-1]
    calls = {c["id"] for m in last if isinstance(m, AIMessage) for c in m.tool_calls}
    results = {m.tool_call_id for m in last if isinstance(m, ToolMessage)}
    assert calls == results, "every call keeps its result after events"
    assert result["messages"][-1].content == "Done: test_read fails."


def test_every_tool_result_shape_reaches_the_model_trimmed_and_recallable() -> None:
    """A ``str``, a ``dict`` (LangChain serialises it as JSON), ``content_and_artifact`` and a
    list of content blocks, each a 300 KB log with an error line in its middle: the model gets
    the error line, the tail and a recall id; after the events prune them, recall by the id
    the model saw returns the original's error line."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    import ctxgc
    from conftest import ERROR_LINE, long_log, recall_id, shows_what_matters
    from ctxgc.integrations.langchain import CtxgcMiddleware

    @tool
    def run_str(step: int) -> str:
        """Run the build."""
        return long_log(step)

    @tool
    def run_dict(step: int) -> dict:
        """Run the build."""
        return {"output": long_log(step), "exit_code": 2, "error": None}

    @tool(response_format="content_and_artifact")
    def run_artifact(step: int) -> tuple[str, dict]:
        """Run the build."""
        return long_log(step), {"step": step}

    @tool
    def run_blocks(step: int) -> list:
        """Run the build."""
        return [{"type": "text", "text": long_log(step)}]

    shapes = [run_str, run_dict, run_artifact, run_blocks]
    steps = 2 * len(shapes)
    prompts: list[list[Any]] = []

    class Scripted(FakeMessagesListChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:
            return self

        def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> ChatResult:
            prompts.append(list(messages))
            n = len(prompts) - 1
            if n < steps:
                name = shapes[n % len(shapes)].name
                reply = AIMessage(
                    content="", tool_calls=[{"name": name, "args": {"step": n}, "id": f"c{n}"}]
                )
            elif n < steps + len(shapes):
                # Recall each shape's first output by the id the model saw in it.
                k = n - steps
                seen = next(
                    m
                    for m in prompts[k + 1]
                    if isinstance(m, ToolMessage) and m.tool_call_id == f"c{k}"
                )
                rid = recall_id(json.dumps(seen.content))
                reply = AIMessage(
                    content="",
                    tool_calls=[
                        {
                            "name": "recall_tool_result",
                            "args": {"id": rid, "pattern": "ERROR"},
                            "id": f"r{k}",
                        }
                    ],
                )
            else:
                reply = AIMessage(content="Done.")
            return ChatResult(generations=[ChatGeneration(message=reply)])

    middleware = CtxgcMiddleware(window=40_000, store=ctxgc.Store())
    agent = create_agent(
        Scripted(responses=[]),
        tools=shapes,
        system_prompt="You fix builds.",
        middleware=[middleware],
    )
    result = agent.invoke(
        {"messages": [HumanMessage("Make the build pass.")]},
        config={"configurable": {"thread_id": "shapes"}},
    )
    assert result["messages"][-1].content == "Done."
    for n in range(steps):
        seen = next(
            m for m in prompts[n + 1] if isinstance(m, ToolMessage) and m.tool_call_id == f"c{n}"
        )
        text = seen.content if isinstance(seen.content, str) else json.dumps(seen.content)
        if isinstance(seen.content, str) and seen.content.startswith("{"):
            text = json.loads(seen.content)["output"]  # the dict's fields stay JSON
        elif isinstance(seen.content, list):
            text = seen.content[0]["text"]  # blocks stay blocks
        shows_what_matters(text, n)
    session = middleware.session("shapes")
    assert any(e["kind"] in ("prune-only", "compaction") for e in session.events)
    assert session.report()["insert_trims"] >= steps, "every trim counts in the report"
    answers = {m.tool_call_id: m.content for m in result["messages"] if isinstance(m, ToolMessage)}
    for k in range(len(shapes)):
        assert f"{ERROR_LINE} (step {k})" in answers[f"r{k}"], answers[f"r{k}"][:300]
