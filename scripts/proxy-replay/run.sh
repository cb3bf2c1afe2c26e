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
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
rows = {}
for f in sorted(out.glob("*.jsonl")):
    stats = [json.loads(l) for l in f.read_text().splitlines() if l.strip()]
    if stats:
        ms = sorted(s["ms"] for s in stats)
        rows[f.stem] = (len(stats), sum(s["stable"] for s in stats) / len(stats), ms[len(ms) // 2], ms[int(len(ms) * 0.99)])
base = rows.get("direct", (0, 0, 0.0, 0.0))
print("\nThrough each proxy: requests whose messages extend the previous request's, and time spent")
print("between the client and the upstream (the direct row is the harness's own overhead):")
print(f"| path | requests | prefix-stable | p50 ms | p99 ms | added p50 ms |")
print("|---|---|---|---|---|---|")
for name, (n, stable, p50, p99) in rows.items():
    print(f"| {name} | {n} | {stable:.1%} | {p50:.2f} | {p99:.2f} | {p50 - base[2]:.2f} |")
PY
