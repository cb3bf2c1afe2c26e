#!/usr/bin/env bash
# Produces real agent histories for the importers' tests: Hermes 0.19.0 (PyPI) and opencode
# 1.18.33 (npm), pinned and installed into cache folders they reuse, each driven through a
# scripted tool-using session against the conformance suite's scripted upstream
# (scripts/conformance/upstream.py, loopback only). Both write into one home folder laid out
# as a user's, OUT/home: Hermes's ~/.hermes/state.db (with compactions Hermes made itself: a
# 64K window, outputs capped at 30,000 characters so they are not spilled to files) and its
# session snapshot (sessions/session_<id>.json, which Hermes writes when asked), and opencode's
# ~/.local/share/opencode/opencode.db.
#
#   scripts/agent-histories/generate.sh [OUT]
#
# Environment: CTXGC_CACHE (default ~/.cache/ctxgc) holds the installs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/target/agent-histories}"
# shellcheck source=../lib/installs.sh
source "$here/../lib/installs.sh"

hermes="$cache/py-hermes-agent-0.19.0-conformance"
if ! [ -f "$hermes/.complete" ]; then
  rm -rf "$hermes" && python3 -m venv "$hermes"
  "$hermes/bin/pip" install -q --disable-pip-version-check hermes-agent==0.19.0
  touch "$hermes/.complete"
fi
opencode="$(npm_bin opencode-ai-1.18.33 opencode-ai@1.18.33 opencode)"

rm -rf "$out"
mkdir -p "$out/home" "$out/work"
out="$(cd "$out" && pwd)"
home="$out/home"
# shellcheck source=../lib/ports.sh
source "$here/../lib/ports.sh"
port=$(port)
python3 "$root/scripts/conformance/upstream.py" "$port" "$out/upstream.jsonl" &
upstream=$!
trap 'kill $upstream 2>/dev/null || true' EXIT
wait_port "$port" || { echo "the scripted upstream did not start on $port" >&2; exit 1; }

# Hermes: `hermes -z`, a custom OpenAI-compatible endpoint, its own compression.
mkdir -p "$home/.hermes"
cat > "$home/.hermes/config.yaml" <<YAML
model:
  provider: custom
  base_url: http://127.0.0.1:$port/v1
  default: scripted-model
  api_key: sk-scripted-upstream
  context_length: 64000
tool_output:
  max_bytes: 30000
sessions:
  write_json_snapshots: true
YAML
(cd "$out/work" && HOME="$home" HERMES_HOME="$home/.hermes" \
  timeout 300 "$hermes/bin/hermes" -z "Agent history run: run the scripted checks" >"$out/hermes.log" 2>&1) || {
  echo "hermes -z failed; its output:" >&2
  cat "$out/hermes.log" >&2
  exit 1
}

# opencode: `opencode run`, its Anthropic provider pointed at the upstream, the bundled model
# list (no fetch), every tool allowed.
mkdir -p "$home/.config/opencode"
cat > "$home/.config/opencode/opencode.json" <<JSON
{"\$schema": "https://opencode.ai/config.json", "autoupdate": false, "share": "disabled",
 "provider": {"anthropic": {"options": {"baseURL": "http://127.0.0.1:$port/v1",
                                        "apiKey": "sk-scripted-upstream"}}},
 "permission": {"bash": "allow", "edit": "allow", "webfetch": "deny"}}
JSON
(cd "$out/work" && HOME="$home" XDG_DATA_HOME= XDG_CONFIG_HOME= OPENCODE_DISABLE_MODELS_FETCH=true \
  OPENCODE_DISABLE_AUTOUPDATE=true OPENCODE_DISABLE_LSP_DOWNLOAD=true \
  timeout 300 "$opencode" run --auto -m anthropic/claude-sonnet-4-5 "Run the scripted checks" \
  >"$out/opencode.log" 2>&1) || {
  echo "opencode run failed; its output:" >&2
  cat "$out/opencode.log" >&2
  exit 1
}
ls "$home/.hermes/state.db" "$home/.local/share/opencode/opencode.db"
