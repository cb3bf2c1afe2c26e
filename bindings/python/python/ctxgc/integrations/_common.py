"""What every integration shares: where settings and originals come from."""

from __future__ import annotations

import os
from pathlib import Path

from .. import Config, Store


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
