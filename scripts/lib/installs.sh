# Pinned tools the scripts install once into the cache and reuse (sourced, not run).
# cache: CTXGC_CACHE, default ~/.cache/ctxgc.
cache="${CTXGC_CACHE:-$HOME/.cache/ctxgc}"
# npm_bin DIR PACKAGE@VERSION BIN: the path of BIN, PACKAGE@VERSION installed in $cache/npm-DIR
# the first time (quietly). Fails, saying so, when the install does not give BIN (a command
# substitution does not stop on errors by itself, so each step's failure is returned).
npm_bin() {
  local prefix="$cache/npm-$1"
  if ! [ -x "$prefix/node_modules/.bin/$3" ]; then
    mkdir -p "$prefix" || return 1
    (cd "$prefix" && npm install --silent --no-audit --no-fund "$2" >/dev/null) || {
      echo "npm could not install $2 into $prefix" >&2
      return 1
    }
  fi
  echo "$prefix/node_modules/.bin/$3"
}
