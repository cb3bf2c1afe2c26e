#!/usr/bin/env bash
# Checks the release artifacts as a new user meets them, with no Rust on PATH:
#   wheel  a fresh virtualenv for each CPython 3.9+ the machine has: `pip install` the wheel,
#          `import ctxgc`, `ctxgc --version`, ctxgc.trim and the `ctxgc trim` the wheel installed
#          give the same bytes; `auditwheel show` names manylinux_2_28 or older.
#   npm    an empty folder: `npm install` of the packed tarballs (offline: nothing but them),
#          `npx ctxgc --version`, `npx ctxgc serve` answering /ctxgc/healthz and stopping on
#          SIGTERM.
#   image  `podman load`, then `podman run` with the image's own command: /ctxgc/healthz and
#          its health check answer, it runs as a non-root user, it holds no compiler; and one
#          request proxied to a scripted upstream on loopback, its large tool output trimmed.
#
#   scripts/release/check.sh DIST_DIR [wheel] [npm] [image]     (default: each one DIST_DIR holds)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$root/scripts/lib/ports.sh"
dist=$(cd "${1:?usage: check.sh DIST_DIR [wheel] [npm] [image]}" && pwd)
shift
ver=$(version)
work=$(mktemp -d)
pids=()
containers=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for c in "${containers[@]}"; do podman rm -f -v "$c" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "check: $*" >&2; exit 1; }
# A PATH with the system's tools and none of Rust's: what a user without Rust has.
bare_path=/usr/local/bin:/usr/bin:/bin
no_rust() { ! PATH=$1 command -v cargo >/dev/null && ! PATH=$1 command -v rustc >/dev/null || fail "cargo or rustc on $1"; }
healthz() { curl -sf -m 3 "http://127.0.0.1:$1/ctxgc/healthz" | grep -q '"ok"'; }

# interpreter python3.X: the path of that CPython, on PATH or among pyenv's versions (whose shims
# answer only for the version pyenv has selected); fails when the machine has none.
interpreter() {
  local found
  found=$("$1" -c 'import sys; print(sys.executable)' 2>/dev/null) && { echo "$found"; return; }
  for found in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"${1#python}".*/bin/"$1"; do
    [ -x "$found" ] && { echo "$found"; return; }
  done
  return 1
}

