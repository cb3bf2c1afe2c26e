#!/usr/bin/env bash
# Added latency and throughput of `ctxgc serve` in front of a fast local fake upstream, measured
# with wrk against the upstream directly and through the proxy, for 10K- and 100K-token requests.
# Usage: [SERVE_FLAGS=--compact] scripts/bench-proxy.sh [SECONDS]   (wrk: apt-get install wrk)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
out=${BENCH_DIR:-bench-out}/proxy
mkdir -p "$out"
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install -y wrk" >&2; exit 1; }
cargo build --release -q -p ctxgc-cli --bin ctxgc -p ctxgc-proxy --example fake_upstream --example gen_request
for n in 10000 100000; do target/release/examples/gen_request $n > "$out/body-$n.json"; done
target/release/examples/gen_request 100000 stream > "$out/body-100000-sse.json"
rm -f "$out"/store.sqlite*
target/release/examples/fake_upstream 18080 & up=$!
target/release/ctxgc serve --listen 127.0.0.1:18787 --openai-upstream http://127.0.0.1:18080 --store "sqlite:$out/store.sqlite" ${SERVE_FLAGS:-} 2>"$out/serve.log" & px=$!
trap 'kill $up $px 2>/dev/null || true' EXIT
sleep 1
cat > "$out/post.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("BODY"), "rb"); wrk.body = f:read("*a"); f:close()
LUA
run() { # url body connections -> "p50_ms p99_ms rps"
  BODY=$2 wrk -t$(( $3 < 2 ? 1 : 2 )) -c"$3" -d"${secs}s" --latency -s "$out/post.lua" "$1" > "$out/wrk.txt"
  python3 - "$out/wrk.txt" <<'PY'
import re,sys
t=open(sys.argv[1]).read()
def ms(label):
    m=re.search(r'^\s*%s\s+([\d.]+)(us|ms|s)\s*$' % re.escape(label), t, re.M)
    v=float(m.group(1)); return v/1000 if m.group(2)=='us' else v*1000 if m.group(2)=='s' else v
rps=float(re.search(r'Requests/sec:\s+([\d.]+)', t).group(1))
print(f"{ms('50%'):.3f} {ms('99%'):.3f} {rps:.0f}")
PY
}
printf '%-22s %10s %10s %10s %10s %12s %12s %10s\n' request "direct p50" "proxy p50" "added p50" "added p99" "direct rps" "proxy rps" "ratio"
for n in 10000 100000 100000-sse; do
  body="$out/body-$n.json"
  # One request first: a session's first request counts its whole history (later ones count
  # only what is new), which is not the steady state measured here.
  curl -s -o /dev/null -H 'content-type: application/json' --data-binary @"$body" http://127.0.0.1:18787/v1/chat/completions
  read -r d50 d99 _ <<<"$(run http://127.0.0.1:18080/v1/chat/completions "$body" 1)"
  read -r p50 p99 _ <<<"$(run http://127.0.0.1:18787/v1/chat/completions "$body" 1)"
  read -r _ _ drps <<<"$(run http://127.0.0.1:18080/v1/chat/completions "$body" 8)"
  read -r _ _ prps <<<"$(run http://127.0.0.1:18787/v1/chat/completions "$body" 8)"
  printf '%-22s %9.3fms %9.3fms %9.3fms %9.3fms %12s %12s %10s\n' "${n%-sse} tokens$([ "$n" != "${n%-sse}" ] && echo ' SSE') ($(( $(stat -c %s "$body") / 1024 )) KB)" "$d50" "$p50" \
    "$(python3 -c "print($p50-$d50)")" "$(python3 -c "print($p99-$d99)")" "$drps" "$prps" "$(python3 -c "print(f'{$prps/$drps:.2f}')")"
done
curl -s http://127.0.0.1:18787/ctxgc/stats | python3 -c "import json,sys; d=json.load(sys.stdin); print('proxy stats:', {k: d[k] for k in ('requests','rewritten','passed_through','fail_open','bytes_saved','originals_stored')})"
