#!/usr/bin/env bash
# Build (and smoke-run) the image from the Dockerfile with buildah, without a Docker daemon. When the
# registry's python:3.11-slim cannot be pulled (a machine that reaches no container registry), a base
# of the same name is built first from Debian's packages (debootstrap bookworm: its python3 is 3.11),
# carrying this machine's CA bundle so that pip reaches PyPI through the same egress. Needs root,
# buildah and debootstrap (apt-get install buildah debootstrap).
# Usage: deploy/build-image.sh [TAG [--no-run]]
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-localhost/kagent-fork:dev}"
export STORAGE_DRIVER="${STORAGE_DRIVER:-vfs}" BUILDAH_ISOLATION="${BUILDAH_ISOLATION:-chroot}"
base=docker.io/library/python:3.11-slim

if ! buildah inspect "$base" >/dev/null 2>&1 && ! buildah pull -q "$base" >/dev/null 2>&1; then
    echo "no registry: building $base from Debian's packages" >&2
    rootfs=$(mktemp -d)
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || echo http://deb.debian.org/debian)
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,passwd bookworm "$rootfs" "$mirror" >/dev/null
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
    rm -f "$rootfs"/usr/lib/python3.11/EXTERNALLY-MANAGED   # the image's pip installs system-wide, as python:3.11-slim's
    ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
    ctr=$(buildah from scratch)
    cp -a "$rootfs/." "$(buildah mount "$ctr")/"
    buildah umount "$ctr" >/dev/null
    buildah config --env PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin --cmd python3 "$ctr"
    buildah commit -q --rm "$ctr" "$base" >/dev/null
    rm -rf "$rootfs"
fi

# Docker's image format: OCI images have no HEALTHCHECK, and buildah drops the Dockerfile's one from them.
buildah bud --pull-never --format docker -t "$tag" .

[ "${2:-}" = "--no-run" ] && exit 0

# Smoke run: the embedded demo database, /readyz, one fork. The server's own output goes to a log that is
# shown only when the smoke run fails: stopping it makes buildah report "Error: exit status 1" (it kills
# the process it runs), which is the end of the smoke run, not a failure of the build.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
ctr=$(buildah from --pull-never "$tag")
buildah run --env KAGENT_FORK_DATA_DIR=/home/kagent-fork/pgdata "$ctr" -- \
    kagent-fork serve --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
server=$!
stop() { kill -INT "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; buildah rm "$ctr" >/dev/null || true; }
smoke() {
    for _ in $(seq 90); do curl -sf "localhost:$port/readyz" >/dev/null && break; sleep 1; done
    curl -sf "localhost:$port/readyz" >/dev/null \
        && curl -sf -X POST "localhost:$port/api/sessions/demo-v1-session/fork" -H 'Content-Type: application/json' -d '{}' >/dev/null
}
if smoke; then
    stop
    echo "smoke run passed: $tag answered /readyz and forked the demo session"
else
    stop
    echo "smoke run failed: the server's output follows" >&2
    cat "$log" >&2
    rm -f "$log"
    exit 1
fi
rm -f "$log"
