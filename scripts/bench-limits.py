#!/usr/bin/env python3
"""The proxy within its means: memory, CPU and fairness under heavy requests, and a stalled or
restarted store, measured against a fast local fake upstream (loopback only).

Usage: scripts/bench-limits.sh [SCENARIO...]   (builds, then runs this; scenarios below)

Each scenario prints one line of figures and, with --json FILE, adds them to FILE. Scenarios:
  results     one request with 40,000 and 80,000 small tool results: direct vs through ctxgc
  answer      a 4 MB JSON answer in 2 KB chunks: direct vs through ctxgc
  big         32 concurrent 30 MB requests: peak resident memory, and 5 s after
  sessions    256 concurrent agent sessions (20-100 KB outputs): resident memory
  neighbour   4 requests of 40,000 results on one key while another key sends a 100 KB output
  redis       Redis paused 10 s under load (throughput), then restarted without persistence
              (same tenant, every referenced original recallable)
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CTXGC = ROOT / "target/release/ctxgc"
FAKE = ROOT / "target/release/examples/fake_upstream"
UP_PORT = 18180
MEMORY_FAIL_OPEN = 'ctxgc_fail_open_total{cause="memory"}'
PX_PORT = 18887


def free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def wait_port(port: int, deadline: float = 20.0) -> None:
    end = time.time() + deadline
    while time.time() < end:
        if not free(port):
            return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port} after {deadline} s")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Sampler(threading.Thread):
    """Samples a process's resident memory every 20 ms, keeping the peak."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.running = pid, 0.0, True

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.02)

    def stop(self) -> float:
        self.running = False
        self.join()
        return self.peak


