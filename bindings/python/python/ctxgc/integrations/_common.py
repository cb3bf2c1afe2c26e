"""What every integration shares: where settings and originals come from."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from .. import Config, Store, trim


def config_from_env(path: str | os.PathLike[str] | None = None) -> Config:
    """``path``, else ``$CTXGC_CONFIG``, else ``./ctxgc.toml`` when it exists, else defaults
    (the same order as the ``ctxgc`` command)."""
    chosen = path or os.environ.get("CTXGC_CONFIG")
    if chosen:
        return Config.load(chosen)
    if Path("ctxgc.toml").is_file():
        return Config.load("ctxgc.toml")
    return Config()


def store_from_env(location: str | None = None, config: Config | None = None) -> Store:
    """``location``, else ``$CTXGC_STORE`` (a SQLite path, a ``redis://`` URL or ``:memory:``),
    else the SQLite file ``ctxgc serve`` uses (so ``ctxgc`` commands find the originals)."""
    chosen = location or os.environ.get("CTXGC_STORE") or Store.default_location()
    return Store(chosen, config=config)


def resolve(config: Config | None, store: Store | None) -> tuple[Config, Store]:
    """The given settings and store, or those :func:`config_from_env` and
    :func:`store_from_env` find."""
    config = config if config is not None else config_from_env()
    return config, store if store is not None else store_from_env(config=config)


def bare_function_schemas(chat_tools: list[dict]) -> list[dict]:
    """Chat Completions tool definitions as bare function schemas (name, description,
    parameters)."""
    return [tool["function"] for tool in chat_tools]


def render_object(value: Any) -> str | None:
    """An object a tool returned, as the text the model should read: pretty JSON (so there
    are lines to keep) for pydantic models, dataclasses, dicts, lists and tuples, ``None`` for
    anything else. Frameworks that send ``str(value)`` would give the model a Python repr on
    one line, in which no error line can be found."""
    if isinstance(value, str):
        return value
    if hasattr(value, "model_dump") and callable(value.model_dump):
        try:
            value = value.model_dump(mode="json")
        except Exception:
            return None
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if not isinstance(value, (dict, list, tuple)):
        return None
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return None


def trim_and_store(
    text: str,
    *,
    tool: str,
    window: int | None,
    config: Config,
    store: Store,
    session: str,
    model: str | None = None,
) -> str:
    """``text`` trimmed for the model (at ``window``, else ``model``'s), its original stored
    first (the trim's markers name it); ``text`` itself when it is short enough."""
    out = trim(text, tool=tool, window=window, model=model, config=config)
    if not out.trimmed:
        return text
    # The original is committed before anything that names it reaches the model.
    store.put(text, session=session)
    return out.text


def trim_text_blocks(
    blocks: list[Any],
    *,
    tool: str,
    window: int | None,
    config: Config,
    store: Store,
    session: str,
    model: str | None = None,
) -> list[Any] | None:
    """Content blocks (``{"type": "text", "text": ...}``, as LangChain, MCP and the chat APIs
    write them) with each text block trimmed and its original stored; ``None`` when none
    changed. Other blocks (images, files) stay as they are."""
    changed = False
    out: list[Any] = []
    for block in blocks:
        if isinstance(block, dict) and block.get("type") in ("text", "input_text", "output_text"):
            text = block.get("text")
            if isinstance(text, str):
                trimmed = trim_and_store(
                    text,
                    tool=tool,
                    window=window,
                    config=config,
                    store=store,
                    session=session,
                    model=model,
                )
                if trimmed is not text:
                    block = {**block, "text": trimmed}
                    changed = True
        out.append(block)
    return out if changed else None
