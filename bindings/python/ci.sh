#!/usr/bin/env bash
# Builds the ctxgc wheel with maturin and runs the Python tests: the bindings (byte-equal to
# `ctxgc trim` on every shared tool output, recall in memory/SQLite/Redis, sessions), then each
# integration in its own virtualenv with its framework pinned from PyPI. Virtualenvs are cached
# under ~/.cache/ctxgc and reused. Needs ../shared.
#
#   bindings/python/ci.sh [--wheel-only]   (--wheel-only: build target/wheels/ctxgc-*.whl and stop)
#
# The wheel's build tools (maturin, zig, cargo-zigbuild) come from scripts/release/lib.sh.
set -euo pipefail
cd "$(dirname "$0")"
wheel_only=0; [ "${1:-}" = --wheel-only ] && wheel_only=1
root=$(cd ../.. && pwd)
cache=${CTXGC_CACHE:-$HOME/.cache/ctxgc}
mkdir -p "$cache"

# name | what pip installs (pinned: the versions the integrations are tested against)
venvs=(
  "tools|ruff==0.14.0 pytest==9.0.1"
  "hermes|hermes-agent==0.19.0 pytest==9.0.1"
  "langchain|langchain==1.5.2 pytest==9.0.1"
  "agents|openai-agents==0.24.0 pytest==9.0.1"
  "miniswe|mini-swe-agent==2.4.6 pytest==9.0.1"
  "litellm|litellm==1.110.2 pytest==9.0.1"
)
venv_dir() { echo "$cache/py-$1-$(echo "$2" | sha1sum | cut -c1-8)"; }
for entry in "${venvs[@]}"; do
  name=${entry%%|*}; pins=${entry#*|}; dir=$(venv_dir "$name" "$pins")
  [ $wheel_only = 1 ] && [ "$name" != tools ] && continue
  if [ ! -x "$dir/bin/python" ] || [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    python3 -m venv "$dir"
    # shellcheck disable=SC2086
    "$dir/bin/pip" install -q $pins
    touch "$dir/.complete"
  fi
done
tools=$(venv_dir tools "${venvs[0]#*|}")

# The wheel users install (scripts/release/wheel.sh: manylinux_2_28 by zig, the `ctxgc` command
# inside), so the suites below test what ships.
wheels=$root/target/wheels
rm -rf "$wheels"
wheel=$(bash "$root/scripts/release/wheel.sh" "$wheels")
[ $wheel_only = 1 ] && exit 0

# The `ctxgc` command the wheel carries (the dist build of scripts/release/wheel.sh) imports the
# shared sets the suites read: no second, release-profile build of the workspace.
"$tools/bin/pip" install -q --force-reinstall --no-deps "$wheel"
binary=$tools/bin/ctxgc

"$tools/bin/ruff" check python tests bench.py
"$tools/bin/ruff" format --check python tests bench.py

canonical=$root/target/python-canonical
rm -rf "$canonical"
"$binary" import --out "$canonical" \
  "$root/../shared/data/transcripts" "$root/../shared/data/client-logs" > /dev/null
export CTXGC_BIN=$binary CTXGC_CANONICAL=$canonical CTXGC_CONFIG=

run() { # venv-name test-file
  local entry dir
  for entry in "${venvs[@]}"; do
    if [ "${entry%%|*}" = "$1" ]; then dir=$(venv_dir "$1" "${entry#*|}"); fi
  done
  "$dir/bin/pip" install -q --force-reinstall --no-deps "$wheel"
  "$dir/bin/python" -c "import ctxgc"
  # The `ctxgc` command the wheel installed is the one the library is held against.
  CTXGC_BIN=$dir/bin/ctxgc "$dir/bin/python" -m pytest -q -p no:cacheprovider "$2"
}
run tools tests/test_bindings.py
run hermes tests/test_hermes.py
run langchain tests/test_langchain.py
run agents tests/test_openai_agents.py
run miniswe tests/test_minisweagent.py
run litellm tests/test_litellm.py
