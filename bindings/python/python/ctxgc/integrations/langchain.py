"""ctxgc as a LangChain 1.x agent middleware (``pip install 'ctxgc[langchain]'``)::

    from langchain.agents import create_agent
    from ctxgc.integrations.langchain import CtxgcMiddleware

    agent = create_agent(model, tools=[...], middleware=[CtxgcMiddleware(window=200_000)])

- ``wrap_tool_call``: each tool result is stored, then trimmed before it enters the state;
- ``wrap_model_call``: the model gets the prompt after ctxgc's events (prune first, then a
  summary by ``summarizer``, by default the agent's own model), prefix-stable between events;
  the system message is never changed;
- ``tools``: ``recall_tool_result`` (and ``trim_tool_result``), answered by the middleware.

One :class:`ctxgc.Session` per LangGraph thread (``thread_id``), at most ``max_sessions``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.tools import StructuredTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from .. import RECALL_TOOL, TRIM_TOOL, Config, Session, Store, SummaryRequest
from ._common import resolve, trim_and_store, trim_text_blocks

__all__ = ["CtxgcMiddleware"]

Summarizer = Callable[[SummaryRequest], "str | Awaitable[str]"]


def _thread_id() -> str:
    try:
        from langgraph.config import get_config

        return str(get_config().get("configurable", {}).get("thread_id") or "default")
    except RuntimeError:  # outside a graph run
        return "default"


class CtxgcMiddleware(AgentMiddleware):
    """Insertion trimming, cache-timed events and recall for a LangChain agent."""

    def __init__(
        self,
        *,
        window: int | None = None,
        model: str | None = None,
        config: Config | None = None,
        store: Store | None = None,
        summarizer: Summarizer | None = None,
        agent_tools: bool = True,
        max_sessions: int = 256,
    ) -> None:
        super().__init__()
        self.config, self.store = resolve(config, store)
        self.window = window
        self.model_name = model
        self.summarizer = summarizer
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self.tools = self._make_tools() if agent_tools else []

    # -- sessions ---------------------------------------------------------------------------

    def session(self, thread_id: str | None = None) -> Session:
        """The session of a LangGraph thread (the current one by default)."""
        key = thread_id or _thread_id()
        session = self._sessions.get(key)
        if session is None:
            session = Session(
                "openai",
                store=self.store,
                config=self.config,
                window=self.window,
                model=self.model_name,
                session_id=f"langchain:{key}",
            )
            self._sessions[key] = session
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(key)
        return session

    def _window(self) -> int:
        return self.session().window

    # -- insertion --------------------------------------------------------------------------

    def _trimmed(self, request: ToolCallRequest, result: Any) -> Any:
        """The tool's message with its text trimmed for the model, each original stored.

        LangChain hands the model a string (a ``str`` return, the content of
        ``content_and_artifact``, a ``dict`` serialised as JSON) or a list of content blocks;
        the artifact never reaches the model and is left alone."""
        if not isinstance(result, ToolMessage):
            return result
        name = request.tool_call.get("name") or "tool"
        if name in (RECALL_TOOL, TRIM_TOOL):
            return result
        where = {
            "tool": name,
            "window": self._window(),
            "config": self.config,
            "store": self.store,
            "session": self.session().session_id,
        }
        if isinstance(result.content, str):
            text = trim_and_store(result.content, **where)
            if text is result.content:
                return result
            return result.model_copy(update={"content": text})
        if isinstance(result.content, list):
            blocks = trim_text_blocks(result.content, **where)
            if blocks is not None:
                return result.model_copy(update={"content": blocks})
        return result

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        return self._trimmed(request, handler(request))

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        return self._trimmed(request, await handler(request))

    # -- events -----------------------------------------------------------------------------

    def _summarizer_for(self, request: ModelRequest) -> Summarizer:
        if self.summarizer is not None:
            return self.summarizer

        # The request the agent's model gets starts as the agent's own do (its system message
        # and its tools, then the conversation), so the provider's cache serves that prefix.
        model: Any = request.model
        # (tool_choice stays the agent's: changing it would cost the cached messages.)
        if request.tools:
            try:
                model = request.model.bind_tools(request.tools)
            except NotImplementedError:  # a model without tool calling: no tools to share
                model = request.model
        head = [request.system_message] if request.system_message is not None else []

        async def with_the_agents_model(summary: SummaryRequest) -> str:
            reply = await model.ainvoke(head + convert_to_messages(summary["messages"]))
            return reply.text if isinstance(reply, AIMessage) else str(reply.content)

        return with_the_agents_model

    @staticmethod
    def _as_dicts(messages: list[AnyMessage]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        dicts = convert_to_openai_messages(messages)
        originals = {json.dumps(d, sort_keys=True): m for d, m in zip(dicts, messages, strict=True)}
        return dicts, originals

    @staticmethod
    def _as_messages(prompt: list[dict[str, Any]], originals: dict[str, Any]) -> list[AnyMessage]:
        # Messages the engine left alone go back as the very objects the state holds.
        out: list[AnyMessage] = []
        for item in prompt:
            original = originals.get(json.dumps(item, sort_keys=True))
            out.append(original if original is not None else convert_to_messages([item])[0])
        return out

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        session = self.session()
        session.summarizer = self.summarizer  # sync path: only a sync summarizer
        dicts, originals = self._as_dicts(request.messages)
        prompt = session.prepare(dicts)
        response = handler(request.override(messages=self._as_messages(prompt, originals)))
        _observe_usage(session, response)
        return response

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        session = self.session()
        session.summarizer = self._summarizer_for(request)
        dicts, originals = self._as_dicts(request.messages)
        prompt = await session.aprepare(dicts)
        response = await handler(request.override(messages=self._as_messages(prompt, originals)))
        _observe_usage(session, response)
        return response

    # -- the agent's tools ------------------------------------------------------------------

    def _make_tools(self) -> list[StructuredTool]:
        specs = {t["function"]["name"]: t["function"] for t in Session("openai").tools()}

        def recall_tool_result(
            id: str, lines: str | None = None, pattern: str | None = None
        ) -> str:
            args = {"id": id, "lines": lines, "pattern": pattern}
            call = {k: v for k, v in args.items() if v is not None}
            return self.session().handle_tool_call(RECALL_TOOL, call) or ""

        def trim_tool_result(summary: str) -> str:
            return self.session().handle_tool_call(TRIM_TOOL, {"summary": summary}) or ""

        return [
            StructuredTool.from_function(
                recall_tool_result,
                name=RECALL_TOOL,
                description=specs[RECALL_TOOL]["description"],
            ),
            StructuredTool.from_function(
                trim_tool_result, name=TRIM_TOOL, description=specs[TRIM_TOOL]["description"]
            ),
        ]


def _observe_usage(session: Session, response: ModelResponse) -> None:
    """The prompt tokens the provider counted (LangChain's ``usage_metadata.input_tokens``,
    cache reads included), so the session's events are planned in the provider's tokens."""
    for message in getattr(response, "result", None) or []:
        usage = getattr(message, "usage_metadata", None)
        if isinstance(message, AIMessage) and usage and usage.get("input_tokens"):
            session.observe_usage(int(usage["input_tokens"]))
            return