check_wheel() {
  local wheel venv tag py python checked=()
  wheel=$(ls "$dist"/ctxgc-*-manylinux_*_x86_64.whl 2>/dev/null | head -1)
  [ -n "$wheel" ] || fail "no x86_64 wheel in $dist"
  # The one abi3 wheel in every CPython this machine has, from the oldest it claims (3.9).
  for py in python3.9 python3.10 python3.11 python3.12 python3.13 python3.14; do
    python=$(interpreter "$py") || continue
    venv=$work/venv-$py
    "$python" -m venv "$venv"
    no_rust "$venv/bin:$bare_path"
    # No index: the wheel needs nothing but itself.
    PATH=$venv/bin:$bare_path pip install -q --no-index --disable-pip-version-check "$wheel"
    PATH=$venv/bin:$bare_path python -c "import ctxgc; assert ctxgc.__version__ == '$ver', ctxgc.__version__"
    PATH=$venv/bin:$bare_path ctxgc --version | grep -q "^ctxgc $ver " \
      || fail "ctxgc --version: $(PATH=$venv/bin:$bare_path ctxgc --version)"
    PATH=$venv/bin:$bare_path python "$root/scripts/release/same_bytes.py" "$root/crates/ctxgc-cli/samples" >/dev/null \
      || fail "$py: ctxgc.trim and the installed ctxgc trim differ"
    checked+=("$("$python" -c 'import platform; print(platform.python_version())')")
  done
  [ ${#checked[@]} -gt 0 ] || fail "no CPython 3.9+ on this machine"
  tag=$("$(release_tools)/auditwheel" show "$wheel" | tr -d '\n' | grep -o 'manylinux_2_[0-9]*_x86_64' | head -1)
  [ -n "$tag" ] || fail "auditwheel show names no manylinux tag for $wheel"
  [ "$(echo "$tag" | cut -d_ -f3)" -le 28 ] || fail "$wheel is $tag, newer than manylinux_2_28"
  echo "wheel: $(basename "$wheel") installs without Rust in CPython ${checked[*]}: import ctxgc, ctxgc $ver, ctxgc.trim = ctxgc trim; auditwheel: $tag"
}

check_npm() {
  local folder p pid
  [ -f "$dist/ctxgc-$ver.tgz" ] && [ -f "$dist/ctxgc-linux-x64-$ver.tgz" ] || fail "no npm tarballs for $ver in $dist"
  folder=$work/npm
  mkdir -p "$folder/home"
  no_rust "$bare_path"
  local npm_env=(env -i "HOME=$folder/home" "PATH=$bare_path" npm_config_update_notifier=false)
  (cd "$folder" && "${npm_env[@]}" npm install -q --offline --no-audit --no-fund \
    "$dist/ctxgc-$ver.tgz" "$dist/ctxgc-linux-x64-$ver.tgz" >/dev/null)
  (cd "$folder" && "${npm_env[@]}" npx --offline ctxgc --version) | grep -q "^ctxgc $ver " || fail "npx ctxgc --version"
  # `npx ctxgc serve` in a session of its own, stopped as a terminal's Ctrl-C or a service
  # manager stops it: a signal to the whole group. npm exec exits at once, killing its shell;
  # the binary must still shut down gracefully, not be orphaned.
  p=$(port)
  (cd "$folder" && exec setsid "${npm_env[@]}" npx --offline ctxgc serve --listen "127.0.0.1:$p" \
    --store memory) >"$work/npm-serve.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  wait_port "$p" || { cat "$work/npm-serve.log" >&2; fail "npx ctxgc serve did not listen"; }
  healthz "$p" || fail "npx ctxgc serve: /ctxgc/healthz"
  kill -TERM -- "-$pid"
  wait "$pid" || true
  still_listening "$p" && fail "npx ctxgc serve still listens after SIGTERM"
  # The package's own command alone, signalled alone: it passes SIGTERM to the binary and exits
  # with the binary's status (0 after a graceful shutdown).
  p=$(port)
  "${npm_env[@]}" "$folder/node_modules/.bin/ctxgc" serve --listen "127.0.0.1:$p" --store memory \
    >"$work/npm-bin.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  wait_port "$p" || { cat "$work/npm-bin.log" >&2; fail "node_modules/.bin/ctxgc serve did not listen"; }
  kill -TERM "$pid"
  local status=0
  wait "$pid" || status=$?
  [ "$status" = 0 ] || { cat "$work/npm-bin.log" >&2; fail "node_modules/.bin/ctxgc serve exited $status on SIGTERM"; }
  still_listening "$p" && fail "the binary still listens after its launcher exited"
  echo "npm: ctxgc $ver and @ctxgc/linux-x64 install without Rust; npx ctxgc serve answers /ctxgc/healthz and stops on SIGTERM"
}
# still_listening PORT: true while something still listens on PORT 5 seconds on.
still_listening() {
  for _ in $(seq 50); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 0.2)" 2>/dev/null || return 1
    sleep 0.1
  done
  return 0
}

check_image() {
  local tar=$dist/ctxgc-image.tar image=localhost/ctxgc:$ver p c user
  [ -f "$tar" ] || fail "no $tar"
  podman load -q -i "$tar" >/dev/null
  podman_ready "$image" "$work" || fail "podman cannot run the image"
  # The health check's timer needs systemd; the check runs it by hand (`podman healthcheck run`).
  local run_flags=(--health-interval disable)
  # The image's own command, published on loopback.
  p=$(port)
  c=$(podman run -d "${run_flags[@]}" -p "127.0.0.1:$p:8787" "$image" 2>>"$work/podman.log")
  containers+=("$c")
  wait_port "$p" && for _ in $(seq 50); do healthz "$p" && break; sleep 0.1; done
  healthz "$p" || { podman logs "$c" >&2; fail "the image's ctxgc serve: /ctxgc/healthz"; }
  podman healthcheck run "$c" >/dev/null 2>>"$work/podman.log" || fail "the image's health check failed"
  user=$(podman exec "$c" id -u)
  [ "$user" != 0 ] || fail "the image runs as root"
  # shellcheck disable=SC2016
  podman run --rm "${run_flags[@]}" --entrypoint /bin/bash "$image" -c \
    'for c in cc gcc g++ c++ clang rustc cargo ld as tcc; do command -v $c && exit 1; done; exit 0' \
    >/dev/null 2>>"$work/podman.log" || fail "the image holds a compiler"
  # One request through the image's proxy to a scripted upstream on the host's loopback.
  local up record=$work/upstream.jsonl
  up=$(port)
  python3 "$root/scripts/conformance/upstream.py" "$up" "$record" 2>"$work/upstream.log" &
  pids+=($!)
  wait_port "$up" || fail "the scripted upstream did not start"
  p=$(port)
  c=$(podman run -d "${run_flags[@]}" --network host "$image" \
    serve --listen "127.0.0.1:$p" --store memory --openai-upstream "http://127.0.0.1:$up" 2>>"$work/podman.log")
  containers+=("$c")
  wait_port "$p" || { podman logs "$c" >&2; fail "the image's ctxgc serve on the host network"; }
  python3 "$root/scripts/release/trimmed_request.py" "$record" "$p" | sed 's/^/image: /' \
    || { podman logs "$c" >&2; fail "the request through the image"; }
  echo "image: $image answers /ctxgc/healthz and its health check, runs as uid $user, holds no compiler"
}

wanted=("$@")
if [ ${#wanted[@]} = 0 ]; then
  ls "$dist"/ctxgc-*.whl >/dev/null 2>&1 && wanted+=(wheel)
  [ -f "$dist/ctxgc-$ver.tgz" ] && wanted+=(npm)
  [ -f "$dist/ctxgc-image.tar" ] && wanted+=(image)
fi
for what in "${wanted[@]}"; do
  case $what in
    wheel) check_wheel ;;
    npm) check_npm ;;
    image) check_image ;;
    *) fail "unknown check $what (wheel, npm, image)" ;;
  esac
done
