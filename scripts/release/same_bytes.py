"""The installed wheel's two ways in give the same bytes: ``ctxgc.trim`` in-process and the
``ctxgc trim`` command the wheel put on PATH, on every tool output of the bundled sample
trajectories (``crates/ctxgc-cli/samples``, real mini-swe-agent sessions).

Usage: python same_bytes.py SAMPLES_DIR
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import ctxgc

# A small window as well as a common one: the samples' outputs are short, and at 8K tokens a
# dozen of them are trimmed.
WINDOWS = (8_000, 32_000)


def outputs(folder: Path) -> list[str]:
    """The observations (the user turns after the first) of every sample trajectory."""
    texts = []
    for path in sorted(folder.glob("*.traj.json")):
        messages = json.loads(path.read_text(encoding="utf-8"))["messages"]
        users = [m["content"] for m in messages if m["role"] == "user"]
        texts.extend(t for t in users[1:] if isinstance(t, str))
    return texts


def main() -> int:
    binary = shutil.which("ctxgc")
    if binary is None:
        print("same_bytes: the wheel put no ctxgc command on PATH", file=sys.stderr)
        return 1
    texts = outputs(Path(sys.argv[1]))
    trimmed = 0
    for window, text in ((w, t) for w in WINDOWS for t in texts):
        library = ctxgc.trim(text, tool="bash", window=window)
        command = subprocess.run(
            [binary, "trim", "--tool", "bash", "--window", str(window)],
            input=text.encode(),
            capture_output=True,
            check=True,
            env={"CTXGC_CONFIG": "", "PATH": "/usr/bin:/bin"},
        ).stdout.decode()
        if library.text != command:
            print(f"same_bytes: ctxgc.trim and `ctxgc trim` differ on:\n{text[:300]}", file=sys.stderr)
            return 1
        trimmed += library.trimmed
    if len(texts) < 100 or trimmed < 10:
        print(f"same_bytes: only {len(texts)} outputs, {trimmed} trimmed", file=sys.stderr)
        return 1
    print(f"same bytes: {len(texts)} outputs at windows {WINDOWS}, {trimmed} trims, from {binary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
