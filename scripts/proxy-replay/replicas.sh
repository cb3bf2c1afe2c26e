#!/usr/bin/env bash
# Two `ctxgc serve` replicas on one Redis, with events on every request and the injected tools
# (`--compact --inject-tools`): real sessions go through them, each request to the other replica
# than the one before, and then every id the forwarded requests showed the model (trim markers,
# repeat pointers, abstracts, summaries) is recalled through the replica the session did not use
# last, with the injected `recall_tool_result` (scripts/proxy-replay/replicas.py). Fails unless
# every id answers.
#
# Usage: scripts/proxy-replay/replicas.sh [SESSIONS...]
#   SESSIONS   default: four GPT-5-mini sessions whose forwarded requests show every kind of id
#              (trim markers, repeat pointers, abstracts, a summary); with them, each kind must
#              be seen, and answer
#   WINDOW     the replicas' window in tokens (default 32000: events run, as at a small model's)
#   OUT        where logs go (default target/proxy-replicas)
set -euo pipefail
cd "$(dirname "$0")/../.."
sessions=("$@")
defaults=0
if [ ${#sessions[@]} -eq 0 ]; then
  defaults=1
  g=../shared/data/transcripts/mini-swe-agent-gpt5mini
  sessions=("$g/sympy__sympy-23413.traj.json" "$g/django__django-15629.traj.json"
    "$g/django__django-16502.traj.json" "$g/django__django-13590.traj.json")
fi
out=${OUT:-target/proxy-replicas}
window=${WINDOW:-32000}
here=scripts/proxy-replay
rm -rf "$out" && mkdir -p "$out"
# shellcheck source=../lib/ctxgc-bin.sh
source scripts/lib/ctxgc-bin.sh
ctxgc=$(release_ctxgc)
command -v redis-server >/dev/null || { echo "replicas.sh: redis-server is not installed" >&2; exit 1; }

# shellcheck source=../lib/ports.sh
source scripts/lib/ports.sh
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

redis=$(port)
redis-server --port "$redis" --bind 127.0.0.1 --save '' --appendonly no >"$out/redis.log" 2>&1 & pids+=($!)
wait_port "$redis"
up=$(port)
python3 $here/replicas.py upstream "$up" & pids+=($!)
wait_port "$up"
vias=()
for n in 1 2; do
  p=$(port)
  "$ctxgc" serve --listen "127.0.0.1:$p" --openai-upstream "http://127.0.0.1:$up" \
    --store "redis://127.0.0.1:$redis/0" --window "$window" --compact --inject-tools \
    2>"$out/replica-$n.log" & pids+=($!)
  wait_port "$p"
  vias+=("http://127.0.0.1:$p/v1")
done
via=$(IFS=+; echo "${vias[*]}")
RAYON_NUM_THREADS=1 "$ctxgc" replay "${sessions[@]}" --window "$window" --cache openai \
  --policy "none,exec:python3 $here/replicas.py policy --via $via --upstream http://127.0.0.1:$up --out $out/seen.jsonl --label replicas" \
  2>"$out/replay.err" >"$out/replay.txt"
if grep -q "external policy" "$out/replay.err"; then
  cat "$out/replay.err" >&2
  exit 1
fi
python3 $here/replicas.py recall --via "$via" --upstream "http://127.0.0.1:$up" --out "$out/seen.jsonl" | tee "$out/recall.txt"
if [ $defaults = 1 ]; then
  for kind in "trim marker" "repeat pointer" "abstract or other" "summary"; do
    grep -q "^$kind: " "$out/recall.txt" || { echo "replicas.sh: no $kind id was shown" >&2; exit 1; }
  done
fi
