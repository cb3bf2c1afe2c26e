#!/usr/bin/env bash
# Conformance of real clients through `ctxgc serve`: the official openai (3.57.0), anthropic
# (2.13.0) and google-genai (3.3.0) Python SDKs on all four APIs, streamed and not, Codex CLI
# 0.169.0, Claude Code 2.1.328, Gemini CLI 0.61.0, mini-swe-agent 2.4.6 (on litellm) and Hermes
# 0.19.0 (its one-shot command line), each driven through a whole tool-using session (large
# outputs, an error line in the middle of a long log, a parallel call, the model's trims and
# recalls, events) against a scripted upstream that enforces the APIs' rules with their real 400
# texts (upstream.py).
# Every client runs through the proxy with its defaults and with
# `--compact --inject-tools --window 16000`; it must finish normally with zero API errors, and
# check.py checks every request the upstream received. A third configuration, `--observe`, puts a
# recording relay (relay.py) in front of the proxy and checks that every request reached the
# upstream byte for byte as the client sent it, while the proxy says what it would have saved.
# Hermes also runs a fourth way, `plugin`: straight to the upstream with ctxgc's Hermes plugin
# and context engine (the wheel, built by bindings/python/ci.sh --wheel-only, in Hermes's own
# virtualenv), as docs/python.md sets it up.
#
#   scripts/conformance/run.sh [CLIENT...]
#   (default: all: sdk codex claude-code mini-swe-agent gemini-sdk gemini-cli hermes)
#
# Installs are cached under CTXGC_CACHE (default ~/.cache/ctxgc) and reused. Loopback only.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=../lib/installs.sh
source "$here/../lib/installs.sh"
out="$root/target/conformance"
clients=("$@")
[ ${#clients[@]} -gt 0 ] || clients=(sdk codex claude-code mini-swe-agent gemini-sdk gemini-cli hermes)
rm -rf "$out" && mkdir -p "$out"

sdk="$cache/py-sdks-openai3.57.0-anthropic2.13.0"
if ! [ -d "$sdk/openai" ] || ! [ -d "$sdk/anthropic" ]; then
  python3 -m pip install -q --disable-pip-version-check --target "$sdk" openai==3.57.0 anthropic==2.13.0 2>&1 | grep -v 'as the .root. user' || true
fi
codex="$(npm_bin codex-0.169.0 @openai/codex@0.169.0 codex)"
mini="$cache/py-mini-swe-agent-2.4.6"
if ! [ -d "$mini/minisweagent" ]; then
  python3 -m pip install -q --disable-pip-version-check --target "$mini" mini-swe-agent==2.4.6 2>&1 | grep -v 'as the .root. user\|incompatible\|dependency resolver' || true
fi
genai="$cache/py-google-genai-3.3.0"
if ! [ -d "$genai/google/genai" ]; then
  python3 -m pip install -q --disable-pip-version-check --target "$genai" google-genai==3.3.0 2>&1 | grep -v 'as the .root. user\|incompatible\|dependency resolver' || true
fi
gemini="$(npm_bin gemini-cli-0.61.0 @google/gemini-cli@0.61.0 gemini)"
claude="$(npm_bin claude-code-2.1.328 @anthropic-ai/claude-code@2.1.328 claude)"
hermes="$cache/py-hermes-agent-0.19.0-conformance"
if [[ " ${clients[*]} " == *" hermes "* ]]; then
  if ! [ -f "$hermes/.complete" ]; then
    rm -rf "$hermes" && python3 -m venv "$hermes"
    "$hermes/bin/pip" install -q --disable-pip-version-check hermes-agent==0.19.0
    touch "$hermes/.complete"
  fi
  # The plugin as a user installs it: the wheel of this checkout (maturin; quick when
  # bindings/python/ci.sh just built it) into Hermes's own environment.
  bash "$root/bindings/python/ci.sh" --wheel-only
  wheel=$(ls "$root"/target/wheels/ctxgc-*.whl | head -1)
  "$hermes/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
fi
# shellcheck source=../lib/ctxgc-bin.sh
source "$root/scripts/lib/ctxgc-bin.sh"
ctxgc=$(debug_ctxgc)

# shellcheck source=../lib/ports.sh
source "$root/scripts/lib/ports.sh"

# Sessions run CONFORMANCE_JOBS at a time (default 1: the whole suite takes about 170 s; each
# session is a client, a proxy and a scripted upstream on ports of its own, which two sessions
# at once could rarely both pick). Each writes its verdict to its folder; the run fails if one
# is not ok or a session gave none.
jobs_max=${CONFORMANCE_JOBS:-1}
# run NAME CONFIG COMMAND...: one client session through a fresh proxy and upstream, in the
# background once a job slot is free.
started=0
run() {
  # CONFORMANCE_CONFIGS (a regex, e.g. `mcp|plugin-hooks`): only the configurations it matches.
  [[ -z "${CONFORMANCE_CONFIGS:-}" || "$2" =~ ^(${CONFORMANCE_CONFIGS})$ ]] || return 0
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  started=$((started + 1))
  run_one "$@" &
}
run_one() {
  local name=$1 config=$2; shift 2
  local dir="$out/$name-$config"; mkdir -p "$dir/work"
  local up_port px_port rl_port; up_port=$(port); px_port=$(port); rl_port=$(port)
  python3 "$here/upstream.py" "$up_port" "$dir/upstream.jsonl" & local up=$!
  local flags=(); [ "$config" = agent ] && flags=(--compact --inject-tools --window 16000)
  [ "$config" = observe ] && flags=(--observe)
  # `mcp`: the proxy's defaults on a SQLite store, which the client's `ctxgc mcp` reads.
  local store=(--store memory)
  [ "$config" = mcp ] && store=(--store "sqlite:$dir/originals.sqlite")
  # Codex CLI cuts every output to about 10,000 characters, under what the proxy trims at its
  # defaults: nothing of it is hidden there, so its recall runs at the agent run's window.
  [ "$config" = mcp ] && [ "$name" = codex-cli ] && flags=(--window 16000)
  printf '[proxy]\nadmin_token = "conformance-admin-token"\n' >"$dir/ctxgc.toml"
  # The cache-lifetime decisions forced to the hour: every breakpoint gets it; keep-alives on
  # for every caller (the client's requests must run as clean with the sessions held for them).
  [ "$config" = cache1h ] && printf '[cache]\nttl = "1h"\nkeepalive = true\nkeepalive_every_caller = true\n' >>"$dir/ctxgc.toml"
  "$ctxgc" serve --config "$dir/ctxgc.toml" --listen "127.0.0.1:$px_port" --openai-upstream "http://127.0.0.1:$up_port" \
    --anthropic-upstream "http://127.0.0.1:$up_port" --gemini-upstream "http://127.0.0.1:$up_port" "${store[@]}" "${flags[@]}" 2>"$dir/serve.log" & local px=$!
  local client_url="http://127.0.0.1:$px_port" rl=""
  # The plugin ways have no proxy: the client talks to the upstream itself.
  case "$config" in plugin|plugin-hooks) client_url="http://127.0.0.1:$up_port" ;; esac
  if [ "$config" = observe ]; then
    # What the client sends is recorded in front of the proxy, to hold the upstream's against.
    python3 "$here/relay.py" "$rl_port" "$client_url" "$dir/client.jsonl" & rl=$!
    client_url="http://127.0.0.1:$rl_port"; touch "$dir/client.jsonl"
    wait_port "$rl_port"
  fi
  wait_port "$up_port" && wait_port "$px_port"
  touch "$dir/upstream.jsonl"
  local status=0
  PROXY="$client_url" DIR="$dir" CONFIG="$config" timeout 300 bash -c '"$@"' client "$@" >"$dir/client.log" 2>&1 || status=$?
  # Observe mode works beside the requests: give it a moment to finish.
  [ "$config" = observe ] && sleep 1
  curl -s -H "x-ctxgc-admin-token: conformance-admin-token" "http://127.0.0.1:$px_port/ctxgc/stats" >"$dir/stats.json"
  kill "$up" "$px" $rl 2>/dev/null || true; wait "$up" "$px" $rl 2>/dev/null || true
  local verdict
  if [ $status -ne 0 ]; then
    verdict="FAIL: the client exited $status; its last lines: $(tail -5 "$dir/client.log" | tr '\n' ' ')"
  else
    # Clients that cut a long output themselves (its middle, where the log's error line is)
    # before sending it: what they never sent cannot reach the model.
    local cuts=0
    case "$name" in codex-cli|mini-swe-agent) cuts=1 ;; esac
    verdict=$(CLIENT_CUTS_OUTPUTS=$cuts python3 "$here/check.py" "$dir/upstream.jsonl" "$dir/stats.json" "$config" "$dir/client.jsonl" 2>&1) || true
  fi
  printf '%-26s %-8s %s\n' "$name" "$config" "$verdict" | tee "$dir/verdict"
}

