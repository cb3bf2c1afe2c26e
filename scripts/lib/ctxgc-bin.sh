# The `ctxgc` binaries the scripts run (sourced, not run); each function prints a path.

# release_ctxgc: the release build. CTXGC_RELEASE_BIN, when set, names one already built: CI sets
# the binary the wheel carries (scripts/release/wheel.sh builds it once with the dist profile,
# release's code without debug information), so that CI does not build the whole workspace a
# second time in release. Otherwise target/release/ctxgc is built (or brought up to date) here.
release_ctxgc() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  if [ -n "${CTXGC_RELEASE_BIN:-}" ]; then
    if [ ! -x "$CTXGC_RELEASE_BIN" ]; then
      echo "CTXGC_RELEASE_BIN=$CTXGC_RELEASE_BIN is not an executable file" >&2
      return 1
    fi
    echo "$CTXGC_RELEASE_BIN"
    return 0
  fi
  (cd "$root" && cargo build --release -q -p ctxgc-cli --bin ctxgc) || return 1
  echo "$root/target/release/ctxgc"
}

# debug_ctxgc: the dev build, target/debug/ctxgc. Built with the workspace's examples, so the
# dependencies' features are those `cargo test --workspace` built with (dev-dependencies'
# included) and CI reuses its build; `-p ctxgc-cli --bin ctxgc` alone resolves other features and
# rebuilds the proxy's dependencies.
debug_ctxgc() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  (cd "$root" && cargo build -q --workspace --bin ctxgc --examples) || return 1
  echo "$root/target/debug/ctxgc"
}
