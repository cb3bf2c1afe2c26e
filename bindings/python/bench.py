"""Throughput of ``ctxgc.trim`` from Python against the Rust library on the same 10 MB log,
and the per-result overhead on a 100 KB output.

    python bindings/python/bench.py   (needs the wheel installed, and cargo)
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import ctxgc

ROOT = Path(__file__).resolve().parents[2]


def log(n_bytes: int) -> str:
    lines, size, i = [], 0, 0
    while size < n_bytes:
        line = f"[{i:08}] compiling module_{i % 977} ... ok ({i * 7919 % 1000} ms)\n"
        if i % 50_000 == 49_999:
            line = f"error[E0308]: mismatched types at src/lib.rs:{i % 400}\n"
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines)


def best(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    big = log(10_000_000)
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(big)
    rust = json.loads(
        subprocess.run(
            [
                "cargo",
                "run",
                "-q",
                "--release",
                "-p",
                "ctxgc-cli",
                "--example",
                "trim_file",
                "--",
                f.name,
                "bash",
                "200000",
                "20",
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    py = best(lambda: ctxgc.trim(big, tool="bash", window=200_000), 20)
    small = log(100_000)
    per_result = best(lambda: ctxgc.trim(small, tool="bash", window=200_000), 200)
    Path(f.name).unlink()
    print(
        f"10 MB log: Rust library {rust['mb_per_s']:.0f} MB/s, "
        f"Python ctxgc.trim {len(big) / py / 1e6:.0f} MB/s "
        f"({rust['best_s'] / py:.2f}x of Rust)"
    )
    print(f"100 KB output: {per_result * 1e3:.3f} ms per ctxgc.trim call")


if __name__ == "__main__":
    main()
