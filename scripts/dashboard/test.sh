#!/usr/bin/env bash
# The dashboard in a real headless Chromium: two tenants' sessions go through `ctxgc serve` (to
# the conformance suite's scripted upstream); as tenant A, the page must render, its totals must
# match /ctxgc/stats for A, no session of tenant B may appear, a session's chart and its hidden
# outputs must show, an original must come back through recall, the key must not appear in the
# page, and the page must fetch nothing from anywhere but the proxy.
#
#   scripts/dashboard/test.sh [SCREENSHOT.png]
#
# Installs Debian's chromium (apt) and playwright-core (npm, cached under CTXGC_CACHE) when
# missing. Loopback only.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=../lib/installs.sh
source "$here/../lib/installs.sh"
out="$root/target/dashboard"
shot="${1:-$out/dashboard.png}"
rm -rf "$out" && mkdir -p "$out"
if ! [ -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null; fi
fi
pw="$cache/npm-playwright-core-1.65.1"
if ! [ -d "$pw/node_modules/playwright-core" ]; then
  mkdir -p "$pw" && (cd "$pw" && npm install --silent --no-audit --no-fund playwright-core@1.65.1 >/dev/null)
fi
# shellcheck source=../lib/ctxgc-bin.sh
source "$root/scripts/lib/ctxgc-bin.sh"
ctxgc=$(debug_ctxgc)
# shellcheck source=../lib/ports.sh
source "$root/scripts/lib/ports.sh"
up_port=$(port); px_port=$(port)
python3 "$root/scripts/conformance/upstream.py" "$up_port" "$out/upstream.jsonl" & up=$!
printf '[proxy]\nadmin_token = "dashboard-admin-token"\n' >"$out/ctxgc.toml"
"$ctxgc" serve --config "$out/ctxgc.toml" --listen "127.0.0.1:$px_port" --store memory --compact --window 8000 \
  --openai-upstream "http://127.0.0.1:$up_port" --anthropic-upstream "http://127.0.0.1:$up_port" 2>"$out/serve.log" & px=$!
trap 'kill $up $px 2>/dev/null || true' EXIT
wait_port "$up_port" && wait_port "$px_port"
proxy="http://127.0.0.1:$px_port"
# Two tenants, two sessions each, a few turns with large tool outputs.
python3 - "$proxy" <<'PY'
import json, sys, urllib.request
proxy = sys.argv[1]
def post(key, body):
    r = urllib.request.Request(proxy + "/v1/chat/completions", data=json.dumps(body).encode(),
                               headers={"content-type": "application/json", "authorization": "Bearer " + key})
    urllib.request.urlopen(r, timeout=30).read()
for key in ("sk-dashboard-A-SECRET", "sk-dashboard-B-SECRET"):
    for task in ("Fix the failing build", "Add a --verbose flag"):
        messages = [{"role": "user", "content": "%s (%s)" % (task, key[-8:])}]
        for turn in range(10):
            log = "".join("[%05d] compiling module_%d ... ok\n" % (i, i) for i in range(3000)) + "error[E0308]: mismatched types in turn %d\n" % turn
            messages.append({"role": "assistant", "content": None, "tool_calls": [{"id": "c%d" % turn, "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"make\"}"}}]})
            messages.append({"role": "tool", "tool_call_id": "c%d" % turn, "content": log})
            post(key, {"model": "gpt-5", "messages": messages})
PY
PROXY="$proxy" KEY_A="sk-dashboard-A-SECRET" KEY_B="sk-dashboard-B-SECRET" SHOT="$shot" \
  NODE_PATH="$pw/node_modules" node "$here/test.mjs"