mini_client() {
  (cd "$DIR/work" && HOME="$DIR/home" PYTHONPATH="$mini" LITELLM_LOCAL_MODEL_COST_MAP=True MSWEA_COST_TRACKING=ignore_errors \
    python3 "$here/mini_agent.py" "$PROXY")
}
sdk_client() { PYTHONPATH="$sdk" python3 "$here/sdk_agent.py" "$1" "$PROXY"; }
gemini_sdk_client() { PYTHONPATH="$genai" python3 "$here/sdk_agent.py" "$1" "$PROXY"; }
gemini_cli_client() {
  mkdir -p "$DIR/home/.gemini"
  cat > "$DIR/home/.gemini/settings.json" <<JSON
{"privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false},
 "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
 "security": {"auth": {"selectedType": "gemini-api-key"}}}
JSON
  case "$CONFIG" in mcp|plugin-hooks)
    # ctxgc's MCP server as Gemini CLI's settings register one (plugins/gemini/settings.json);
    # `plugin-hooks`: its BeforeTool hook too. Both on this run's store.
    python3 - "$DIR/home/.gemini/settings.json" "$root/plugins/gemini/settings.json" "$ctxgc" "$DIR/originals.sqlite" "$CONFIG" <<'PY'
import json, sys
path, plugin, ctxgc, store, config = sys.argv[1:]
settings, ours = json.load(open(path)), json.load(open(plugin))
settings["mcpServers"] = ours["mcpServers"]
settings["mcpServers"]["ctxgc"].update(command=ctxgc, args=["mcp", "--store", "sqlite:" + store], trust=True)
if config == "plugin-hooks":
    settings["hooks"] = ours["hooks"]
    for group in settings["hooks"]["BeforeTool"]:
        for hook in group["hooks"]:
            hook["command"] = hook["command"].replace("ctxgc", ctxgc, 1) + " --store sqlite:" + store
