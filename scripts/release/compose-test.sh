#!/usr/bin/env bash
# deploy/compose.yaml, run as written with podman-compose (PyPI, pinned): two replicas of the
# release image on one Redis. Redis comes from a test image made of Debian's packages (this
# machine reaches no other registry), which also runs the scripted upstream
# (scripts/conformance/upstream.py) inside the compose network. Checks: both replicas healthy
# and ready on the store; a request through each reaches the upstream with its large tool output
# trimmed; both replicas file under one tenant secret in Redis.
#
#   scripts/release/compose-test.sh IMAGE_TAR      (needs root, podman; the image from image.sh)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$root/scripts/lib/ports.sh"
tar=${1:?usage: compose-test.sh IMAGE_TAR}
ver=$(version)
tools=$(release_tools)
[ -x "$tools/podman-compose" ] || "$tools/pip" install -q podman-compose==1.6.0
podman load -q -i "$tar" >/dev/null
work=$(mktemp -d)
project=ctxgc-compose-test
compose() {
  (cd "$root/deploy" && "$tools/podman-compose" -p "$project" \
    -f compose.yaml -f "$work/test.yaml" "$@")
}
cleanup() { compose down -v >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "compose-test: $*" >&2; compose logs 2>&1 | tail -40 >&2; exit 1; }

# Redis and Python from Debian, made once per version of this list.
helper=localhost/ctxgc-compose-helper:1
if ! podman image exists "$helper"; then
  mmdebstrap --quiet --variant=minbase --include=redis-server,python3 \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    bookworm "$work/helper.tar" http://deb.debian.org/debian >&2
  podman import -q "$work/helper.tar" "$helper" >/dev/null
  rm -f "$work/helper.tar"
fi

podman_ready "$helper" "$work" || fail "podman cannot run containers here"
# What the test adds to the file: the helper image as Redis, the scripted upstream beside it.
mkdir -p "$work/record"
cat > "$work/test.yaml" <<EOF
services:
  upstream:
    image: $helper
    command: ["python3", "/upstream/upstream.py", "9000", "/record/upstream.jsonl"]
    environment: {UPSTREAM_HOST: 0.0.0.0}
    volumes: ["$root/scripts/conformance:/upstream:ro", "$work/record:/record"]
  ctxgc-1:
    depends_on: [redis, upstream]
  ctxgc-2:
    depends_on: [redis, upstream]
EOF
p1=$(port)
p2=$(port)
export CTXGC_REDIS_IMAGE=$helper CTXGC_IMAGE=localhost/ctxgc:$ver CTXGC_PORT_1=$p1 CTXGC_PORT_2=$p2 \
  CTXGC_OPENAI_UPSTREAM=http://upstream:9000
compose up -d >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; fail "podman-compose up"; }
for p in "$p1" "$p2"; do
  for _ in $(seq 100); do curl -sf -m 2 "http://127.0.0.1:$p/ctxgc/readyz" >/dev/null && break; sleep 0.2; done
  curl -sf -m 2 "http://127.0.0.1:$p/ctxgc/healthz" | grep -q '"ok"' || fail "replica on $p: /ctxgc/healthz"
  curl -sf -m 2 "http://127.0.0.1:$p/ctxgc/readyz" >/dev/null || fail "replica on $p: /ctxgc/readyz (the store)"
done
python3 "$root/scripts/release/trimmed_request.py" "$work/record/upstream.jsonl" "$p1" "$p2" \
  | sed 's/^/compose: /' || fail "requests through the replicas"
redis=${project}_redis_1
keys=$(podman exec "$redis" redis-cli --scan | sort)
secrets=$(echo "$keys" | grep -c 'tenant-secret' || true)
[ "$secrets" = 1 ] || fail "Redis holds $secrets tenant secrets (want one, shared): $keys"
# Each replica stored the original it trimmed, both under the one tenant the shared secret gives
# the same API key (keys: ctxgc:orig:TENANT.SESSION:ID).
tenants=$(echo "$keys" | sed -n 's/^ctxgc:orig:\([0-9a-f]*\)\..*/\1/p' | sort | uniq -c)
[ "$(echo "$keys" | grep -c '^ctxgc:orig:')" = 2 ] && [ "$(echo "$tenants" | wc -l)" = 1 ] \
  || fail "want two originals under one tenant in Redis: $keys"
echo "compose: 2 replicas healthy and ready on one Redis; one tenant secret, both originals under one tenant"
