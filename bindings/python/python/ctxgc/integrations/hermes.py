"""ctxgc as a Hermes plugin (``hermes-agent`` 0.19).

Installed with ``pip install 'ctxgc[hermes]'``, the package registers the entry point
``ctxgc`` in Hermes's ``hermes_agent.plugins`` group. Turn it on in ``~/.hermes/config.yaml``::

    plugins:
      enabled: [ctxgc]
    context:
      engine: ctxgc

The plugin's ``register(ctx)`` adds:

- a ``transform_tool_result`` hook: each tool result is stored, then trimmed (head + salient
  lines + tail, rendered as a terminal shows it) before it enters the history; Hermes's own
  truncation keeps only the head;
- the ``ctxgc`` context engine: when the prompt nears the window it prunes old outputs to
  one-line abstracts first and summarises only when that does not buy enough room (with
  Hermes's auxiliary ``compression`` model, else ctxgc's extractive summary), and it gives the
  model ``recall_tool_result`` (and ``trim_tool_result``) to get any original back.

Settings: ``$CTXGC_CONFIG`` (a ``ctxgc.toml``), ``$CTXGC_STORE`` (SQLite path or Redis URL;
default: the file ``ctxgc serve`` uses).

Hermes cuts a terminal command's capture to ``tool_output.max_bytes`` characters (50,000 by
default: the first 40% and the last 60%) before any plugin sees it, and Hermes 0.19 gives a
plugin no way to receive more. An error in the middle of a long build is gone before ctxgc could
keep it, so the setup raises the cap (``tool_output: {max_bytes: 2000000}``): ctxgc then stores
the whole capture and trims it itself. The plugin warns once at start while the cap is lower.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

from agent.context_engine import ContextEngine

from .. import TRIM_TOOL, Config, Session, Store, SummaryRequest, trim
from ._common import bare_function_schemas, resolve

logger = logging.getLogger(__name__)

#: The ``tool_output.max_bytes`` the setup asks for: Hermes keeps a capture this long whole, so
#: ctxgc stores it and chooses what the model sees. Below it, the plugin warns once.
RECOMMENDED_CAPTURE_CHARS = 2_000_000

__all__ = ["CtxgcContextEngine", "register"]


def _hermes_summarizer(request: SummaryRequest) -> str:
    """Summaries with Hermes's auxiliary model for the ``compression`` task."""
    from agent.auxiliary_client import call_llm

    response = call_llm(task="compression", messages=request["messages"])
    return response.choices[0].message.content or ""


