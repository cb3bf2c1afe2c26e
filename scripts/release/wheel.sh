#!/usr/bin/env bash
# The Python wheel a user installs without Rust: the bindings (abi3, one wheel for every CPython
# 3.10+) and the `ctxgc` command in the wheel's scripts, which pip puts on the virtualenv's PATH
# (as ruff's wheel carries `ruff`). Linux wheels are linked against glibc 2.28 by zig:
# manylinux_2_28.
#
#   scripts/release/wheel.sh OUT_DIR [ARCH]
#
# ARCH: x86_64 (the default) or aarch64, built here for Linux; `native`, or a Rust target triple,
# builds without zig for the machine it runs on (the release workflow's macOS and Windows
# runners). Prints the wheel's path.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
out=${1:?usage: wheel.sh OUT_DIR [ARCH]}
arch=${2:-x86_64}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tools=$(release_tools)
case $arch in
  x86_64 | aarch64)
    binary=$(build_binary "$arch")
    # Its own target folder: maturin's zig wrappers are not cargo-zigbuild's, and the C code's
    # build scripts (SQLite, zstd, ring) rebuild whenever the compiler's path changes, so one
    # shared folder would rebuild everything on every alternation.
    maturin_target=(--zig --target "$(rust_triple "$arch")" --compatibility "manylinux_${glibc/./_}"
      --target-dir "$root/target/wheel-build")
    ;;
  native)
    (cd "$root" && cargo build -q --locked --profile dist -p ctxgc-cli)
    binary=$root/target/dist/ctxgc
    maturin_target=()
    ;;
  *-*-*)
    # A Rust target the machine builds for without zig (x86_64-apple-darwin on an arm64 Mac).
    (cd "$root" && cargo build -q --locked --profile dist -p ctxgc-cli --target "$arch")
    binary=$root/target/$arch/dist/ctxgc
    maturin_target=(--target "$arch")
    ;;
  *) echo "wheel.sh: ARCH is x86_64, aarch64, native or a Rust target triple, not $arch" >&2; exit 2 ;;
esac
[ -f "$binary.exe" ] && binary=$binary.exe

# maturin takes the files a wheel installs into bin/ from `[tool.maturin] data`, a folder that
# must exist whenever it is named. A source build (`pip install ./bindings/python`) has no
# binary to carry, so the project's own pyproject.toml names none; the release build runs
# maturin on a copy that does, pointing back at the real crate. The copy lives outside the
# repository: maturin leaves out files git ignores, and target/ is.
stage=$(mktemp -d -t ctxgc-wheel.XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/data/scripts" "$stage/wheels"
cp "$binary" "$stage/data/scripts/"
python=$root/bindings/python
cp "$python/README.md" "$stage/"
# maturin looks for the package's Python files under the folder pyproject.toml is in, and does
# not follow a symbolic link there: a copy, without caches.
cp -r "$python/python" "$stage/python"
find "$stage/python" -name __pycache__ -prune -exec rm -rf {} +
sed -e "s|^manifest-path = .*|manifest-path = \"$python/Cargo.toml\"|" \
  -e 's|^\[tool.maturin\]$|[tool.maturin]\ndata = "data"|' \
  "$python/pyproject.toml" > "$stage/pyproject.toml"
grep -q '^data = "data"' "$stage/pyproject.toml" || { echo "wheel.sh: pyproject.toml has no [tool.maturin] table" >&2; exit 1; }

(cd "$stage" && PATH=$tools:$PATH maturin build -q --locked --profile dist "${maturin_target[@]}" \
  -o "$stage/wheels" >&2)
built=$(ls "$stage"/wheels/ctxgc-*.whl)
# The wheel must carry the command and the Python package: a build that lost either would still
# install, without `ctxgc` or without `import ctxgc`.
"$tools/python" - "$built" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
if not any(n.endswith((".data/scripts/ctxgc", ".data/scripts/ctxgc.exe")) for n in names):
    sys.exit(f"wheel.sh: {sys.argv[1]} carries no ctxgc command")
if "ctxgc/__init__.py" not in names:
    sys.exit(f"wheel.sh: {sys.argv[1]} carries no Python package")
PY
rm -f "$out/$(basename "$built")"
mv "$built" "$out/"
echo "$out/$(basename "$built")"
