# Pinned tools the scripts install once into the cache and reuse (sourced, not run).
# cache: CTXGC_CACHE, default ~/.cache/ctxgc.
cache="${CTXGC_CACHE:-$HOME/.cache/ctxgc}"
# npm_bin DIR PACKAGE@VERSION BIN: the path of BIN, PACKAGE@VERSION installed in $cache/npm-DIR
# the first time (quietly).
npm_bin() {
  local prefix="$cache/npm-$1"
  if ! [ -x "$prefix/node_modules/.bin/$3" ]; then
    mkdir -p "$prefix"
    (cd "$prefix" && npm install --silent --no-audit --no-fund "$2" >/dev/null)
  fi
  echo "$prefix/node_modules/.bin/$3"
}