def post(port: int, path: str, body: bytes, headers: dict | None = None, timeout: float = 600):
    """POSTs and reads the whole answer: (status, headers, body bytes, seconds)."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"content-type": "application/json", "authorization": "Bearer sk-bench-a"}
    h.update(headers or {})
    conn.request("POST", path, body=body, headers=h)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), data, time.perf_counter() - started


def get(port: int, path: str, headers: dict | None = None, timeout: float = 30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("GET", path, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def chat(messages: list, model: str = "gpt-5") -> bytes:
    return json.dumps({"model": model, "messages": messages}).encode()


def many_results(n: int) -> bytes:
    """One request whose history holds n small tool results, each its own turn."""
    messages = [{"role": "user", "content": "Check every file."}]
    for i in range(n):
        cid = f"call_{i}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": f"wc -l f{i}"})}}]})
        messages.append({"role": "tool", "tool_call_id": cid, "content": f"{i * 7 % 900} f{i}.py"})
    return chat(messages)


def output(kb: int, seed: int, error_at: float = 0.5) -> str:
    rnd = random.Random(seed)
    lines, size = [], 0
    while size < kb * 1024:
        line = f"[{len(lines):06d}] compiling module_{rnd.randrange(10**6)} ... ok ({rnd.randrange(90)} ms)"
        lines.append(line)
        size += len(line) + 1
    lines[int(len(lines) * error_at)] = "error[E0308]: mismatched types in src/lib.rs:42"
    return "\n".join(lines) + "\nexit status 1\n"


def agent_history(turns: int, kb: int, seed: int) -> list:
    messages = [{"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": f"Fix the build (session {seed})."}]
    for t in range(turns):
        cid = f"call_{seed}_{t}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": f"cargo build -p c{t}"})}}]})
        messages.append({"role": "tool", "tool_call_id": cid, "content": output(kb, seed * 1000 + t)})
    return messages


class Servers:
    """The fake upstream and `ctxgc serve`, started fresh for a scenario."""

    def __init__(self, store: str, extra: list[str] | None = None, env: dict | None = None,
                 config: str = ""):
        self.tmp = tempfile.mkdtemp(prefix="ctxgc-limits-")
        Path(f"{self.tmp}/ctxgc.toml").write_text(config)
        self.up = subprocess.Popen([str(FAKE), str(UP_PORT)], stdout=subprocess.DEVNULL)
        wait_port(UP_PORT)
        self.store, self.extra, self.env = store, extra or [], env or {}
        self.px: subprocess.Popen | None = None
        self.start_proxy()

    def start_proxy(self) -> None:
        store = self.store.replace("TMP", self.tmp)
        env = dict(os.environ, XDG_CONFIG_HOME=self.tmp, RUST_LOG="warn", **self.env)
        self.log = open(f"{self.tmp}/serve.log", "ab")
        self.px = subprocess.Popen(
            [str(CTXGC), "--config", f"{self.tmp}/ctxgc.toml", "serve", "--listen", f"127.0.0.1:{PX_PORT}",
             "--openai-upstream", f"http://127.0.0.1:{UP_PORT}", "--store", store, *self.extra],
            stderr=self.log, env=env)
        wait_port(PX_PORT)

    def stop_proxy(self) -> None:
        if self.px:
            self.px.send_signal(signal.SIGTERM)
            self.px.wait(30)
            self.px = None

    def close(self) -> None:
        self.stop_proxy()
        self.up.terminate()
        self.up.wait(10)

    def metric(self, name: str) -> float:
        _, text = get(PX_PORT, "/metrics")
        total = 0.0
        for line in text.decode().splitlines():
            if line.startswith(name) and not line.startswith("#"):
                total += float(line.rsplit(" ", 1)[1])
        return total


def best_of(k: int, f) -> float:
    return min(f() for _ in range(k))


def scenario_results(out: dict) -> None:
    # 80,000 small results (20 MB, 320,000 objects) weigh ~380 MB to rewrite, past the default
    # in-flight budget of 256 MB (where such a request is streamed upstream unchanged): the
    # budget is raised here so that both sizes are rewritten and timed.
    s = Servers("memory", config="[proxy]\ninflight_memory_mb = 1024\n")
    try:
        row = {}
        for n in (40_000, 80_000):
            body = many_results(n)
            direct = best_of(3, lambda: post(UP_PORT, "/v1/chat/completions", body)[3])
            # The first request of a history works out every turn (later ones hit the memo):
            # a new key each time, so every measured request is a first one.
            times = []
            for k in range(5):
                status, _, _, t = post(PX_PORT, "/v1/chat/completions", body,
                                       {"authorization": f"Bearer sk-results-{n}-{k}"})
                assert status == 200, status
                times.append(t)
            median = sorted(times)[2]
            row[n] = {"bytes": len(body), "direct_s": direct, "proxy_s": median}
            print(f"  {n} results ({len(body) / 1e6:.1f} MB): direct {direct:.3f} s, "
                  f"through ctxgc {median:.3f} s (median of 5, best {min(times):.3f} s)")
        print(f"  80,000 / 40,000 through ctxgc: {row[80_000]['proxy_s'] / row[40_000]['proxy_s']:.2f}x")
        print(f"  fail-open: {s.metric('ctxgc_fail_open_total'):.0f}")
        out["results"] = row
    finally:
        s.close()


def scenario_answer(out: dict) -> None:
    s = Servers("memory")
    try:
        body = chat([{"role": "user", "content": "hi"}])
        h = {"x-fake-answer-bytes": str(4 << 20)}
        direct = best_of(5, lambda: post(UP_PORT, "/v1/chat/completions", body, h)[3])
        proxy = best_of(5, lambda: post(PX_PORT, "/v1/chat/completions", body, h)[3])
        print(f"  4 MB answer in 2 KB chunks: direct {direct:.3f} s, through ctxgc {proxy:.3f} s "
              f"({proxy / direct:.2f}x)")
        out["answer"] = {"direct_s": direct, "proxy_s": proxy}
    finally:
        s.close()


def scenario_big(out: dict) -> None:
    s = Servers("sqlite:TMP/store.sqlite")
    try:
        # 30 MB: 300 turns of 100 KB outputs (each trimmed, its original stored).
        bodies = [chat(agent_history(300, 100, seed)) for seed in range(4)]
        sampler = Sampler(s.px.pid)
        sampler.start()
        results = [None] * 32

        def one(i: int) -> None:
            results[i] = post(PX_PORT, "/v1/chat/completions", bodies[i % 4],
                              {"authorization": f"Bearer sk-big-{i}"})

        started = time.perf_counter()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - started
        peak = sampler.stop()
        time.sleep(5)
        after = rss_mb(s.px.pid)
        ok = sum(1 for r in results if r and r[0] == 200)
        trimmed = sum(1 for r in results if r and int(r[1].get("x-received-bytes", 0)) < len(bodies[0]) // 2)
        print(f"  32 x {len(bodies[0]) / 1e6:.0f} MB: {ok}/32 answered in {took:.1f} s, {trimmed} rewritten; "
              f"peak RSS {peak:.0f} MB, {after:.0f} MB 5 s after; "
              f"fail-open (memory) {s.metric(MEMORY_FAIL_OPEN):.0f}")
        out["big"] = {"answered": ok, "rewritten": trimmed, "peak_mb": peak, "after_mb": after, "seconds": took}
    finally:
        s.close()


def scenario_sessions(out: dict) -> None:
    s = Servers("sqlite:TMP/store.sqlite")
    try:
        sampler = Sampler(s.px.pid)
        sampler.start()
        errors = []

        def session(i: int) -> None:
            rnd = random.Random(i)
            messages = agent_history(0, 0, i)
            for t in range(6):
                cid = f"call_{i}_{t}"
                messages.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]})
                messages.append({"role": "tool", "tool_call_id": cid,
                                 "content": output(rnd.randrange(20, 100), i * 100 + t)})
                status = post(PX_PORT, "/v1/chat/completions", chat(messages),
                              {"authorization": f"Bearer sk-session-{i}"})[0]
                if status != 200:
                    errors.append(status)

        started = time.perf_counter()
        threads = [threading.Thread(target=session, args=(i,)) for i in range(256)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        peak = sampler.stop()
        _, text = get(PX_PORT, "/metrics")
        causes = {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in text.decode().splitlines()
                  if line.startswith("ctxgc_fail_open_total{") and not line.endswith(" 0")}
        outcomes = {line.split('outcome="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
                    for line in text.decode().splitlines()
                    if line.startswith('ctxgc_requests_total{api="openai-chat"')}
        time.sleep(3)
        print(f"  256 sessions x 6 turns: {len(errors)} errors in {time.perf_counter() - started:.1f} s, "
              f"peak RSS {peak:.0f} MB, {rss_mb(s.px.pid):.0f} MB 3 s after; requests {outcomes}, "
              f"fail-open {causes}")
        out["sessions"] = {"peak_mb": peak, "errors": len(errors)}
    finally:
        s.close()


def scenario_neighbour(out: dict) -> None:
    s = Servers("memory")
    try:
        heavy = many_results(40_000)
        small = chat(agent_history(1, 100, 7))
        # Alone first: the usual latency.
        alone = best_of(3, lambda: post(PX_PORT, "/v1/chat/completions", small,
                                        {"authorization": "Bearer sk-quiet"})[3])
        done = threading.Event()

        def noisy(k: int) -> None:
            while not done.is_set():
                post(PX_PORT, "/v1/chat/completions", heavy,
                     {"authorization": "Bearer sk-noisy", "x-ctxgc-session": f"n{k}-{time.time()}"})

        threads = [threading.Thread(target=noisy, args=(k,), daemon=True) for k in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        lat, trimmed = [], 0
        for k in range(5):
            status, headers, _, t = post(PX_PORT, "/v1/chat/completions", small,
                                         {"authorization": "Bearer sk-quiet", "x-ctxgc-session": f"q{k}"})
            lat.append(t)
            trimmed += int(headers.get("x-received-bytes", 0)) < len(small) // 2
            time.sleep(0.3)
        done.set()
        print(f"  a 100 KB output alone {alone * 1000:.0f} ms; beside 4 heavy requests: "
              f"max {max(lat) * 1000:.0f} ms, median {sorted(lat)[2] * 1000:.0f} ms, {trimmed}/5 trimmed")
        out["neighbour"] = {"alone_s": alone, "max_s": max(lat), "trimmed": trimmed}
        for t in threads:
            t.join(120)
    finally:
        s.close()


def scenario_redis(out: dict) -> None:
    import shutil
    server = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    if not server:
        raise SystemExit("redis-server is needed: apt-get install redis-server")
    port = 16399
    tmp = tempfile.mkdtemp(prefix="ctxgc-redis-")

    def start_redis() -> subprocess.Popen:
        p = subprocess.Popen([server, "--port", str(port), "--save", "", "--appendonly", "no",
                              "--dir", tmp], stdout=subprocess.DEVNULL)
        wait_port(port)
        return p

    redis = start_redis()
    s = Servers(f"redis://127.0.0.1:{port}")
    try:
        body_for = {i: chat(agent_history(2, 40, i)) for i in range(8)}
        counts = {"n": 0}
        stop = threading.Event()

        def load(i: int) -> None:
            while not stop.is_set():
                try:
                    post(PX_PORT, "/v1/chat/completions", body_for[i], {"authorization": f"Bearer sk-r{i}"},
                         timeout=30)
                    counts["n"] += 1
                except OSError:
                    pass

        threads = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(8)]
        for t in threads:
            t.start()
        time.sleep(2)
        n0 = counts["n"]
        time.sleep(5)
        normal = (counts["n"] - n0) / 5
        redis.send_signal(signal.SIGSTOP)
        n0 = counts["n"]
        t0 = time.perf_counter()
        status, _ = get(PX_PORT, "/ctxgc/readyz")
        ready_s = time.perf_counter() - t0
        time.sleep(10 - ready_s)
        paused = (counts["n"] - n0) / 10
        redis.send_signal(signal.SIGCONT)
        time.sleep(2)
        stop.set()
        for t in threads:
            t.join(60)
        print(f"  Redis paused 10 s: {paused:.0f} req/s against {normal:.0f} ({paused / max(normal, 1e-9):.0%}); "
              f"readyz answered {status} in {ready_s * 1000:.0f} ms")
        out["redis"] = {"paused_rps": paused, "normal_rps": normal, "readyz_s": ready_s,
                        "readyz_status": status}
        # Restart without persistence: every key is gone.
        import re
        key = {"authorization": "Bearer sk-restart"}
        body = chat(agent_history(3, 100, 99))
        _, _, answer, _ = post(PX_PORT, "/v1/chat/completions", body, {**key, "x-fake-echo": "1"})
        told = sorted(set(re.findall(r"r-[0-9a-f]{16}", json.loads(answer)["choices"][0]["message"]["content"])))
        _, stats = get(PX_PORT, "/ctxgc/stats", key)
        session = next(iter(json.loads(stats)["usage"]))
        redis.kill()
        redis.wait()
        redis = start_redis()
        time.sleep(2.5)  # the running proxy looks at its store every second
        # A second replica, started after the restart, on the same Redis.
        replica = subprocess.Popen(
            [str(CTXGC), "serve", "--listen", f"127.0.0.1:{PX_PORT + 1}",
             "--openai-upstream", f"http://127.0.0.1:{UP_PORT}", "--store", f"redis://127.0.0.1:{port}"],
            stderr=subprocess.DEVNULL, env=dict(os.environ, XDG_CONFIG_HOME=s.tmp, RUST_LOG="warn"))
        try:
            wait_port(PX_PORT + 1)
            # The client resends its history, through either replica.
            post(PX_PORT + 1, "/v1/chat/completions", body, key)
            _, stats2 = get(PX_PORT + 1, "/ctxgc/stats", key)
            same_tenant = session in json.loads(stats2)["usage"]
            recallable = sum(get(PX_PORT + 1, f"/ctxgc/sessions/{session}/originals/{rid}", key)[0] == 200
                             for rid in told)
        finally:
            replica.terminate()
            replica.wait(10)
        print(f"  Redis restarted without persistence: same tenant on a new replica: {same_tenant}; "
              f"{recallable}/{len(told)} referenced originals recallable")
        out["redis"].update({"same_tenant": same_tenant, "recallable": recallable, "told": len(told)})
    finally:
        s.close()
        redis.kill()


SCENARIOS = {
    "results": scenario_results,
    "answer": scenario_answer,
    "big": scenario_big,
    "sessions": scenario_sessions,
    "neighbour": scenario_neighbour,
    "redis": scenario_redis,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    out: dict = {}
    for name in args.scenarios:
        if name not in SCENARIOS:
            raise SystemExit(f"unknown scenario `{name}`: one of {', '.join(SCENARIOS)}")
        print(f"{name}:", flush=True)
        SCENARIOS[name](out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
