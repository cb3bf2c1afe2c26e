#!/usr/bin/env bash
# Every release artifact into dist/, with checksums, then checked as a new user meets them
# (scripts/release/check.sh; deploy/compose.yaml by scripts/release/compose-test.sh):
#   ctxgc-VERSION-cp39-abi3-manylinux_2_28_{x86_64,aarch64}.whl   the bindings and the command
#   ctxgc-VERSION.tgz, ctxgc-linux-{x64,arm64}-VERSION.tgz          npm packages (`npm pack`)
#   ctxgc-image.tar                                                 the proxy's image (`podman save`)
#   SHA256SUMS
#
#   scripts/release/build.sh [--only wheel,npm,image] [--arch x86_64,aarch64] [--out DIR] [--no-check]
#
# On a fresh machine it needs the Rust toolchain and, for the image, root with Debian's packages
# (mmdebstrap, buildah, podman: installed if missing); zig, maturin and cargo-zigbuild come from
# PyPI into ~/.cache/ctxgc. The aarch64 artifacts are cross-built (rustup adds the target); they
# are not run here. The image is built for this machine's architecture.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
only=wheel,npm,image
arches=$targets_known
out=$root/dist
check=1
while [ $# -gt 0 ]; do
  case $1 in
    --only) only=$2; shift 2 ;;
    --arch) arches=${2//,/ }; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-check) check=0; shift ;;
    *) echo "usage: build.sh [--only wheel,npm,image] [--arch x86_64,aarch64] [--out DIR] [--no-check]" >&2; exit 2 ;;
  esac
done
for arch in $arches; do
  case " $targets_known " in *" $arch "*) ;; *) echo "build.sh: unknown arch $arch ($targets_known)" >&2; exit 2 ;; esac
done
wants() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
ver=$(version)
started=$SECONDS
timed() { local name=$1 t=$SECONDS; shift; "$@"; echo "release: $name took $((SECONDS - t)) s" >&2; }

rm -f "$out"/ctxgc-*.whl "$out"/ctxgc-*.tgz "$out"/ctxgc-image.tar "$out"/SHA256SUMS
if wants wheel; then
  for arch in $arches; do timed "wheel $arch" bash "$root/scripts/release/wheel.sh" "$out" "$arch" >/dev/null; done
fi
if wants npm; then
  # shellcheck disable=SC2086
  timed npm bash "$root/scripts/release/npm.sh" "$out" $arches >/dev/null
fi
if wants image; then
  timed image bash "$root/scripts/release/image.sh" "$out/ctxgc-image.tar" "$(uname -m)" >/dev/null
fi
(cd "$out" && sha256sum ctxgc-* > SHA256SUMS)
echo "release: ctxgc $ver in $out ($((SECONDS - started)) s):" >&2
(cd "$out" && ls -l ctxgc-* SHA256SUMS | awk '{printf "  %-60s %6.1f MB\n", $9, $5 / 1e6}') >&2
if [ $check = 1 ]; then
  checks=()
  for what in wheel npm image; do wants $what && checks+=("$what"); done
  timed checks bash "$root/scripts/release/check.sh" "$out" "${checks[@]}"
  if wants image; then timed compose bash "$root/scripts/release/compose-test.sh" "$out/ctxgc-image.tar"; fi
fi
