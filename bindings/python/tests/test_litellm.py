"""LiteLLM 1.110: the pre-call hook, a real ``CustomLogger``, on a real request through
``litellm.acompletion`` with a mocked response (LiteLLM's own mock)."""

from __future__ import annotations

import asyncio
import copy

import ctxgc
from conftest import require, tool_session

litellm = require("litellm")


def test_pre_call_hook_trims_tool_results_deterministically() -> None:
    from litellm.integrations.custom_logger import CustomLogger

    from ctxgc.integrations.litellm import CtxgcHook

    store = ctxgc.Store()
    hook = CtxgcHook(store=store, window=32_000)
    assert isinstance(hook, CustomLogger)
    messages = tool_session(3, lines=3000)
    data = {"model": "gpt-4o-mini", "messages": copy.deepcopy(messages)}
    out = asyncio.run(hook.async_pre_call_hook(None, None, data, "completion"))
    sent = out["messages"]
    assert sent[0] == messages[0] and sent[1] == messages[1]
    for before, after in zip(messages, sent, strict=True):
        if before["role"] == "tool":
            assert len(after["content"]) < len(before["content"]) / 3
            assert after["content"].endswith("exit code: 1\n")
            rid = "r-" + after["content"].split(" id r-")[1][:16]
            assert store.recall(rid, session="litellm") == before["content"]
    again = asyncio.run(
        hook.async_pre_call_hook(
            None, None, {"model": "gpt-4o-mini", "messages": copy.deepcopy(messages)}, "completion"
        )
    )
    assert again["messages"] == sent, "the same bytes on every request: the cache keeps hitting"
    # LiteLLM accepts the trimmed request (its own mock answers).
    reply = asyncio.run(litellm.acompletion(model="gpt-4o-mini", messages=sent, mock_response="ok"))
    assert reply.choices[0].message.content == "ok"


def test_anthropic_blocks_are_trimmed_too() -> None:
    from ctxgc.integrations.litellm import CtxgcHook

    hook = CtxgcHook(store=ctxgc.Store(), window=32_000)
    body = "".join(f"line {i}\n" for i in range(20_000))
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": body}],
        },
    ]
    assert hook.trim_messages(messages) == 1
    assert len(messages[2]["content"][0]["content"]) < len(body) / 3
