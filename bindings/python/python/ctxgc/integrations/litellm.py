"""ctxgc as a LiteLLM proxy pre-call hook (``pip install 'ctxgc[litellm]'``).

In the proxy's ``config.yaml``::

    litellm_settings:
      callbacks: ctxgc.integrations.litellm.ctxgc_hook

The hook trims the tool results of every request (Chat Completions ``tool`` messages and
Anthropic ``tool_result`` blocks) before LiteLLM forwards it, storing each original first. It
holds no session, so it only makes deterministic trims: the same result is trimmed to the same
bytes on every request, and the provider's prompt cache keeps hitting. Events (pruning,
summaries) need a session: use ``ctxgc serve`` in front of LiteLLM, or a framework integration.
"""

from __future__ import annotations

from typing import Any

from litellm.integrations.custom_logger import CustomLogger

from .. import Config, Store, trim
from ._common import config_from_env, store_from_env

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
        """Trims the tool results in ``messages`` in place; returns how many changed."""
        names: dict[str, str] = {}
        changed = 0
        for message in messages:
            for call in message.get("tool_calls") or []:
                names[call.get("id", "")] = (call.get("function") or {}).get("name", "tool")
            content = message.get("content")
            if message.get("role") == "tool" and isinstance(content, str):
                tool = names.get(message.get("tool_call_id", ""), "tool")
                new = self._trimmed(content, tool, model)
                if new is not None:
                    message["content"] = new
                    changed += 1
            elif isinstance(content, list):
                for block in content:
                    if not isinstance(block, dict):
                        continue
                    if block.get("type") == "tool_use":
                        names[block.get("id", "")] = block.get("name", "tool")
                    if block.get("type") == "tool_result" and isinstance(block.get("content"), str):
                        tool = names.get(block.get("tool_use_id", ""), "tool")
                        new = self._trimmed(block["content"], tool, model)
                        if new is not None:
                            block["content"] = new
                            changed += 1
        return changed

    def _trimmed(self, text: str, tool: str, model: str | None) -> str | None:
        out = trim(
            text,
            tool=tool,
            window=self.window,
            model=None if self.window else model,
            config=self.config,
        )
        if not out.trimmed:
            return None
        self.store.put(text, session=self.session)
        return out.text

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict, call_type: str
    ) -> dict:
        messages = data.get("messages")
        if isinstance(messages, list):
            self.trim_messages(messages, data.get("model"))
        return data


ctxgc_hook = CtxgcHook()