json.dump(settings, open(path, "w"))
PY
  ;; esac
  (cd "$DIR/work" && HOME="$DIR/home" GEMINI_API_KEY=conformance-gemini-cli-key GOOGLE_GEMINI_BASE_URL="$PROXY" \
    GOOGLE_GENAI_API_VERSION=v1beta GEMINI_CLI_NO_RELAUNCH=true GEMINI_CLI_TRUST_WORKSPACE=true NO_BROWSER=true \
    "$gemini" -p "Conformance run: run the scripted checks" --yolo -m gemini-2.5-pro) \
    && grep -q "Done" "$DIR/client.log"
}
codex_client() {
  mkdir -p "$DIR/home"
  cat > "$DIR/home/config.toml" <<TOML
model = "gpt-5.1-codex"
model_provider = "scripted"
model_auto_compact_token_limit = 10000000
[model_providers.scripted]
name = "scripted"
base_url = "$PROXY/v1"
wire_api = "responses"
supports_websockets = false
TOML
  # ctxgc's MCP server as `codex mcp add ctxgc -- ctxgc mcp` registers it.
  case "$CONFIG" in mcp|plugin-hooks)
    CODEX_HOME="$DIR/home" "$codex" mcp add ctxgc -- "$ctxgc" mcp --store "sqlite:$DIR/originals.sqlite" ;; esac
  local extra=()
  if [ "$CONFIG" = plugin-hooks ]; then
    # No proxy: plugins/codex/hooks.json, its commands on this run's store.
    sed "s|\"ctxgc hook codex |\"$ctxgc hook codex --store sqlite:$DIR/originals.sqlite |" \
      "$root/plugins/codex/hooks.json" >"$DIR/home/hooks.json"
    printf '[features]\nhooks = true\n' >>"$DIR/home/config.toml"
    extra=(--dangerously-bypass-hook-trust)
  fi
  (cd "$DIR/work" && CODEX_HOME="$DIR/home" OPENAI_API_KEY=sk-conformance-codex \
    "$codex" exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "${extra[@]}" "Conformance run: run the scripted checks") \
    && grep -q "Done" "$DIR/client.log"
}
claude_client() {
  mkdir -p "$DIR/home"
  # `mcp`: ctxgc's MCP server as `claude mcp add ctxgc -- ctxgc mcp` registers it.
  # `plugin-hooks`: no proxy; the plugin of this checkout (its hooks and its MCP server), with
  # `ctxgc` on the PATH and the store under the session's HOME.
  [ "$CONFIG" = mcp ] && (cd "$DIR/work" && HOME="$DIR/home" CLAUDE_CONFIG_DIR="$DIR/home/.claude" \
    "$claude" mcp add ctxgc -- "$ctxgc" mcp --store "sqlite:$DIR/originals.sqlite")
  # The plugin installed as a user installs it from this checkout's marketplace (plugins/).
  [ "$CONFIG" = plugin-hooks ] && (cd "$DIR/work" && HOME="$DIR/home" CLAUDE_CONFIG_DIR="$DIR/home/.claude" \
    "$claude" plugin install ctxgc --marketplace "$root/plugins" -y)
  (cd "$DIR/work" && HOME="$DIR/home" CLAUDE_CONFIG_DIR="$DIR/home/.claude" ANTHROPIC_BASE_URL="$PROXY" \
    ANTHROPIC_API_KEY=sk-ant-conformance DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 IS_SANDBOX=1 PATH="$(dirname "$ctxgc"):$PATH" \
    "$claude" -p "Conformance run: run the scripted checks" --dangerously-skip-permissions --output-format text) \
    && grep -q "Done" "$DIR/client.log"
}
# hermes_client proxy|plugin: `hermes -z` (one-shot), its default toolsets, a custom
# OpenAI-compatible endpoint. Both ways raise Hermes's capture cap as docs/python.md says (the
# default cuts a command's output to 50,000 characters before ctxgc sees it); the plugin way
# turns on the plugin and the context engine, with a window small enough for an event.
hermes_client() {
  mkdir -p "$DIR/home"
  local base="$PROXY/v1" window=128000 extra=""
  if [ "$1" = plugin ]; then
    # Hermes's smallest window, and an event at 60% of it (the scripted session is short).
    window=64000
    extra=$'plugins:\n  enabled: [ctxgc]\ncontext:\n  engine: ctxgc\n'
    printf '[engine]\ntrigger_share = 0.6\n' >"$DIR/plugin.toml"
  fi
  cat > "$DIR/home/config.yaml" <<YAML
model:
  provider: custom
  base_url: $base
  default: scripted-model
  api_key: sk-hermes-conformance
  context_length: $window
tool_output:
  max_bytes: 2000000
${extra}
YAML
  local config=""; [ "$1" = plugin ] && config="$DIR/plugin.toml"
  (cd "$DIR/work" && HOME="$DIR/home" HERMES_HOME="$DIR/home" CTXGC_STORE="$DIR/originals.sqlite" CTXGC_CONFIG="$config" \
    "$hermes/bin/hermes" -z "Conformance run: run the scripted checks") \
    && grep -q "Done" "$DIR/client.log"
}

