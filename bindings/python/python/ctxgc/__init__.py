"""ctxgc: context management for LLM agents, in-process.

- :func:`trim` trims one tool output (the same bytes as ``ctxgc trim`` and ``ctxgc serve``);
- :class:`Store` keeps originals (SQLite, Redis or memory) and recalls them;
- :class:`Session` manages one conversation: insertion trimming, then prune-first events and
  compaction with your own model as the summarizer; ctxgc's agent tools and their handler.

Integrations for agent frameworks live in :mod:`ctxgc.integrations`.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypedDict

from ._ctxgc import (
    RECALL_TOOL,
    TRIM_TOOL,
    Config,
    ConfigError,
    CtxgcError,
    FormatError,
    NativeSession,
    RecallError,
    Store,
    StoreError,
    Trimmed,
    __version__,
    trim,
)

__all__ = [
    "RECALL_TOOL",
    "TRIM_TOOL",
    "Config",
    "ConfigError",
    "CtxgcError",
    "Decision",
    "Event",
    "FormatError",
    "RecallError",
    "Session",
    "Store",
    "StoreError",
    "SummaryRequest",
    "Trimmed",
    "__version__",
    "trim",
]

Api = Literal["openai", "anthropic", "responses"]


class SummaryRequest(TypedDict):
    """What a summarizer is asked for a compaction.

    ``messages`` is the current prompt (in the session's message shape) with the summarisation
    instruction appended as the last user message, so the request shares the conversation's
    cached prefix; ``tools`` are the conversation's tools (kept for the same reason; the model
    should not call them); ``budget`` is the summary's target size in tokens.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    budget: int


class Decision(TypedDict, total=False):
    """What an event did with one tool output, and why (``Event["decisions"]``).

    ``action`` is ``pruned`` (with its ``reason``: ``superseded``, ``duplicate``, ``old``,
    ``window``...), ``kept`` (an output the agent is likely to use again, with the ``reason``
    that would have pruned it: ``old``, or ``superseded`` for a read of a file edited since) or
    ``summarised``; ``judged`` is what the relevance table said of an old output: its
    ``features`` (kind, age, whether the agent used it) and ``estimate`` (``likelihood``,
    the ``cell`` it came from and its ``support``).
    """

    call_id: str
    tool: str
    action: Literal["pruned", "kept", "summarised"]
    reason: str
    judged: dict[str, Any]


class Event(TypedDict, total=False):
    """One entry of a session's event log."""

    kind: str
    turn: int
    tokens_before: int
    tokens_after: int
    earliest_changed: int
    summarizer_tokens_in: int
    summarizer_tokens_out: int
    duration_us: int
    note: str
    decisions: list[Decision]


Summarizer = Callable[[SummaryRequest], "str | Awaitable[str]"]


