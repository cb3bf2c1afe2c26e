#!/usr/bin/env bash
# What more could tell apart the old outputs the agent uses again (docs/replay.md, "Tried this
# round"): builds ctxgc with instrument.patch applied in a scratch worktree (the dumps are not
# part of ctxgc), fits the relevance table on the shared sets once to dump every example and
# every reference, then judges candidate features with each user left out (features.py) and
# whether later uses sit near earlier ones (locality.py).
# Usage: scripts/analysis/relevance-features/run.sh   (about 5 minutes, most of it the build)
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$PWD
shared=$root/../shared/data
out=$root/target/relevance-features
tree=$out/worktree
mkdir -p "$out"
git worktree remove --force "$tree" 2>/dev/null || true
git worktree add -q --detach "$tree" HEAD
trap 'git -C "$root" worktree remove --force "$tree"' EXIT
git -C "$tree" apply "$root/scripts/analysis/relevance-features/instrument.patch"
CARGO_TARGET_DIR=$root/target cargo build --release -q --manifest-path "$tree/Cargo.toml" \
  -p ctxgc-cli --bin ctxgc
rm -f "$out/examples.csv" "$out/references.tsv"
CTXGC_DUMP=$out/examples.csv CTXGC_DUMP_LINES=$out/references.tsv "$root/target/release/ctxgc" replay \
  "$shared/client-logs/claude-code" "$shared/client-logs/claude-code-procrypto" \
  "$shared/client-logs/codex" "$shared/transcripts/mini-swe-agent-gpt5mini" \
  "$shared/transcripts/mini-swe-agent-gemini3" --fit-relevance "$out/table.json" >/dev/null
python3 scripts/analysis/relevance-features/features.py "$out/examples.csv"
echo
python3 scripts/analysis/relevance-features/locality.py "$out/references.tsv"
# The release binary was built from the instrumented tree: build HEAD's again.
cargo build --release -q -p ctxgc-cli --bin ctxgc
