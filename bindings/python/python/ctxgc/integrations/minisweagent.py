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
        session: my-run                 # default: mini-swe-agent-<time>-<pid>
        recall: true                    # false when the agent's shell cannot run this Python

- each command's output is stored, then trimmed before ``format_observation_messages``
  renders it (head + salient lines + tail; the exit code stays). mini-swe-agent's own
  ``observation_template`` cuts anything over 10,000 characters to its first and last 5,000,
  which would cut ctxgc's marker, recall id and kept error lines away again: an observation
  the template would cut is rendered with the same template minus that cut;
- mini-swe-agent's only tool is bash, so the way back to an original is a shell command: each
  trimmed output ends with ``python -m ctxgc recall r-… --session S`` (this Python, the
  session named), and summaries name that command. With ``recall: false``, or a store only
  this process sees (``:memory:``), nothing names a way the agent does not have;
- ``query`` sends the prompt after ctxgc's events: old observations pruned to abstracts first,
  the middle summarised only when that does not buy enough room, prefix-stable in between.

Everything else (templates, cost, serialisation) is the inner model's.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import sys
import time
from typing import Any

from minisweagent.models import get_model_class

from .. import Config, Session
from ._common import config_from_env, store_from_env, trim_and_store

__all__ = ["OBSERVATION_TEMPLATE", "CtxgcModel"]

#: mini-swe-agent's default observation template without its 10,000-character cut: what an
#: observation ctxgc already trimmed is rendered with.
OBSERVATION_TEMPLATE = """\
{% if output.exception_info -%}
<exception>{{output.exception_info}}</exception>
{% endif -%}
<returncode>{{output.returncode}}</returncode>
<output>
{{ output.output -}}
</output>"""


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
        location = options.pop("store", None) or os.environ.get("CTXGC_STORE")
        store = store_from_env(location, config=self.ctxgc_config)
        window = options.pop("window", None)
        session_id = options.pop("session", None) or (
            f"mini-swe-agent-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        )
        recall = bool(options.pop("recall", True))
        if options:
            raise ValueError(
                f"unknown ctxgc option(s): {', '.join(sorted(options))} "
                "(expected window, config, store, session, recall)"
            )
        model_name = inner_config.get("model_name", "")
        self.inner = get_model_class(model_name, inner_model_class)(**copy.deepcopy(inner_config))
        # Another process (the agent's shell) can read a file or a server, not this memory.
        shared = recall and (location or "") not in (":memory:", "memory")
        self.recall_command = (
            f"{shlex.quote(sys.executable)} -m ctxgc recall ID --session {shlex.quote(session_id)}"
            + (f" --store {shlex.quote(str(location))}" if location else "")
            if shared
            else None
        )
        self.session = Session(
            "openai",
            store=store,
            config=self.ctxgc_config,
            window=window,
            model=model_name.split("/")[-1] or None,
            session_id=session_id,
            recall_hint=(
                f"the shell command `{self.recall_command}` (add --lines A-B or --pattern REGEX)"
                if self.recall_command
                else ""
            ),
        )
        self.store = store

    def __getattr__(self, name: str) -> Any:
        # config, cost, serialize, get_template_vars, format_message...: the inner model's.
        return getattr(self.inner, name)

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict:
        answer = self.inner.query(self.session.prepare(messages), **kwargs)
        # The provider's count of the prompt (mini-swe-agent keeps the response in
        # `extra.response`): later events are planned in its tokens.
        response = (answer.get("extra") or {}).get("response") if isinstance(answer, dict) else None
        usage = response.get("usage") if isinstance(response, dict) else None
        prompt_tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if isinstance(prompt_tokens, int) and prompt_tokens > 0:
            self.session.observe_usage(prompt_tokens)
        return answer

    def format_observation_messages(
        self, message: dict, outputs: list[dict], template_vars: dict | None = None
    ) -> list[dict]:
        trimmed = [self._trim_output(o) for o in outputs]
        rendered = self.inner.format_observation_messages(message, trimmed, template_vars)
        markers = [
            _marker_of(t["output"]) for t, o in zip(trimmed, outputs, strict=True) if t is not o
        ]
        # What the model reads is the messages' content (their `extra` keeps the raw output).
        shown = json.dumps([m.get("content") for m in rendered], ensure_ascii=False)
        if all(json.dumps(m, ensure_ascii=False)[1:-1] in shown for m in markers if m):
            return rendered
        # The template cut ctxgc's trim again: render it with the same template minus the cut.
        config = self.inner.config
        self.inner.config = config.model_copy(update={"observation_template": OBSERVATION_TEMPLATE})
        try:
            return self.inner.format_observation_messages(message, trimmed, template_vars)
        finally:
            self.inner.config = config

    def _trim_output(self, output: dict) -> dict:
        text = output.get("output")
        if not isinstance(text, str):
            return output
        trimmed = trim_and_store(
            text,
            tool="bash",
            window=self.session.window,
            config=self.ctxgc_config,
            store=self.store,
            session=self.session.session_id,
        )
        if trimmed is text:
            return output
        marker = _marker_of(trimmed)
        if self.recall_command and marker:
            rid = marker.rsplit("; id ", 1)[1].split()[0]
            command = self.recall_command.replace(" ID ", f" {rid} ", 1)
            trimmed += f"\n[more of this output: {command} --pattern REGEX (or --lines A-B)]\n"
        return {**output, "output": trimmed}


def _marker_of(text: str) -> str | None:
    """The trim's marker line (the one naming the original's id)."""
    return next((line for line in text.splitlines() if "; id r-" in line), None)
