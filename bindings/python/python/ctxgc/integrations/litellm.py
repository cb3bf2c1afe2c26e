"""ctxgc as a LiteLLM proxy pre-call hook (``pip install 'ctxgc[litellm]'``).

In the proxy's ``config.yaml`` (LiteLLM's proxy needs a ``master_key`` to start)::

    model_list:
      - model_name: gpt-5-mini
        litellm_params: {model: openai/gpt-5-mini}
    general_settings:
      master_key: sk-your-proxy-key
    litellm_settings:
      callbacks: ctxgc.integrations.litellm.ctxgc_hook

Originals go to the store ``ctxgc serve`` uses (``$CTXGC_STORE`` names another), in the
session ``litellm``: ``ctxgc recall r-… --session litellm`` prints one back.

The hook trims the tool results of every request (Chat Completions ``tool`` messages and
Anthropic ``tool_result`` blocks) before LiteLLM forwards it, storing each original first. It
holds no session, so it only makes deterministic trims: the same result is trimmed to the same
bytes on every request, and the provider's prompt cache keeps hitting. Events (pruning,
summaries) need a session: use ``ctxgc serve`` in front of LiteLLM, or a framework integration.
"""

from __future__ import annotations

from typing import Any

from litellm.integrations.custom_logger import CustomLogger

from .. import Config, Store
from ._common import config_from_env, store_from_env, trim_and_store, trim_text_blocks

__all__ = ["CtxgcHook", "ctxgc_hook"]


class CtxgcHook(CustomLogger):
    """Deterministic insertion trimming of tool results, originals stored."""

    def __init__(
        self,
        *,
        config: Config | None = None,
        store: Store | None = None,
        window: int | None = None,
        session: str = "litellm",
    ) -> None:
        super().__init__()
        self.config = config if config is not None else config_from_env()
        self._store = store
        self.window = window
        self.session = session

    @property
    def store(self) -> Store:
        if self._store is None:  # opened on first use, not at import
            self._store = store_from_env(config=self.config)
        return self._store

    def trim_messages(self, messages: list[dict[str, Any]], model: str | None = None) -> int:
        """Trims the tool results in ``messages`` in place; returns how many changed.

        Every shape the APIs allow: a Chat ``tool`` message whose content is a string or a
        list of text parts, an Anthropic ``tool_result`` whose content is a string or a list of
        blocks (text trimmed, images left), and Responses ``function_call_output`` items (a
        string or a list of ``input_text`` parts), as MCP-style ``content`` arrays are."""
        names: dict[str, str] = {}
        changed = 0
        for message in messages:
            if not isinstance(message, dict):
                continue
            for call in message.get("tool_calls") or []:
                names[call.get("id", "")] = (call.get("function") or {}).get("name", "tool")
            kind = message.get("type")
            if kind == "function_call":
                names[message.get("call_id", "")] = message.get("name", "tool")
                continue
            if kind in ("function_call_output", "custom_tool_call_output"):
                tool = names.get(message.get("call_id", ""), "tool")
                changed += self._trim_field(message, "output", tool, model)
                continue
            content = message.get("content")
            if message.get("role") == "tool":
                tool = names.get(message.get("tool_call_id", ""), "tool")
                changed += self._trim_field(message, "content", tool, model)
            elif isinstance(content, list):
                for block in content:
                    if not isinstance(block, dict):
                        continue
                    if block.get("type") == "tool_use":
                        names[block.get("id", "")] = block.get("name", "tool")
                    if block.get("type") == "tool_result":
                        tool = names.get(block.get("tool_use_id", ""), "tool")
                        changed += self._trim_field(block, "content", tool, model)
        return changed

    def _trim_field(self, holder: dict[str, Any], field: str, tool: str, model: str | None) -> int:
        """Trims ``holder[field]`` (a string or a list of content parts) in place."""
        value = holder.get(field)
        where = {
            "tool": tool,
            "window": self.window,
            "model": None if self.window else model,
            "config": self.config,
            "store": self.store,
            "session": self.session,
        }
        if isinstance(value, str):
            text = trim_and_store(value, **where)
            if text is value:
                return 0
            holder[field] = text
            return 1
        if isinstance(value, list):
            parts = trim_text_blocks(value, **where)
            if parts is not None:
                holder[field] = parts
                return 1
        return 0

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict, call_type: str
    ) -> dict:
        for key in ("messages", "input"):  # Chat and Anthropic; Responses
            items = data.get(key)
            if isinstance(items, list):
                self.trim_messages(items, data.get("model"))
        return data


ctxgc_hook = CtxgcHook()