class Session:
    """One conversation under ctxgc's management.

    Give it the framework's whole history before every model call; it returns the prompt to
    send. New tool results are stored, then trimmed at insertion; when the prompt reaches the
    trigger, one event prunes old outputs to abstracts and, only when that does not buy enough
    room, compacts the middle into one summary written by ``summarizer`` (ctxgc's extractive
    summary when there is none or it fails). Between events the prompt only grows at its end,
    so the provider's prompt cache keeps hitting. Messages the engine did not change come back
    as the very objects' contents you passed.

    ``api`` names the message shape: ``"openai"`` (Chat Completions ``messages``),
    ``"anthropic"`` (Messages content blocks; pass the system prompt to the API yourself, it is
    never changed) or ``"responses"`` (OpenAI Responses ``input`` items).

    ``recall_hint`` is how a summary tells the model to get an output back when that is not
    ctxgc's ``recall_tool_result`` (an agent whose only tool is a shell gets a command; ``""``
    names no way). ``max_result_bytes`` bounds every recall answer and kept output, for a
    framework that moves longer tool results out of the conversation (Hermes spills them to a
    file and shows a preview).
    """

    def __init__(
        self,
        api: Api = "openai",
        *,
        store: Store | None = None,
        config: Config | None = None,
        window: int | None = None,
        model: str | None = None,
        summarizer: Summarizer | None = None,
        session_id: str = "default",
        recall_hint: str | None = None,
        max_result_bytes: int | None = None,
    ) -> None:
        self.api: Api = api
        self.store = store if store is not None else Store()
        self.summarizer = summarizer
        self._native = NativeSession(
            api,
            store=self.store,
            config=config,
            window=window,
            model=model,
            session_id=session_id,
            recall_hint=recall_hint,
            max_result_bytes=max_result_bytes,
        )
        self.last_event: Event | None = None

    # -- the prompt ---------------------------------------------------------------------

    def prepare(
        self, messages: Sequence[dict[str, Any]], *, tools: Sequence[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """The prompt to send for ``messages`` (the whole history), with any due event run.

        A summarizer that returns an awaitable needs :meth:`aprepare`.
        """
        request = self._begin(messages, tools)
        if request is None:
            return self._prompt()
        summary, error = None, None
        if request and self.summarizer is not None:
            answer: Any = None
            try:
                answer = self.summarizer(json.loads(request))
            except Exception as exc:  # the extractive summary stands in; the log says why
                error = f"summarizer failed: {exc!r}"
            if inspect.isawaitable(answer):
                _close(answer)
                raise TypeError("the summarizer is async: call `await session.aprepare(...)`")
            if error is None:
                summary, error = _summary_or_error(answer)
        self._finish(summary, error)
        return self._prompt()

    async def aprepare(
        self, messages: Sequence[dict[str, Any]], *, tools: Sequence[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """:meth:`prepare` for async frameworks: a summarizer may be sync or async."""
        request = self._begin(messages, tools)
        if request is None:
            return self._prompt()
        summary, error = None, None
        if request and self.summarizer is not None:
            try:
                answer = self.summarizer(json.loads(request))
                if inspect.isawaitable(answer):
                    answer = await answer
            except Exception as exc:
                answer, error = None, f"summarizer failed: {exc!r}"
            if error is None:
                summary, error = _summary_or_error(answer)
        self._finish(summary, error)
        return self._prompt()

    def _begin(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
    ) -> str | None:
        self._native.ingest_json(
            _dumps(list(messages), "messages"),
            None if tools is None else _dumps(list(tools), "tools"),
        )
        return self._native.begin_event()

    def _finish(self, summary: str | None, error: str | None) -> None:
        record = self._native.finish_event(summary, error)
        self.last_event = None if record is None else json.loads(record)

    def _prompt(self) -> list[dict[str, Any]]:
        return json.loads(self._native.prompt_json())

    def observe_usage(self, prompt_tokens: int) -> None:
        """Tell the session how many prompt tokens the provider counted for the prompt
        :meth:`prepare` returned last (the response's usage: ``prompt_tokens``, or Anthropic's
        ``input_tokens`` plus its cache reads and writes). Later events are planned in the
        provider's tokens, whose window is the one that must not be passed: a model whose
        tokenizer counts more than ctxgc's would otherwise pass it before an event is due.
        """
        self._native.observe_usage(int(prompt_tokens))

    # -- the agent's tools --------------------------------------------------------------

    def tools(self) -> list[dict[str, Any]]:
        """``trim_tool_result`` and ``recall_tool_result`` in the session's tool shape."""
        return json.loads(self._native.agent_tools_json())

    def handle_tool_call(self, name: str, arguments: dict[str, Any] | str) -> str | None:
        """Runs a call of one of ctxgc's tools and returns what the model gets (an argument
        error is an answer too); ``None`` when ``name`` is not one of ctxgc's tools."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return self._native.handle_tool_call(name, text)

    def recall(self, id: str, *, lines: str | None = None, pattern: str | None = None) -> str:
        """The original of ``id`` (whole, ``lines="40-80"``, or lines matching ``pattern``)."""
        return self._native.recall(id, lines=lines, pattern=pattern)

    # -- what happened ------------------------------------------------------------------

    @property
    def events(self) -> list[Event]:
        """The event log: ``insert-trim``, ``prune-only``, ``compaction``, ``fallback``,
        ``agent-trim``..."""
        return json.loads(self._native.events_json())

    def report(self) -> dict[str, Any]:
        """Aggregates of the event log (turns, events, compactions, tokens reclaimed...)."""
        return json.loads(self._native.report_json())

    @property
    def prompt_tokens(self) -> int:
        """ctxgc's token count of the prompt as it stands."""
        return self._native.prompt_tokens

    @property
    def window(self) -> int:
        """The model's context window in tokens."""
        return self._native.window

    @property
    def session_id(self) -> str:
        """The session's id: its namespace in the store."""
        return self._native.session_id


def _dumps(value: Any, what: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise FormatError(f"{what} must be JSON-serialisable dicts and lists: {exc}") from exc


def _summary_or_error(answer: Any) -> tuple[str | None, str | None]:
    if isinstance(answer, str) and answer.strip():
        return answer, None
    return None, f"summarizer returned {type(answer).__name__}, not a non-empty str"


def _close(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
