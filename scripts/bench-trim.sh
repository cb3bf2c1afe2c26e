#!/usr/bin/env bash
# Throughput and peak memory of `ctxgc trim` on a generated 1 GB log, against `cat` of the same
# file, in one run on this machine. Usage: scripts/bench-trim.sh [SIZE_BYTES] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-1000000000}
runs=${2:-5}
out=${BENCH_DIR:-bench-out}
mkdir -p "$out"
cargo build --release -q -p ctxgc-cli --bin ctxgc --example gen_log
bin=target/release/ctxgc
log="$out/gen-$size.log"
if [ ! -s "$log" ]; then
  target/release/examples/gen_log "$size" > "$log"
fi
bytes=$(stat -c %s "$log")
cat "$log" > /dev/null  # warm the page cache

best() { # best wall time of N runs of a shell snippet, in seconds
  local snippet=$1 best=
  for _ in $(seq "$runs"); do
    local t0 t1
    t0=$(date +%s.%N); bash -c "$snippet"; t1=$(date +%s.%N)
    best=$(python3 -c "t=$t1-$t0; b='$best'; print(t if b=='' else min(t, float(b)))")
  done
  echo "$best"
}
mbps() { python3 -c "print(f'{$bytes/$1/1e6:,.0f} MB/s')"; }

cat_file=$(best "cat '$log' > /dev/null")
trim_file=$(best "$bin trim < '$log' > /dev/null")
cat_pipe=$(best "cat '$log' | cat > /dev/null")
trim_pipe=$(best "cat '$log' | $bin trim > /dev/null")
rss_kb=$(/usr/bin/time -f %M "$bin" trim < "$log" 2>&1 >/dev/null | tail -1)
cat_rss_kb=$(/usr/bin/time -f %M cat "$log" 2>&1 >/dev/null | tail -1)

echo "input: $log ($bytes bytes), best of $runs runs"
printf '%-40s %8.3f s  %s\n' "cat FILE > /dev/null" "$cat_file" "$(mbps "$cat_file")"
printf '%-40s %8.3f s  %s  (%.2f of cat)\n' "ctxgc trim < FILE > /dev/null" "$trim_file" "$(mbps "$trim_file")" "$(python3 -c "print($cat_file/$trim_file)")"
printf '%-40s %8.3f s  %s\n' "cat FILE | cat > /dev/null" "$cat_pipe" "$(mbps "$cat_pipe")"
printf '%-40s %8.3f s  %s  (%.2f of cat)\n' "cat FILE | ctxgc trim > /dev/null" "$trim_pipe" "$(mbps "$trim_pipe")" "$(python3 -c "print($cat_pipe/$trim_pipe)")"
echo "peak RSS: ctxgc trim ${rss_kb} KB, cat ${cat_rss_kb} KB"
echo "output:"; "$bin" trim < "$log" | grep -E '^\[\.\.\. |^\[line ' | head -5
