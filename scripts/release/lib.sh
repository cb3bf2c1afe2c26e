# What the release scripts share (sourced, not run): the pinned build tools, the version, the
# targets, and the one build of the `ctxgc` binary that every artifact carries.
#
# The tools come from PyPI into a virtualenv cached under $CTXGC_CACHE (~/.cache/ctxgc): zig
# (the `ziglang` package) links against an old glibc without Docker, cargo-zigbuild drives it,
# maturin builds the wheel, auditwheel checks its tag.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${CTXGC_CACHE:-$HOME/.cache/ctxgc}
# The oldest glibc the Linux artifacts run on: manylinux_2_28 (Debian 10+, Ubuntu 18.10+,
# RHEL 8+), the baseline of today's manylinux wheels.
glibc=2.28
release_pins="maturin==1.16.0 ziglang==0.17.1 cargo-zigbuild==0.24.1 auditwheel==6.8.2"

# release_tools: the virtualenv's folder of commands (bin/, or Scripts/ on Windows), made once
# per set of pins.
release_tools() {
  local dir python bin
  dir=$cache/py-release-$(echo "$release_pins" | sha1sum | cut -c1-8)
  bin=$dir/bin; [ -d "$dir/Scripts" ] && bin=$dir/Scripts
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    python=python3; command -v python3 >/dev/null || python=python
    "$python" -m venv "$dir" >&2
    bin=$dir/bin; [ -d "$dir/Scripts" ] && bin=$dir/Scripts
    # shellcheck disable=SC2086
    "$bin/python" -m pip install -q $release_pins >&2
    touch "$dir/.complete"
  fi
  echo "$bin"
}

# The workspace's version (Cargo.toml), which every artifact carries.
version() { sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -1; }

# Each target the Linux artifacts are built for: Rust's triple, npm's platform name, the
# wheel's architecture.
targets_known="x86_64 aarch64"
rust_triple() { echo "$1-unknown-linux-gnu"; }
npm_platform() { case $1 in x86_64) echo linux-x64 ;; aarch64) echo linux-arm64 ;; esac; }

# binary_path ARCH: where build_binary puts the binary for ARCH.
binary_path() { echo "$root/target/$(rust_triple "$1")/dist/ctxgc"; }

# build_binary ARCH: target/ARCH-unknown-linux-gnu/dist/ctxgc, linked against glibc $glibc by
# zig.
build_binary() {
  local arch=$1 tools triple
  tools=$(release_tools)
  triple=$(rust_triple "$arch")
  rustup target list --installed 2>/dev/null | grep -qx "$triple" || rustup target add "$triple" >&2
  (cd "$root" && PATH=$tools:$PATH cargo zigbuild -q --locked --profile dist -p ctxgc-cli \
    --target "$triple.$glibc")
  binary_path "$arch"
}

# podman_ready IMAGE FOLDER: podman runs IMAGE with its defaults, or else, where they cannot run a
# container (a sandbox refusing systemd's cgroups and raised rlimits, as this project's machines
# do), with runc, cgroupfs and this process's own limits, through a containers.conf written to
# FOLDER and named by CONTAINERS_CONF (exported). A CONTAINERS_CONF already set is left alone.
podman_ready() {
  local image=$1 folder=$2
  if [ -z "${CONTAINERS_CONF:-}" ] \
    && ! podman run --rm --health-interval disable --entrypoint /bin/true "$image" >/dev/null 2>&1; then
    cat > "$folder/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$(ulimit -n):$(ulimit -n)", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
    export CONTAINERS_CONF=$folder/containers.conf
  fi
  podman run --rm --health-interval disable --entrypoint /bin/true "$image" >/dev/null 2>&1 \
    || { echo "podman cannot run $image (CONTAINERS_CONF=${CONTAINERS_CONF:-})" >&2; return 1; }
}
