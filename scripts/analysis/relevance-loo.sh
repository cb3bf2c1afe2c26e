#!/usr/bin/env bash
# The relevance table judged on users it never saw: fits it on the shared sets with each user
# left out in turn (`ctxgc replay --fit-relevance --relevance-folds`), then replays each client
# user's logs with the `ctxgc` policy deciding by the table fitted without them, at the client's
# window, and prints that user's cost against `none` and the share of what the client kept in
# view that ctxgc still showed.
#
# Usage: scripts/analysis/relevance-loo.sh [CONFIG.toml]   (default: built-in settings)
set -euo pipefail
cd "$(dirname "$0")/../.."
shared=../shared/data
out=${OUT:-target/relevance-loo}
mkdir -p "$out"
cargo build --release -q -p ctxgc-cli --bin ctxgc
bin=target/release/ctxgc
config=()
[ $# -gt 0 ] && config=(--config "$1")
sets=("$shared/client-logs/claude-code" "$shared/client-logs/claude-code-procrypto" "$shared/client-logs/codex"
  "$shared/transcripts/mini-swe-agent-gpt5mini" "$shared/transcripts/mini-swe-agent-gemini3")
"$bin" replay "${sets[@]}" --fit-relevance "$out/all.json" --relevance-folds "$out/folds" >"$out/fit.txt"
printf '| user | sessions | ctxgc vs none | of client'"'"'s |\n|---|---|---|---|\n'
for set in claude-code claude-code-procrypto codex; do
  cache=anthropic; [ "$set" = codex ] && cache=openai
  for user in $(ls "$shared/client-logs/$set" | sed 's/-.*//' | sort -u); do
    files=("$shared/client-logs/$set/$user"-*)
    row=$("$bin" "${config[@]}" replay "${files[@]}" --policy ctxgc --cache "$cache" \
      --relevance "$out/folds/${set}_$user.json" 2>/dev/null \
      | grep -m1 -E '^\| ctxgc ')
    # The policy's row: `vs none` is its 7th column, `of client's` its 16th.
    echo "$row" | awk -F'|' -v u="$set/$user" -v n="${#files[@]}" '{gsub(/ /, "", $7); gsub(/ /, "", $16); print "| " u " | " n " | " $7 " | " $16 " |"}'

  done
done
