"""ctxgc as a mini-swe-agent model class (``pip install 'ctxgc[mini-swe-agent]'``).

In the agent's YAML, name this class and the model it wraps::

    model:
      model_class: ctxgc.integrations.minisweagent.CtxgcModel
      model_name: anthropic/claude-sonnet-4-5
      inner_model_class: litellm        # any mini-swe-agent model class (name or import path)
      ctxgc:                            # optional
        window: 200000
        config: ctxgc.toml
        store: ~/.local/share/ctxgc/ctxgc.sqlite

- each command's output is stored, then trimmed before ``format_observation_messages``
  renders it (head + salient lines + tail; the exit code stays);
- ``query`` sends the prompt after ctxgc's events: old observations pruned to abstracts first,
  the middle summarised only when that does not buy enough room, prefix-stable in between.

Everything else (templates, cost, serialisation) is the inner model's.
"""

from __future__ import annotations

import copy
from typing import Any

from minisweagent.models import get_model_class

from .. import Config, Session, trim
from ._common import config_from_env, store_from_env

__all__ = ["CtxgcModel"]


class CtxgcModel:
    """A mini-swe-agent model that manages the context of the model it wraps."""

    def __init__(
        self,
        *,
        inner_model_class: str = "",
        ctxgc: dict[str, Any] | None = None,
        **inner_config: Any,
    ) -> None:
        options = dict(ctxgc or {})
        config_path = options.pop("config", None)
        self.ctxgc_config: Config = config_from_env(config_path)
        store = store_from_env(options.pop("store", None), config=self.ctxgc_config)
        window = options.pop("window", None)
        if options:
            raise ValueError(
                f"unknown ctxgc option(s): {', '.join(sorted(options))} "
                "(expected window, config, store)"
            )
        model_name = inner_config.get("model_name", "")
        self.inner = get_model_class(model_name, inner_model_class)(**copy.deepcopy(inner_config))
        self.session = Session(
            "openai",
            store=store,
            config=self.ctxgc_config,
            window=window,
            model=model_name.split("/")[-1] or None,
            session_id=f"mini-swe-agent:{id(self):x}",
        )
        self.store = store

    def __getattr__(self, name: str) -> Any:
        # config, cost, serialize, get_template_vars, format_message...: the inner model's.
        return getattr(self.inner, name)

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict:
        return self.inner.query(self.session.prepare(messages), **kwargs)

    def format_observation_messages(
        self, message: dict, outputs: list[dict], template_vars: dict | None = None
    ) -> list[dict]:
        trimmed = [self._trim_output(o) for o in outputs]
        return self.inner.format_observation_messages(message, trimmed, template_vars)

    def _trim_output(self, output: dict) -> dict:
        text = output.get("output")
        if not isinstance(text, str):
            return output
        out = trim(text, tool="bash", window=self.session.window, config=self.ctxgc_config)
        if not out.trimmed:
            return output
        # The original is committed before the observation that names it is rendered.
        self.store.put(text, session=self.session.session_id)
        return {**output, "output": out.text}
