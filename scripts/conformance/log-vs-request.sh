#!/usr/bin/env bash
# What each real client's own log holds of what it sent (issue "Every user's bill": the lab
# replays the logs, so what a log leaves out is what the lab must model or size from the bill).
# Each client runs one session against the scripted upstream (upstream.py records every request
# body), in a project with a slash command that `@`-references a file and a memory file
# (CLAUDE.md / AGENTS.md); `ctxgc import` reads the client's log, and log_vs_request.py compares
# the last request's messages with it, line by line.
#
#   scripts/conformance/log-vs-request.sh [claude-code] [codex]
#
# Uses the clients scripts/conformance/run.sh installs (under CTXGC_CACHE). Fails when an
# imported log lacks more than 1% of what its client sent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${CTXGC_CACHE:-$HOME/.cache/ctxgc}"
out="$root/target/log-vs-request"
clients=("$@")
[ ${#clients[@]} -gt 0 ] || clients=(claude-code codex)
claude="$cache/npm-claude-code-2.1.328/node_modules/.bin/claude"
codex="$cache/npm-codex-0.169.0/node_modules/.bin/codex"
for c in "${clients[@]}"; do
  bin=$claude; [ "$c" = codex ] && bin=$codex
  [ -x "$bin" ] || { echo "log-vs-request: $c is not installed (run scripts/conformance/run.sh $c first)" >&2; exit 1; }
done
# shellcheck source=../lib/ctxgc-bin.sh
source "$root/scripts/lib/ctxgc-bin.sh"
ctxgc=$(debug_ctxgc)
# shellcheck source=../lib/ports.sh
source "$root/scripts/lib/ports.sh"

status=0
for client in "${clients[@]}"; do
  dir="$out/$client"
  rm -rf "$dir" && mkdir -p "$dir/work/notes" "$dir/work/.claude/commands" "$dir/home"
  python3 - "$dir/work" <<'PY'
import sys
work = sys.argv[1]
open(f"{work}/notes/context.md", "w").write("".join(f"context line {i}: the plan keeps the parser and the lexer apart\n" for i in range(400)))
command = "<objective>\nPlan the work.\n</objective>\n\n<execution_context>\n@notes/context.md\n</execution_context>\n\nRun the scripted checks.\n"
open(f"{work}/.claude/commands/plan.md", "w").write(command)
memory = "".join(f"memory rule {i}: keep commits small\n" for i in range(100))
open(f"{work}/CLAUDE.md", "w").write(memory)
open(f"{work}/AGENTS.md", "w").write(memory)
PY
  up_port=$(port)
  python3 "$here/upstream.py" "$up_port" "$dir/upstream.jsonl" & up=$!
  wait_port "$up_port"
  case "$client" in
    claude-code)
      (cd "$dir/work" && HOME="$dir/home" CLAUDE_CONFIG_DIR="$dir/home/.claude" ANTHROPIC_BASE_URL="http://127.0.0.1:$up_port" \
        ANTHROPIC_API_KEY=sk-ant-log-vs-request DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 IS_SANDBOX=1 \
        timeout 300 "$claude" -p "/plan" --dangerously-skip-permissions --output-format text) >"$dir/client.log" 2>&1 || true
      logs="$dir/home/.claude/projects" ;;
    codex)
      cat > "$dir/home/config.toml" <<TOML
model = "gpt-5.1-codex"
model_provider = "scripted"
model_auto_compact_token_limit = 10000000
[model_providers.scripted]
name = "scripted"
base_url = "http://127.0.0.1:$up_port/v1"
wire_api = "responses"
supports_websockets = false
TOML
      (cd "$dir/work" && CODEX_HOME="$dir/home" OPENAI_API_KEY=sk-log-vs-request \
        timeout 300 "$codex" exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "Run the scripted checks; the plan is in @notes/context.md") >"$dir/client.log" 2>&1 || true
      logs="$dir/home/sessions" ;;
    *) echo "unknown client $client (claude-code, codex)" >&2; exit 2 ;;
  esac
  kill "$up" 2>/dev/null || true; wait "$up" 2>/dev/null || true
  grep -q "Done" "$dir/client.log" || { echo "$client: the session did not finish: $(tail -3 "$dir/client.log")" >&2; status=1; continue; }
  # The session's log itself (Claude Code keeps large outputs in files beside it).
  log=$(find "$logs" -name '*.jsonl' -not -path '*/tool-results/*' -not -path '*/subagents/*' | head -1)
  "$ctxgc" import "$log" --out "$dir/imported" >/dev/null
  imported=$(ls "$dir/imported"/*.jsonl | head -1)
  printf '%s: ' "$client"
  python3 "$here/log_vs_request.py" "$dir/upstream.jsonl" "$imported" 1 || status=1
done
exit $status
