"""Shared fixtures. Under ``CI=true`` a missing dependency fails a test instead of skipping it."""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(module: str) -> Any:
    """Imports ``module``; skips when it is missing, but fails under CI."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if IN_CI:
            pytest.fail(f"{module} is required under CI: {exc}")
        pytest.skip(f"{module} is not installed")


def require_path(env: str) -> Path:
    value = os.environ.get(env)
    if not value or not Path(value).exists():
        if IN_CI:
            pytest.fail(
                f"${env} must name an existing path under CI (bindings/python/ci.sh sets it)"
            )
        pytest.skip(f"${env} is not set")
    return Path(value)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server with a password, on a free loopback port."""
    server = shutil.which("redis-server")
    if server is None:
        if IN_CI:
            pytest.fail("redis-server is required under CI (.ci/run installs it)")
        pytest.skip("redis-server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            "s3cret-pass",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    yield f"redis://:s3cret-pass@127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)


def tool_session(turns: int, lines: int = 400) -> list[dict[str, Any]]:
    """A Chat Completions history: a task, then ``turns`` shell calls with long outputs."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Fix the failing test in tests/test_io.py."},
    ]
    for k in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": f"Step {k}: running the tests.",
                "tool_calls": [
                    {
                        "id": f"call_{k}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"cmd": "pytest -x"}'},
                    }
                ],
            }
        )
        body = "".join(f"tests/test_io.py::test_case_{k}_{j} PASSED\n" for j in range(lines))
        messages.append(
            {
                "role": "tool",
                "tool_call_id": f"call_{k}",
                "content": body + f"E   AssertionError: step {k}\nexit code: 1\n",
            }
        )
    return messages


def pairs_intact(messages: list[dict[str, Any]]) -> bool:
    """Every tool call has its result after it and every result its call (Chat shape)."""
    calls: set[str] = set()
    for m in messages:
        for c in m.get("tool_calls") or []:
            calls.add(c["id"])
        if m.get("role") == "tool" and m["tool_call_id"] not in calls:
            return False
    answered = {m["tool_call_id"] for m in messages if m.get("role") == "tool"}
    return calls <= answered


ERROR_LINE = "ERROR: disk quota exceeded while writing build/out.bin"


def long_log(step: int, lines: int = 6000) -> str:
    """A command's long output (about 300 KB) with one error line in its middle and an exit
    status at its end: what must reach the model is the error line, the tail and a recall id."""
    out = [f"2026-11-24T10:00:00Z INFO step {step} unit {i} compiled ok" for i in range(lines)]
    out.insert(lines // 2, f"{ERROR_LINE} (step {step})")
    out.append(f"build finished: 1 error (step {step}); exit code: 2")
    return "\n".join(out) + "\n"


def recall_id(text: str) -> str:
    """The recall id a trim's marker names."""
    import re

    found = re.findall(r"id (r-[0-9a-f]{16})", text)
    assert found, f"no recall id in {text[:300]!r}"
    return found[0]


def shows_what_matters(text: str, step: int) -> None:
    """The model got the error line, the tail and a recall id of an output trimmed to at most
    a quarter of it."""
    assert f"{ERROR_LINE} (step {step})" in text, "the error line from the middle"
    assert f"build finished: 1 error (step {step}); exit code: 2" in text, "the tail"
    recall_id(text)
    assert len(text) <= len(long_log(step)) / 4, f"{len(text)} characters"
