#!/usr/bin/env bash
# Produces real Codex CLI rollouts: installs Codex CLI (npm, pinned) into a cache folder it
# reuses, and drives it through scripted tool-using sessions against a local scripted Responses
# upstream (upstream.py, loopback only). The rollouts land in OUT (default target/codex-rollouts),
# named as Codex names them, under OUT/sessions/YYYY/MM/DD/.
#
#   scripts/codex-rollouts/generate.sh [OUT]
#
# Environment: CTXGC_CACHE (default ~/.cache/ctxgc) holds the npm install.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/target/codex-rollouts}"
# shellcheck source=../lib/installs.sh
source "$here/../lib/installs.sh"
version="0.169.0"
codex="$(npm_bin "codex-$version" "@openai/codex@$version" codex)"
"$codex" --version >/dev/null

rm -rf "$out"
mkdir -p "$out/home" "$out/work"
out="$(cd "$out" && pwd)"
# shellcheck source=../lib/ports.sh
source "$here/../lib/ports.sh"
port=$(port)
cat > "$out/home/config.toml" <<TOML
model = "gpt-5.1-codex"
model_provider = "scripted"
# Small, so that Codex compacts its own history during the sessions.
model_auto_compact_token_limit = 12000

[model_providers.scripted]
name = "scripted"
base_url = "http://127.0.0.1:$port/v1"
wire_api = "responses"
supports_websockets = false
TOML

for script in default long; do
  python3 "$here/upstream.py" "$port" "$script" &
  upstream=$!
  trap 'kill $upstream 2>/dev/null || true' EXIT
  wait_port "$port" || { echo "the scripted upstream did not start on $port" >&2; exit 1; }
  (cd "$out/work" && CODEX_HOME="$out/home" OPENAI_API_KEY=scripted-upstream-needs-no-key \
    timeout 120 "$codex" exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox \
    "Run the scripted checks ($script)" >"$out/codex-$script.log" 2>&1) || {
    echo "codex exec failed ($script); its output:" >&2
    cat "$out/codex-$script.log" >&2
    exit 1
  }
  kill "$upstream" 2>/dev/null || true
  wait "$upstream" 2>/dev/null || true
done
mv "$out/home/sessions" "$out/sessions"
find "$out/sessions" -name 'rollout-*.jsonl' | sort