class CtxgcContextEngine(ContextEngine):
    """Hermes context engine backed by a :class:`ctxgc.Session` per Hermes session."""

    def __init__(
        self,
        *,
        config: Config | None = None,
        store: Store | None = None,
        summarizer: Any = _hermes_summarizer,
        context_length: int = 0,
    ) -> None:
        self.config, self.store = resolve(config, store)
        self.summarizer = summarizer
        # Hermes asks for a compression from this threshold on: ctxgc's own trigger.
        self.threshold_percent = self.config.trigger
        self.context_length = context_length or self.config.default_window
        self.threshold_tokens = int(self.context_length * self.threshold_percent)
        self.session_id = "hermes"
        self._session: Session | None = None

    @property
    def name(self) -> str:
        return "ctxgc"

    # -- insertion: the tool-result transform ---------------------------------------------

    def transform_tool_result(
        self, tool_name: str = "", result: Any = None, session_id: str = "", **_: Any
    ) -> str | None:
        """Stores the result and returns its trimmed text, or ``None`` to keep it as it is."""
        if not isinstance(result, str):
            return None
        trimmed = trim(
            result, tool=tool_name or "tool", window=self.context_length, config=self.config
        )
        if not trimmed.trimmed:
            return None
        # The original is committed before anything that names it enters the history.
        self.store.put(result, session=session_id or self.session_id)
        return trimmed.text

    # -- events -----------------------------------------------------------------------------

    def _current(self) -> Session:
        if self._session is None:
            self._session = Session(
                "openai",
                store=self.store,
                config=self.config,
                window=self.context_length,
                summarizer=self.summarizer,
                session_id=self.session_id,
                max_result_bytes=hermes_spill_chars(self.context_length) * 4 // 5,
            )
        return self._session

    def update_from_response(self, usage: dict[str, Any]) -> None:
        self.last_prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self.last_completion_tokens = int(usage.get("completion_tokens") or 0)
        self.last_total_tokens = int(usage.get("total_tokens") or 0)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        tokens = prompt_tokens if prompt_tokens is not None else self.last_prompt_tokens
        return bool(self.threshold_tokens) and tokens >= self.threshold_tokens

    def compress(
        self,
        messages: list[dict[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
    ) -> list[dict[str, Any]]:
        """The history after ctxgc's event: old outputs pruned to abstracts first, the middle
        summarised only when that does not buy enough room. The system prompt and the latest
        user message stay verbatim; every tool call keeps its result."""
        session = self._current()
        prompt = session.prepare(messages)
        if session.last_event is not None:
            self.compression_count += 1
            logger.info("ctxgc event: %s", session.last_event)
        return prompt

    # -- recall -----------------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return bare_function_schemas(self._current().tools())

    def handle_tool_call(
        self,
        name: str,
        args: dict[str, Any],
        messages: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        session = self._current()
        if name == TRIM_TOOL and messages is not None:
            # The model's trim replaces the latest result in Hermes's own history (the list
            # Hermes hands its context engine tools and sends next): the session learns the
            # history, trims its latest result, and that result's new text goes back in place.
            session.prepare(messages)
            answer = session.handle_tool_call(name, args)
            replaced = {
                m.get("tool_call_id"): m.get("content")
                for m in session._prompt()
                if m.get("role") == "tool"
            }
            for message in messages:
                if message.get("role") == "tool" and message.get("tool_call_id") in replaced:
                    new = replaced[message["tool_call_id"]]
                    if new != message.get("content"):
                        message["content"] = new
        else:
            answer = session.handle_tool_call(name, args)
        if answer is None:
            return json.dumps({"error": f"Unknown context engine tool: {name}"})
        return json.dumps({"result": answer}, ensure_ascii=False)

    # -- lifecycle --------------------------------------------------------------------------

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        self.session_id = session_id or "hermes"
        self._session = None

    def on_session_reset(self) -> None:
        super().on_session_reset()
        self._session = None

    def update_model(self, model: str, context_length: int, *args: Any, **kwargs: Any) -> None:
        super().update_model(model, context_length, *args, **kwargs)
        self._session = None

    def __deepcopy__(self, memo: dict[int, Any]) -> CtxgcContextEngine:
        # Hermes copies the plugin's engine per agent: share the store (a connection) and the
        # settings, start a fresh session.
        clone = copy.copy(self)
        clone._session = None
        return clone


def hermes_spill_chars(context_length: int) -> int:
    """The size past which Hermes moves a tool result to a file and shows the model a
    1,500-character preview (``tools/budget_config.py``: 15% of the window at 4 characters a
    token, between 8,000 and 100,000): a recall answer longer than this would not reach the
    model."""
    try:
        from tools.budget_config import budget_for_context_window

        return int(budget_for_context_window(context_length).default_result_size)
    except Exception:  # another Hermes: its documented defaults
        return max(8_000, min(int(context_length * 4 * 0.15), 100_000))


def capture_cap_warning() -> str | None:
    """What to tell the user when Hermes's own capture cap cuts outputs before ctxgc sees them,
    or ``None`` when it does not (or Hermes does not say)."""
    try:
        from tools.tool_output_limits import get_max_bytes

        cap = int(get_max_bytes())
    except Exception:  # an older or newer Hermes without this reader: nothing to say
        return None
    if cap >= RECOMMENDED_CAPTURE_CHARS:
        return None
    return (
        f"ctxgc: Hermes keeps only {cap:,} characters of a command's output (its first 40% and "
        "last 60%) before ctxgc sees it, so an error in the middle of a longer output is lost "
        "and cannot be recalled. ctxgc trims and stores outputs itself: set "
        f"`tool_output: {{max_bytes: {RECOMMENDED_CAPTURE_CHARS}}}` in ~/.hermes/config.yaml."
    )


def register(ctx: Any) -> None:
    """Hermes plugin entry point."""
    warning = capture_cap_warning()
    if warning is not None:
        logger.warning(warning)
    engine = CtxgcContextEngine()
    ctx.register_hook("transform_tool_result", engine.transform_tool_result)
    ctx.register_context_engine(engine)
