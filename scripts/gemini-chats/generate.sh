#!/usr/bin/env bash
# Produces real Gemini CLI chats: installs Gemini CLI (npm, pinned, the conformance suite's) into
# a cache folder it reuses, and drives it through a scripted tool-using session against the
# conformance suite's scripted upstream (scripts/conformance/upstream.py, loopback only). The
# chats land in OUT (default target/gemini-chats) as Gemini CLI writes them, under
# OUT/home/.gemini/tmp/<project>/chats/.
#
#   scripts/gemini-chats/generate.sh [OUT]
#
# Environment: CTXGC_CACHE (default ~/.cache/ctxgc) holds the npm install.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/target/gemini-chats}"
# shellcheck source=../lib/installs.sh
source "$here/../lib/installs.sh"
version="0.61.0"
gemini="$(npm_bin "gemini-cli-$version" "@google/gemini-cli@$version" gemini)"

rm -rf "$out"
mkdir -p "$out/home/.gemini" "$out/work"
out="$(cd "$out" && pwd)"
# shellcheck source=../lib/ports.sh
source "$here/../lib/ports.sh"
port=$(port)
cat > "$out/home/.gemini/settings.json" <<JSON
{"privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false},
 "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
 "security": {"auth": {"selectedType": "gemini-api-key"}}}
JSON
python3 "$root/scripts/conformance/upstream.py" "$port" "$out/upstream.jsonl" &
upstream=$!
trap 'kill $upstream 2>/dev/null || true' EXIT
wait_port "$port" || { echo "the scripted upstream did not start on $port" >&2; exit 1; }
(cd "$out/work" && HOME="$out/home" GEMINI_API_KEY=scripted-upstream-needs-no-key \
  GOOGLE_GEMINI_BASE_URL="http://127.0.0.1:$port" GOOGLE_GENAI_API_VERSION=v1beta \
  GEMINI_CLI_NO_RELAUNCH=true GEMINI_CLI_TRUST_WORKSPACE=true NO_BROWSER=true \
  timeout 180 "$gemini" -p "Run the scripted checks" --yolo -m gemini-2.5-pro >"$out/gemini.log" 2>&1) || {
  echo "gemini -p failed; its output:" >&2
  cat "$out/gemini.log" >&2
  exit 1
}
find "$out/home/.gemini/tmp" -path '*/chats/*' -name 'session-*' | sort
