#!/usr/bin/env bash
# The proxy within its means (issue "a proxy that stays within its means"): memory, CPU and
# fairness under heavy requests, large answers, a paused and a restarted Redis, against a fast
# local fake upstream, loopback only. Prints one line per figure; docs/operations.md quotes them.
# Usage: scripts/bench-limits.sh [results|answer|big|sessions|neighbour|redis ...]
#   (redis needs redis-server: apt-get install redis-server, as .ci/run does)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p ctxgc-cli --bin ctxgc -p ctxgc-proxy --example fake_upstream
exec python3 scripts/bench-limits.py "$@"
