#!/usr/bin/env bash
# A tier that stalls, or turns very slow, under a running kvstreamd (tierlab tiers: loop devices
# with blkio caps, so root): 48 x 4 MiB persisted on both tiers, a step reading them all (about
# 0.45 s: long enough that the cap lands mid-step even on a busy machine), and t1's read cap set to
# 8 KB/s 50 ms into it. The step must finish within 4 s (the old daemon: never) with intact bytes, health
# must name t1 stalled within 5 s, and a 4 KiB persist from another session must not wait behind
# it. Then, t1 at 1 MB/s (slow but alive): every step (48 x 4 MiB: long enough that the blkio
# throttle's slices do not dominate) within 2 x t0 alone. The old daemon took 3.4 x (each step
# waited for the slow tier's reads in flight); the limit is loose because the machine is shared and
# single steps vary by 30% (a speed target is a benchmark's business, not this test's).
# Usage: stall_test.sh KVSTREAMD KVTORTURE   (exit 77: skipped, not root or no loop devices)
set -euo pipefail
daemon=$1 torture=$2
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root (loop devices, blkio caps)"
[ -d /sys/fs/cgroup/blkio ] && losetup -f > /dev/null 2>&1 || skip "no blkio cgroup or loop devices"
work=$(mktemp -d /var/tmp/kvstream-stall-XXXXXX)
pid=""
cleanup() {
  set +e
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid"
  "$tierlab" down --dir "$work" > /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
"$tierlab" up --dir "$work" --tier t0:2G:300 --tier t1:2G:150 > /dev/null
cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $work/kvstreamd.sock, mode: "0600"}
sessions: {max_arena: 256MiB}
logging: {level: warn}
tiers:
  - {name: t0, path: $work/mnt/t0/kvstream, capacity: 1500MiB}
  - {name: t1, path: $work/mnt/t1/kvstream, capacity: 1500MiB}
YAML
"$tierlab" run --dir "$work" -- "$daemon" --config "$work/kvstreamd.yaml" 2> "$work/kvstreamd.log" &
pid=$!
wait_socket "$work/kvstreamd.sock" || true  # if not, the first request below fails and says so
status=0
"$torture" stall --socket "$work/kvstreamd.sock" --chunks 48 --chunk-size 4MiB --hook-after-ms 50 \
  --hook "$tierlab cap --dir $work t1 0.008" --undo "$tierlab cap --dir $work t1 150" --expect-stalled t1 \
  --step-limit 4 --health-limit 5 --persist-limit 3 \
  || status=1
"$tierlab" cap --dir "$work" t1 150
sleep 1
"$torture" slow --socket "$work/kvstreamd.sock" --chunks 48 --chunk-size 4MiB --steps 5 --ratio-limit 2 \
  --hook "$tierlab cap --dir $work t1 1" || status=1
[ $status -eq 0 ] || tail -30 "$work/kvstreamd.log"
exit $status
