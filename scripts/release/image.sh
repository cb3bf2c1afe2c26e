#!/usr/bin/env bash
# The container image of the shared proxy, from Debian's packages only: a minimal bookworm made
# by mmdebstrap (no compiler, no registry but Debian's), the `ctxgc` binary, a non-root user,
# `ctxgc serve` on 0.0.0.0:8787 with --allow-remote (a container's loopback is its own), the
# store a volume, a health check on /ctxgc/healthz. Built with buildah, saved with podman.
#
#   scripts/release/image.sh OUT_TAR [ARCH]      (needs root, mmdebstrap, buildah and podman:
#                                                 Debian's packages, installed here if missing)
#
# Loads the image as localhost/ctxgc:VERSION and writes it to OUT_TAR (`podman save`).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
out=${1:?usage: image.sh OUT_TAR [ARCH]}
arch=${2:-x86_64}
case $arch in x86_64) debarch=amd64 ;; aarch64) debarch=arm64 ;; *) echo "image.sh: unknown arch $arch" >&2; exit 1 ;; esac
[ "$(uname -m)" = "$arch" ] || { echo "image.sh: builds for this machine's architecture only ($(uname -m))" >&2; exit 1; }
missing=
for tool in mmdebstrap buildah podman runc; do command -v "$tool" >/dev/null || missing="$missing $tool"; done
if [ -n "$missing" ]; then
  apt-get update -qq >&2 && apt-get install -y -qq $missing >/dev/null
fi
ver=$(version)
binary=$(build_binary "$arch")
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
stage=$root/target/release-stage/image
rm -rf "$stage"
mkdir -p "$stage"
cp "$binary" "$stage/ctxgc"

# The root file system: Debian's minimal base, CA certificates for the upstreams' TLS, a
# `ctxgc` user (uid 10001) owning the store's folder. Documentation and locales left out.
# SOURCE_DATE_EPOCH (the commit's time) keeps the files' times the same from build to build.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
mmdebstrap --quiet --variant=minbase --architectures="$debarch" --include=ca-certificates \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook='chroot "$1" groupadd --gid 10001 ctxgc' \
  --customize-hook='chroot "$1" useradd --uid 10001 --no-create-home --gid ctxgc --home-dir /var/lib/ctxgc --shell /usr/sbin/nologin ctxgc' \
  --customize-hook='install -d -m 0700 -o 10001 -g 10001 "$1/var/lib/ctxgc"' \
  --customize-hook="install -m 0755 '$stage/ctxgc' \"\$1/usr/local/bin/ctxgc\"" \
  --customize-hook='rm -rf "$1/var/lib/apt/lists"/* "$1/var/cache/apt"/*' \
  bookworm "$stage/rootfs.tar" http://deb.debian.org/debian >&2

image=localhost/ctxgc:$ver
# Docker's format throughout: OCI images have no health check.
export BUILDAH_FORMAT=docker
container=$(buildah from scratch)
trap 'buildah rm "$container" >/dev/null 2>&1 || true' EXIT
buildah add --quiet "$container" "$stage/rootfs.tar" / >/dev/null
# The health check needs no client in the image: bash's /dev/tcp asks /ctxgc/healthz.
health='exec 3<>/dev/tcp/127.0.0.1/8787 && printf "GET /ctxgc/healthz HTTP/1.0\r\n\r\n" >&3 && head -n1 <&3 | grep -q " 200 "'
buildah config \
  --user 10001:10001 \
  --workingdir /var/lib/ctxgc \
  --env XDG_DATA_HOME=/var/lib \
  --env RUST_LOG=info \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --entrypoint '["/usr/local/bin/ctxgc"]' \
  --cmd 'serve --listen 0.0.0.0:8787 --allow-remote --store sqlite:/var/lib/ctxgc/ctxgc.sqlite' \
  --port 8787 \
  --volume /var/lib/ctxgc \
  --healthcheck "CMD bash -c '$health'" \
  --healthcheck-interval 10s --healthcheck-timeout 3s --healthcheck-retries 3 \
  --healthcheck-start-period 5s \
  --label org.opencontainers.image.title=ctxgc \
  --label org.opencontainers.image.version="$ver" \
  --label org.opencontainers.image.revision="$commit" \
  --label org.opencontainers.image.licenses=MIT \
  --label org.opencontainers.image.description="ctxgc serve: the context manager's proxy for the agents' APIs" \
  "$container"
buildah commit --quiet --format docker --rm "$container" "$image" >/dev/null
trap - EXIT
mkdir -p "$(dirname "$out")"
rm -f "$out"
podman save --quiet --format docker-archive -o "$out" "$image"
echo "$out"
