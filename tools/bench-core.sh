#!/usr/bin/env bash
# Core-level benchmark on two emulated tiers (DESIGN.md section 5): two loop devices with
# O_DIRECT, ext4 on each, and a blkio cgroup capping each device's read bandwidth. Runs
# kvcore_bench inside the cgroup, prints its table, and tears everything down.
# Needs root. Usage: tools/bench-core.sh [FAST_MBPS] [SLOW_MBPS] [-- kvcore_bench options]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fast=${1:-300}; slow=${2:-150}
shift $(( $# >= 2 ? 2 : $# )) || true
[ "${1:-}" = "--" ] && shift
bench="${KVCORE_BENCH:-$root/build/tools/kvcore_bench}"
work="${BENCH_DIR:-/var/tmp/kvstream-bench}"
cg=/sys/fs/cgroup/blkio/kvstream-bench

[ "$(id -u)" -eq 0 ] || { echo "bench-core: must run as root (loop devices, mounts, cgroups)" >&2; exit 1; }
[ -x "$bench" ] || { echo "bench-core: $bench not built (run tests/run.sh or cmake --build build)" >&2; exit 1; }
[ -d /sys/fs/cgroup/blkio ] || { echo "bench-core: cgroup v1 blkio controller not mounted" >&2; exit 1; }

loops=()
teardown() {
  set +e
  for m in "$work"/mnt/t0 "$work"/mnt/t1; do mountpoint -q "$m" && umount "$m"; done
  for l in "${loops[@]}"; do losetup -d "$l"; done
  [ -d "$cg" ] && rmdir "$cg" 2>/dev/null
  rm -f "$work"/t0.img "$work"/t1.img
}
trap teardown EXIT

mkdir -p "$work/mnt/t0" "$work/mnt/t1"
for i in 0 1; do
  truncate -s 6G "$work/t$i.img"
  l=$(losetup -f --show --direct-io=on "$work/t$i.img")
  loops+=("$l")
  mkfs.ext4 -q -F "$l"
  mount "$l" "$work/mnt/t$i"
done
mkdir -p "$cg"
echo "$(cat /sys/block/${loops[0]#/dev/}/dev) $((fast * 1000000))" > "$cg/blkio.throttle.read_bps_device"
echo "$(cat /sys/block/${loops[1]#/dev/}/dev) $((slow * 1000000))" > "$cg/blkio.throttle.read_bps_device"
echo "bench-core: t0 ${loops[0]} capped at $fast MB/s, t1 ${loops[1]} at $slow MB/s"
# The benchmark joins the cgroup itself, so the caps apply to its reads.
bash -c 'echo $$ > '"$cg"'/cgroup.procs && exec "$@"' _ \
  "$bench" --tier "t0=$work/mnt/t0" --tier "t1=$work/mnt/t1" "$@"
