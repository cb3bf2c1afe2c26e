#!/usr/bin/env bash
# The npm packages, the way Codex CLI ships: `ctxgc`, whose `bin` starts the native binary, and
# one package per platform that carries it (`@ctxgc/linux-x64`, ...), listed as the main
# package's optional dependencies so npm installs only the one matching the machine.
#
#   scripts/release/npm.sh OUT_DIR [ARCH | PLATFORM=BINARY]...
#
# ARCH (x86_64, aarch64) builds that Linux binary here (zig, glibc 2.28); PLATFORM=BINARY packs a
# binary built elsewhere (darwin-arm64=path/to/ctxgc, win32-x64=path/to/ctxgc.exe: the release
# workflow's macOS and Windows runners). Default: x86_64. Prints the tarballs' paths.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
out=${1:?usage: npm.sh OUT_DIR [ARCH | PLATFORM=BINARY]...}
shift
[ $# -gt 0 ] || set -- x86_64
mkdir -p "$out"
out=$(cd "$out" && pwd)
ver=$(version)
stage=$root/target/release-stage/npm
rm -rf "$stage"
mkdir -p "$stage"

# The platforms the main package names, as npm spells them (process.platform-process.arch).
platforms="linux-x64 linux-arm64 darwin-x64 darwin-arm64 win32-x64"

pack() { # FOLDER: npm pack into OUT_DIR, print the tarball's path
  local name
  name=$(cd "$1" && npm pack --silent --pack-destination "$out")
  echo "$out/$name"
}

for item in "$@"; do
  case $item in
    *=*) platform=${item%%=*}; binary=${item#*=} ;;
    *) platform=$(npm_platform "$item"); binary=$(build_binary "$item") ;;
  esac
  case " $platforms " in *" $platform "*) ;; *) echo "npm.sh: unknown platform $platform (one of: $platforms)" >&2; exit 1 ;; esac
  [ -x "$binary" ] || { echo "npm.sh: $binary is not an executable" >&2; exit 1; }
  dir=$stage/$platform
  mkdir -p "$dir/bin"
  exe=ctxgc; [ "${platform%%-*}" = win32 ] && exe=ctxgc.exe
  cp "$binary" "$dir/bin/$exe"
  # os and cpu as npm names them; Linux packages hold glibc binaries, so they say so (npm 10+
  # skips them on musl, where the main package then says what to do).
  node - "$root/npm/platform.package.json" "$dir/package.json" "$platform" "$ver" <<'EOF'
const fs = require("node:fs");
const [template, target, platform, version] = process.argv.slice(2);
const [os, cpu] = platform.split("-");
const pkg = JSON.parse(fs.readFileSync(template, "utf8").replaceAll("PLATFORM", platform).replace('"OS"', JSON.stringify(os)).replace('"CPU"', JSON.stringify(cpu)));
pkg.version = version;
if (os === "linux") pkg.libc = ["glibc"];
fs.writeFileSync(target, JSON.stringify(pkg, null, 2) + "\n");
EOF
  printf '# @ctxgc/%s\n\nThe `ctxgc` binary for %s, installed by the `ctxgc` package; see its README.\n' \
    "$platform" "$platform" > "$dir/README.md"
  pack "$dir"
done

# The main package: its version and its optional dependencies' versions are the workspace's.
cp -r "$root/npm/ctxgc" "$stage/ctxgc"
cp "$root/LICENSE" "$stage/ctxgc/"
node - "$stage/ctxgc/package.json" "$ver" <<'EOF'
const fs = require("node:fs");
const [file, version] = process.argv.slice(2);
const pkg = JSON.parse(fs.readFileSync(file, "utf8"));
pkg.version = version;
for (const name of Object.keys(pkg.optionalDependencies)) pkg.optionalDependencies[name] = version;
pkg.files.push("LICENSE");
fs.writeFileSync(file, JSON.stringify(pkg, null, 2) + "\n");
EOF
pack "$stage/ctxgc"
