#!/usr/bin/env bash
# Installs headroom-ai 0.42.0 into a virtualenv (offline-capable) and prints the replay policy
# that runs it:  ctxgc replay --sample --policy "ctxgc,$(scripts/headroom/setup.sh)"
# First run: about 1.5 minutes and 430 MB. Set CTXGC_HEADROOM_VENV to choose where.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${CTXGC_HEADROOM_VENV:-$here/../../target/headroom-venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import headroom" 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q "headroom-ai==0.42.0" >&2
fi
venv="$(cd "$venv" && pwd)"
# litellm (a headroom dependency) ships the tiktoken BPE files: no download at run time.
tokenizers=$(ls -d "$venv"/lib/python3*/site-packages/litellm/litellm_core_utils/tokenizers | head -1)
echo "exec:HF_HUB_OFFLINE=1 HEADROOM_OFFLINE=1 TIKTOKEN_CACHE_DIR=$tokenizers $venv/bin/python -u $here/compress.py"
