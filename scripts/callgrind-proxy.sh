#!/usr/bin/env bash
# Instruction counts of `ctxgc serve` per request, which the machine's noise does not move:
# callgrind on the proxy in front of the fake upstream, two warm-up requests of the 100K-token
# body (the second continues the first's session), then N requests counted.
# Usage: scripts/callgrind-proxy.sh [N]   (valgrind: apt-get install valgrind)
# Then: callgrind_annotate --inclusive=yes bench-out/callgrind/callgrind.out | head -60
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
out=${BENCH_DIR:-bench-out}/callgrind
mkdir -p "$out"
command -v valgrind >/dev/null || { echo "valgrind is needed: apt-get install -y valgrind" >&2; exit 1; }
cargo build --release -q -p ctxgc-cli --bin ctxgc -p ctxgc-proxy --example fake_upstream --example gen_request
target/release/examples/gen_request 100000 > "$out/body-100000.json"
rm -f "$out"/store.sqlite* "$out/callgrind.out"
target/release/examples/fake_upstream 18080 & up=$!
valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" --instr-atstart=no \
  target/release/ctxgc serve --listen 127.0.0.1:18787 --openai-upstream http://127.0.0.1:18080 \
  --store "sqlite:$out/store.sqlite" 2>"$out/serve.log" & px=$!
trap 'kill $up $px 2>/dev/null || true' EXIT
for _ in $(seq 120); do curl -sf -o /dev/null http://127.0.0.1:18787/ctxgc/healthz && break; sleep 0.5; done
post() { curl -sf -o /dev/null -H 'content-type: application/json' --data-binary "@$out/body-100000.json" http://127.0.0.1:18787/v1/chat/completions; }
post; post
sleep 2
callgrind_control -i on "$px" >/dev/null
for _ in $(seq "$n"); do post; done
sleep 3 # the client-bill thread finishes the last request
callgrind_control -i off "$px" >/dev/null
kill -INT "$px"; wait "$px" || true
total=$(callgrind_annotate "$out/callgrind.out" | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
echo "$n requests at 100K tokens: $total instructions, $((total / n)) a request ($out/callgrind.out)"
