#!/usr/bin/env bash
# Regenerates docs/frontier.svg, the cost-recall chart the README shows: the replay's own HTML
# report on the GPT-5-mini sessions at 32K (OpenAI's cache), its frontier chart cut out as a
# standalone SVG. Needs ../shared beside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
report=$(mktemp --suffix=.html)
trap 'rm -f "$report"' EXIT
cargo run --release -q -p ctxgc-cli -- replay ../shared/data/transcripts/mini-swe-agent-gpt5mini \
    --cache openai --window 32k --html "$report" >/dev/null
python3 - "$report" docs/frontier.svg <<'PY'
import sys
html = open(sys.argv[1], encoding="utf-8").read()
start = html.index('<svg viewBox="0 0 560 320"')
end = html.index("</svg>", start) + len("</svg>")
svg = html[start:end].replace(
    "<svg ",
    '<svg xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif" ',
    1,
)
# A white ground, so the chart reads on dark pages too.
head_end = svg.index(">") + 1
svg = svg[:head_end] + '<rect width="560" height="320" fill="#ffffff"/>' + svg[head_end:]
open(sys.argv[2], "w", encoding="utf-8").write(svg + "\n")
PY
echo "wrote docs/frontier.svg"
