#!/usr/bin/env bash
# The container image (deploy/Containerfile), built with podman from a Debian 12 root file system
# made here by mmdebstrap (no image registry is reachable) and the binaries built here, run with a
# tier directory and the socket directory bind-mounted, under deploy/kubernetes/seccomp-kvstream.json
# (the DaemonSet's profile), and driven from the host: put/get byte-identical through the
# bind-mounted socket (the session's memfd arena passed across the container boundary), the tier on
# io_uring, health OK, a node name from the environment, and SIGTERM drains and stops it (exit 0).
# Usage: container_test.sh BUILD_DIR   (root; exit 77: skipped without podman, mmdebstrap or runc)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
build=$1
[ "$(id -u)" -eq 0 ] || skip "needs root (podman with runc and cgroupfs)"
for tool in podman mmdebstrap runc; do
  command -v "$tool" > /dev/null || skip "$tool is not installed (deploy/install-deps.sh)"
done
need_built "$build/daemon/kvstreamd" "$build/tools/kvstreamctl"
work=$(mktemp -d /var/tmp/kvstream-container-XXXXXX)
tag=localhost/kvstream:test
name=kvstream-test-$$
export CONTAINERS_CONF="$work/containers.conf"
printf '[containers]\ndefault_ulimits = []\n' > "$CONTAINERS_CONF"
podman() { command podman --runtime runc --cgroup-manager cgroupfs "$@"; }
cleanup() {
  set +e
  podman rm -f "$name" > /dev/null 2>&1
  podman rmi -f "$tag" localhost/kvstream-test-binaries > /dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*"; podman logs "$name" 2>&1 | tail -20; exit 1; }

# The base: Debian 12 with the libraries the binaries need, found from them (kept between runs).
packages=$( { ldd "$build/daemon/kvstreamd"; ldd "$build/tools/kvstreamctl"; } | awk '/=> \// {print $3}' | sort -u |
  while read -r lib; do dpkg -S "$(readlink -f "$lib")" 2> /dev/null || dpkg -S "$lib"; done |
  cut -d: -f1 | sort -u | grep -v -E '^(libc6|libgcc-s1|libstdc\+\+6|zlib1g)$' | paste -sd, -)
base=localhost/kvstream-test-base:$(echo "$packages" | sha256sum | cut -c1-12)
if ! podman image exists "$base"; then
  echo "container: mmdebstrap bookworm with $packages"
  mmdebstrap --quiet --variant=apt --include="$packages,passwd" bookworm "$work/base.tar"
  podman import "$work/base.tar" "$base" > /dev/null
fi
# The prebuilt binaries as an image (the Containerfile's BINARIES).
mkdir "$work/bin"
strip -o "$work/bin/kvstreamd" "$build/daemon/kvstreamd"
strip -o "$work/bin/kvstreamctl" "$build/tools/kvstreamctl"
printf 'FROM scratch\nCOPY kvstreamd kvstreamctl /out/\n' > "$work/bin/Containerfile"
podman build --quiet --network none -t localhost/kvstream-test-binaries "$work/bin" > /dev/null
podman build --quiet --network none --build-arg BASE="$base" --build-arg RUNTIME_BASE="$base" \
  --build-arg BINARIES=localhost/kvstream-test-binaries -f "$root/deploy/Containerfile" -t "$tag" "$root" > /dev/null
[ "$(podman image inspect --format '{{.Config.User}}' "$tag")" = 10001:10001 ] || fail "the image does not run as 10001:10001"

mkdir -p "$work/run" "$work/tier"
chown 10001:10001 "$work/run" "$work/tier"
cat > "$work/kvstreamd.yaml" <<'YAML'
node: ${NODE_NAME}
socket: {path: /run/kvstream/kvstreamd.sock, mode: "0660", group: kvstream}
metrics: {listen: "127.0.0.1:9464"}
logging: {level: info}
io_engine: auto
tiers:
  - name: t0
    path: /var/lib/kvstream/t0/${NODE_NAME}
    capacity: 1GiB
YAML
podman run -d --name "$name" --network none -e NODE_NAME=node-under-test \
  --security-opt seccomp="$root/deploy/kubernetes/seccomp-kvstream.json" \
  -v "$work/run:/run/kvstream" -v "$work/tier:/var/lib/kvstream/t0" \
  -v "$work/kvstreamd.yaml:/etc/kvstream/kvstreamd.yaml:ro" "$tag" > /dev/null
sock="$work/run/kvstreamd.sock"
wait_socket "$sock" || fail "kvstreamd did not start in the container"
ctl() { "$build/tools/kvstreamctl" --socket "$sock" "$@"; }
head -c $((5 << 20)) /dev/urandom > "$work/in"
ctl put chunk-a "$work/in" > "$work/put.out" 2>&1 || fail "put through the bind-mounted socket: $(cat "$work/put.out")"
ctl get chunk-a "$work/out" > /dev/null || fail "get through the bind-mounted socket"
cmp "$work/in" "$work/out" || fail "get returned other bytes than put"
ctl health > /dev/null || fail "health is not OK: $(ctl health)"
ctl --json tiers | python3 -c '
import json, sys
t = json.load(sys.stdin)[0]
assert t["io_engine"] == "io_uring", ("tier on", t["io_engine"], "under the profile that allows io_uring")
assert t["replicas_written"] >= 1, t' || fail "tier state"
# The tier's path came from the environment (${NODE_NAME}); its files are the container user's.
[ -n "$(find "$work/tier/node-under-test" -name '*.kvc' -user 10001)" ] || fail "no chunk file of uid 10001 in the tier"
podman stop --time 30 "$name" > /dev/null
[ "$(podman inspect --format '{{.State.ExitCode}}' "$name")" = 0 ] || fail "exit code $(podman inspect --format '{{.State.ExitCode}}' "$name") on SIGTERM"
podman logs "$name" 2>&1 | grep -q "stopped" || fail "no clean stop in the log"
echo "container: image as 10001:10001, put/get byte-identical through the bind-mounted socket, io_uring under the DaemonSet's seccomp profile, SIGTERM stopped it cleanly"
