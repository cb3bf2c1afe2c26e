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


def test_every_content_shape_the_apis_allow_is_trimmed() -> None:
    """A Chat ``tool`` message whose content is a list of text parts (as MCP-style tools
    write it), an Anthropic ``tool_result`` with a list of blocks (an image beside the text),
    and a Responses ``function_call_output``: each 300 KB log reaches the upstream with its
    error line, its tail and a recall id, and recall returns the original. LiteLLM accepts
    each trimmed request (its own mock answers)."""
    from conftest import ERROR_LINE, long_log, recall_id, shows_what_matters
    from ctxgc.integrations.litellm import CtxgcHook

    store = ctxgc.Store()
    hook = CtxgcHook(store=store, window=200_000)
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
    }
    chat = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": [{"type": "text", "text": long_log(0)}]},
    ]
    anthropic = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": long_log(1)}, image],
                }
            ],
        },
    ]
    responses = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "f2", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f2", "output": long_log(2)},
    ]
    out = asyncio.run(
        hook.async_pre_call_hook(
            None, None, {"model": "gpt-4o-mini", "messages": chat}, "completion"
        )
    )
    text = out["messages"][2]["content"][0]["text"]
    shows_what_matters(text, 0)
    out = asyncio.run(
        hook.async_pre_call_hook(
            None, None, {"model": "claude-sonnet-4-5", "messages": anthropic}, "anthropic_messages"
        )
    )
    blocks = out["messages"][2]["content"][0]["content"]
    shows_what_matters(blocks[0]["text"], 1)
    assert blocks[1] == image, "the image stays"
    out = asyncio.run(
        hook.async_pre_call_hook(
            None, None, {"model": "gpt-5-mini", "input": responses}, "responses"
        )
    )
    shows_what_matters(out["input"][2]["output"], 2)
    for step, trimmed in [(0, text), (1, blocks[0]["text"]), (2, out["input"][2]["output"])]:
        rid = recall_id(trimmed)
        assert store.get(rid, session="litellm") == long_log(step), "the original is stored"
        assert f"{ERROR_LINE} (step {step})" in store.recall(
            rid, pattern="ERROR", session="litellm"
        )
    reply = asyncio.run(litellm.acompletion(model="gpt-4o-mini", messages=chat, mock_response="ok"))
    assert reply.choices[0].message.content == "ok"