export -f sdk_client codex_client claude_client mini_client gemini_sdk_client gemini_cli_client hermes_client
export sdk codex claude mini genai gemini hermes here ctxgc root

for client in "${clients[@]}"; do
  for config in defaults agent observe; do
    case "$client" in
      sdk) for mode in chat chat-stream responses responses-stream messages messages-stream; do
             run "sdk-$mode" "$config" sdk_client "$mode"
           done ;;
      codex) run codex-cli "$config" codex_client ;;
      claude-code) run claude-code "$config" claude_client ;;
      mini-swe-agent) run mini-swe-agent "$config" mini_client ;;
      gemini-sdk) for mode in gemini gemini-stream; do
                    run "sdk-$mode" "$config" gemini_sdk_client "$mode"
                  done ;;
      gemini-cli) run gemini-cli "$config" gemini_cli_client ;;
      hermes) run hermes "$config" hermes_client proxy ;;
      *) echo "unknown client $client (sdk, codex, claude-code, mini-swe-agent, gemini-sdk, gemini-cli, hermes)" >&2; exit 2 ;;
    esac
  done
  [ "$client" = hermes ] && run hermes plugin hermes_client plugin
  # ctxgc's MCP server registered in the agent, beside the proxy's defaults.
  case "$client" in codex) run codex-cli mcp codex_client ;; claude-code) run claude-code mcp claude_client ;;
    gemini-cli) run gemini-cli mcp gemini_cli_client ;; esac
  # The hooks, without a proxy (plugins/: Claude Code's plugin, Codex's hooks.json, Gemini
  # CLI's settings): they trim, the MCP server recalls.
  [ "$client" = claude-code ] && run claude-code plugin-hooks claude_client
  [ "$client" = codex ] && run codex-cli plugin-hooks codex_client
  [ "$client" = gemini-cli ] && run gemini-cli plugin-hooks gemini_cli_client
  # Breakpoints at an hour, on clients that place them (Claude Code's own, the SDK's request).
  [ "$client" = claude-code ] && run claude-code cache1h claude_client
  [ "$client" = sdk ] && run sdk-messages cache1h sdk_client messages
  # GPT-5.6: no retention (the model refuses it), a breakpoint at the end of the stable prefix.
  if [ "$client" = sdk ]; then
    export CONFORMANCE_OPENAI_MODEL=gpt-5.6-terra
    for mode in chat responses-stream; do run "sdk-$mode-gpt-5.6" defaults sdk_client "$mode"; done
    unset CONFORMANCE_OPENAI_MODEL
  fi
done
wait
failed=0
verdicts=$(find "$out" -mindepth 2 -maxdepth 2 -name verdict | wc -l)
if [ "$verdicts" -ne "$started" ]; then
  echo "FAIL: $started client sessions started, $verdicts gave a verdict" >&2
  failed=1
fi
for verdict in "$out"/*/verdict; do
  grep -q '^[^ ]* *[^ ]* *ok:' "$verdict" || failed=1
done
exit $failed
