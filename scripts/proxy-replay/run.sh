#!/usr/bin/env bash
# Replays real sessions through proxies as the agent sent them (each request the agent's whole
# history so far, Chat Completions, one at a time) and prices what the upstream receives with the
# replay lab: cost against sending directly, recall, requests whose prompt only grew (the cache
# survives), and the time each proxy added.
#
# Usage: scripts/proxy-replay/run.sh [SESSIONS...]
#   SESSIONS       files or folders, default ../shared/data/transcripts/mini-swe-agent-gpt5mini
#   MODEL          the request's `model` (default gpt-5-mini: ctxgc serve takes the window from it)
#   CONFIGS        extra `ctxgc serve` flag sets, separated by `;` (default "--compact")
#   HEADROOM=1     also headroom-ai's proxy (installs headroom-ai[proxy] 0.42.0, about 1 GB)
#   OUT            where logs and stats go (default target/proxy-replay)
set -euo pipefail
cd "$(dirname "$0")/../.."
sessions=("$@")
[ ${#sessions[@]} -gt 0 ] || sessions=(../shared/data/transcripts/mini-swe-agent-gpt5mini)
model=${MODEL:-gpt-5-mini}
out=${OUT:-target/proxy-replay}
configs=${CONFIGS:---compact}
here=scripts/proxy-replay
rm -rf "$out" && mkdir -p "$out"
# shellcheck source=../lib/ctxgc-bin.sh
source scripts/lib/ctxgc-bin.sh
ctxgc=$(release_ctxgc)

# shellcheck source=../lib/ports.sh
source scripts/lib/ports.sh
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

up=$(port)
python3 $here/through.py upstream "$up" & pids+=($!)
wait_port "$up"

policies="none,foresight"
add() { # label via-url
  policies+=",exec:python3 $here/through.py policy --via $2 --upstream http://127.0.0.1:$up --stats $out/$1.jsonl --model $model --label $1"
}
add direct "http://127.0.0.1:$up/v1"
start_ctxgc() { # label flags...
  local label=$1; shift
  local port; port=$(port)
  "$ctxgc" serve --listen "127.0.0.1:$port" --openai-upstream "http://127.0.0.1:$up" \
    --store "sqlite:$out/$label.sqlite" "$@" 2>"$out/$label.log" & pids+=($!)
  wait_port "$port"
  add "$label" "http://127.0.0.1:$port/v1"
  echo "$label $port" >>"$out/ports.txt"
}
start_ctxgc ctxgc
IFS=';' read -ra extra <<<"$configs"
for flags in "${extra[@]}"; do
  [ -n "$flags" ] || continue
  label="ctxgc$(echo "$flags" | tr -c 'a-zA-Z0-9\n' '_' | sed 's/__*/_/g')"
  # shellcheck disable=SC2086
  start_ctxgc "$label" $flags
done
if [ "${HEADROOM:-0}" = 1 ]; then
  venv="${CTXGC_HEADROOM_VENV:-target/headroom-proxy-venv}"
  if [ ! -x "$venv/bin/headroom" ]; then
    python3 -m venv "$venv" && "$venv/bin/pip" install -q "headroom-ai[proxy,code]==0.42.0"
  fi
  tokenizers=$(ls -d "$venv"/lib/python3*/site-packages/litellm/litellm_core_utils/tokenizers | head -1)
  port=$(port)
  HF_HUB_OFFLINE=1 HEADROOM_OFFLINE=1 TIKTOKEN_CACHE_DIR="$tokenizers" "$venv/bin/headroom" proxy \
    --host 127.0.0.1 --port "$port" --openai-api-url "http://127.0.0.1:$up/v1" \
    --no-telemetry --no-rate-limit --no-cache >"$out/headroom.log" 2>&1 & pids+=($!)
  wait_port "$port"
  add headroom "http://127.0.0.1:$port/v1"
fi

# One request at a time: the upstream's /last is the body of the request in flight.
RAYON_NUM_THREADS=1 "$ctxgc" replay "${sessions[@]}" --window 272000 --cache openai,anthropic \
  --policy "$policies" 2>"$out/replay.err" | tee "$out/replay.txt"
# A request a proxy failed was priced as sent unchanged: that is no measurement of the proxy.
if grep -q "external policy" "$out/replay.err"; then
  cat "$out/replay.err" >&2
  exit 1
fi

python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
runs = {}
for f in sorted(out.glob("*.jsonl")):
    stats = [json.loads(l) for l in f.read_text().splitlines() if l.strip()]
    if stats:
        runs[f.stem] = stats


def median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else float("nan")


def p99(values):
    values = sorted(values)
    return values[int(len(values) * 0.99)] if values else float("nan")


direct = runs.get("direct", [])
base = median(s["ms"] for s in direct) if direct else 0.0
print("\nThrough each proxy: requests whose messages extend the previous request's, and time spent")
print("between the client and the upstream (the direct row is the harness's own overhead):")
print("| path | requests | prefix-stable | p50 ms | p99 ms | added p50 ms |")
print("|---|---|---|---|---|---|")
for name, stats in runs.items():
    ms = [s["ms"] for s in stats]
    stable = sum(s["stable"] for s in stats) / len(stats)
    print(f"| {name} | {len(stats)} | {stable:.1%} | {median(ms):.2f} | {p99(ms):.2f} | {median(ms) - base:.2f} |")

# The time a proxy adds grows with the body it parses: each request's added time is its time
# through the proxy less the same request's time sent directly (the replay sends the same
# requests in the same order down every path), grouped by the size of the body the agent sent.
# About 4 bytes of body make a token.
bands = [(0, 100_000, "under 100 KB"), (100_000, 300_000, "100-300 KB"),
         (300_000, 600_000, "300-600 KB (about 100K tokens)"), (600_000, 1 << 62, "600 KB and more")]
if direct and all("bytes" in s for s in direct):
    print("\nAdded time by the size of the request's body (each request against the same request sent directly):")
    print("| path | " + " | ".join(label for _, _, label in bands) + " |")
    print("|---|" + "---|" * len(bands))
    for name, stats in runs.items():
        if name == "direct" or len(stats) != len(direct):
            continue
        cells = []
        for lo, hi, _ in bands:
            added = [s["ms"] - d["ms"] for s, d in zip(stats, direct) if lo <= d["bytes"] < hi]
            cells.append(f"{len(added)} req, p50 {median(added):.2f} ms" if added else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")

# Where each ctxgc proxy's time went, stage by stage (its /metrics: ctxgc_stage_seconds).
import re, urllib.request
ports = [line.split() for line in (out / "ports.txt").read_text().splitlines() if line.strip()]
stages = ["parse", "queue", "agent_tools", "rewrite", "events", "commit"]
print("\nMean time of each stage of the pipeline, per request (`ctxgc_stage_seconds` on each proxy's /metrics):")
print("| path | " + " | ".join(stages) + " |")
print("|---|" + "---|" * len(stages))
for label, port in ports:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    cells = []
    for stage in stages:
        total = re.search(rf'^ctxgc_stage_seconds_sum{{stage="{stage}"}} (\S+)$', text, re.M)
        count = re.search(rf'^ctxgc_stage_seconds_count{{stage="{stage}"}} (\S+)$', text, re.M)
        n = float(count.group(1)) if count else 0
        cells.append(f"{float(total.group(1)) / n * 1000:.2f} ms" if n else "-")
    print(f"| {label} | " + " | ".join(cells) + " |")
PY
