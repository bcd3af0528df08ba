#!/usr/bin/env bash
# tierlab end to end: schedules (no root needed), then, as root, real loop devices, mounts and
# blkio caps: up, cap, schedule, run, status, a failed up cleaning after itself, and idempotent
# down; and paced tiers (up --pace: kvfaultfs rate rules instead of blkio, for anyone's I/O).
# Exits 77 (skipped) for the device parts when not root or without loop devices/blkio/FUSE.
# Usage: tierlab_test.sh [all | rate | devices | paced KVFAULTFS]
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
T=$tierlab
failures=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}
eq() { [ "$1" = "$2" ] || { echo "     got '$1', want '$2'"; return 1; }; }
has() { grep -q -- "$2" <<< "$1" || { echo "     '$2' not in: $1"; return 1; }; }

part=${1:-all}
if [ "$part" = all ] || [ "$part" = rate ]; then
  check "a bare number is steady" eq "$($T rate 300 12.5)" 300
  check "steady" eq "$($T rate steady:150 3)" 150
  check "periodic: high in the first half" eq "$($T rate periodic:150:50:4 1.9)" 150
  check "periodic: low in the second half" eq "$($T rate periodic:150:50:4 2)" 50
  check "periodic: repeats" eq "$($T rate periodic:150:50:4 9)" 150
  seq1=$(for t in $(seq 0 199); do $T rate bursty:150:40:0.3:5 "$t"; done | tr '\n' ' ')
  seq2=$(for t in $(seq 0 199); do $T rate bursty:150:40:0.3:5 "$t"; done | tr '\n' ' ')
  check "bursty is reproducible" eq "$seq1" "$seq2"
  lows=$(tr ' ' '\n' <<< "$seq1" | grep -c '^40$')
  check "bursty is low about PROB of the time ($lows/200)" test "$lows" -ge 40 -a "$lows" -le 80
  other=$(for t in $(seq 0 199); do $T rate bursty:150:40:0.3:6 "$t"; done | tr '\n' ' ')
  check "another seed, other slots" test "$seq1" != "$other"
  err=$($T rate wobbly:3 1 2>&1); rc=$?
  check "unknown schedule is refused" eq "$rc" 2
  check "  with a clear message" has "$err" "unknown schedule"
  err=$($T rate periodic:1:x:4 1 2>&1)
  check "non-numeric field is named" has "$err" 'LOW "x" is not a number'
fi
if [ "$part" = all ] || [ "$part" = devices ]; then
  if [ "$(id -u)" -ne 0 ] || [ ! -d /sys/fs/cgroup/blkio ] || ! losetup -f > /dev/null 2>&1; then
    echo "skip: needs root, a free loop device and cgroup v1 blkio"
    [ $failures -eq 0 ] && exit 77 || exit 1
  fi
  D=$(mktemp -d /var/tmp/tierlab-test.XXXXXX)
  trap '$T down --dir "$D" > /dev/null 2>&1; rm -rf "$D"' EXIT
  out=$($T up --dir "$D" --tier fast:96M:300 --tier slow:96M:150:80 2>&1)
  check "up" eq "$?" 0
  check "up prints the mounts" has "$out" "slow $D/mnt/slow /dev/loop"
  check "tiers are mounted" mountpoint -q "$D/mnt/fast"
  check "  with ext4" eq "$(findmnt -n -o FSTYPE "$D/mnt/slow")" ext4
  fast_dev=$(awk '$1 == "tier" && $2 == "fast" { print $3 }' "$D/tierlab.state")
  check "  on a loop device with direct I/O" eq "$(cat /sys/block/${fast_dev#/dev/}/loop/dio)" 1
  cg=$(awk '$1 == "cgroup" { print $2 }' "$D/tierlab.state")
  majmin=$(cat /sys/block/${fast_dev#/dev/}/dev)
  check "read cap set" has "$(cat "$cg/blkio.throttle.read_bps_device")" "$majmin 300000000"
  check "write cap set" has "$($T status --dir "$D")" "tier slow .* read 150 MB/s write 80 MB/s"
  out=$($T up --dir "$D" --tier x:96M:1 2>&1)
  check "a second up is refused" has "$out" "already up"
  $T cap --dir "$D" fast 120
  check "cap changes the read cap" has "$(cat "$cg/blkio.throttle.read_bps_device")" "$majmin 120000000"
  $T cap --dir "$D" fast periodic:200:20:10 --at 7
  check "cap evaluates a schedule at a step" has "$(cat "$cg/blkio.throttle.read_bps_device")" "$majmin 20000000"
  out=$($T cap --dir "$D" medium 100 2>&1)
  check "an unknown tier is named" has "$out" "no tier named 'medium'"
  check "run puts the command in the cgroup" has "$($T run --dir "$D" -- cat /proc/self/cgroup)" "blkio:/${cg##*/}"
  # The cap holds for O_DIRECT reads of a process in the cgroup: 24 MiB at 20 MB/s takes >= 1 s.
  dd if=/dev/zero of="$D/mnt/fast/f" bs=1M count=24 oflag=direct status=none
  start=$(date +%s.%N)
  $T run --dir "$D" -- dd if="$D/mnt/fast/f" of=/dev/null bs=1M iflag=direct status=none
  took=$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { print a - b }')
  check "reads in the cgroup are throttled (24 MiB at 20 MB/s took ${took}s)" awk -v t="$took" 'BEGIN { exit !(t > 0.9) }'
  $T schedule --dir "$D" --interval 0.2 --background slow periodic:150:30:0.8 > /dev/null
  slow_majmin=$(cat /sys/block/$(awk '$1 == "tier" && $2 == "slow" { print $3 }' "$D/tierlab.state" | sed 's|/dev/||')/dev)
  seen=""
  for _ in $(seq 1 20); do
    seen+=" $(awk -v d="$slow_majmin" '$1 == d { print $2 }' "$cg/blkio.throttle.read_bps_device")"
    sleep 0.1
  done
  check "a background schedule moves the cap" has "$seen" "30000000"
  check "  up and down" has "$seen" "150000000"
  (exec sleep 60) &
  $T run --dir "$D" -- sleep 60 &
  sleep 0.3
  $T down --dir "$D"
  check "down" eq "$?" 0
  check "  unmounts" test ! -e "$D/mnt/fast"
  check "  detaches the loop devices" eq "$(losetup -j "$D/fast.img" 2>/dev/null)" ""
  check "  removes the cgroup (moving its processes out)" test ! -d "$cg"
  check "  removes the images" test ! -e "$D/fast.img"
  check "  stops the schedule" eq "$(pgrep -f "schedule --dir $D" || true)" ""
  $T down --dir "$D"
  check "a second down is a no-op" eq "$?" 0
  kill %1 %2 2>/dev/null
  out=$($T up --dir "$D" --tier ok:96M:100 --tier broken:1K:100 2>&1)
  check "an up that fails says so" has "$out" "up failed; tearing down"
  check "  and leaves nothing behind" eq "$(ls "$D"; losetup -j "$D/ok.img")" ""
  if id nobody > /dev/null 2>&1; then
    out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$T" up --dir /tmp/x --tier a:1M:1 2>&1)
    check "not root: a clear error" has "$out" "must run as root"
  fi
fi
if [ "$part" = paced ]; then
  export TIERLAB_KVFAULTFS=$2
  if [ "$(id -u)" -ne 0 ] || [ ! -d /sys/fs/cgroup/blkio ] || ! losetup -f > /dev/null 2>&1 ||
     [ ! -c /dev/fuse ] || [ ! -x "$TIERLAB_KVFAULTFS" ]; then
    echo "skip: needs root, a free loop device, cgroup v1 blkio, /dev/fuse and kvfaultfs"
    exit 77
  fi
  D=$(mktemp -d /var/tmp/tierlab-test.XXXXXX)
  trap '$T down --dir "$D" > /dev/null 2>&1; rm -rf "$D"' EXIT
  out=$($T up --dir "$D" --pace --tier fast:96M:20:30 --tier slow:96M:0 2>&1)
  check "up --pace" eq "$?" 0
  check "  a FUSE layer at the tier's mount" eq "$(findmnt -n -o FSTYPE "$D/mnt/fast")" fuse.kvfaultfs
  check "  over ext4 on the loop device" eq "$(findmnt -n -o FSTYPE "$D/back/fast")" ext4
  check "  the caps as rate rules" eq "$(sort "$D/fast.rules" | tr '\n' ';')" "read * rate 20;write * rate 30;"
  check "  no rule for an uncapped tier" eq "$(cat "$D/slow.rules")" ""
  check "  status shows them" has "$($T status --dir "$D")" "tier fast .* read 20 MB/s write 30 MB/s"
  # A pacer can only slow I/O down, so the lower bounds below hold on any machine: 24 MiB at
  # 30 MB/s takes >= 0.8 s, at 20 MB/s >= 1.25 s; uncapped, far less than either.
  start=$(date +%s.%N)
  dd if=/dev/zero of="$D/mnt/fast/f" bs=1M count=24 oflag=direct status=none
  took=$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { print a - b }')
  check "writes are paced, for a process outside the cgroup too (24 MiB at 30 MB/s took ${took}s)" \
    awk -v t="$took" 'BEGIN { exit !(t > 0.8) }'
  check "  and land in the backing file system" eq "$(stat -c %s "$D/back/fast/f")" 25165824
  start=$(date +%s.%N)
  dd if="$D/mnt/fast/f" of=/dev/null bs=1M iflag=direct status=none
  took=$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { print a - b }')
  check "reads are paced (24 MiB at 20 MB/s took ${took}s)" awk -v t="$took" 'BEGIN { exit !(t > 1.2) }'
  $T cap --dir "$D" fast 0 30
  check "cap 0 removes the read rule, keeps the write rule" eq "$(cat "$D/fast.rules")" "write * rate 30"
  start=$(date +%s.%N)
  dd if="$D/mnt/fast/f" of=/dev/null bs=1M iflag=direct status=none
  took=$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { print a - b }')
  check "  reads are no longer paced (${took}s)" awk -v t="$took" 'BEGIN { exit !(t < 1.2) }'
  $T down --dir "$D"
  check "down" eq "$?" 0
  check "  unmounts both layers" test ! -e "$D/mnt/fast" -a ! -e "$D/back/fast"
  check "  stops kvfaultfs" eq "$(pgrep -f "kvfaultfs --backing=$D" || true)" ""
  check "  removes the rules" test ! -e "$D/fast.rules"
  # Under a tmpfs directory a paced tier keeps its data in a tmpfs of its own (no loop device).
  M=$(mktemp -d /dev/shm/tierlab-test.XXXXXX)
  trap '$T down --dir "$D" > /dev/null 2>&1; rm -rf "$D"; $T down --dir "$M" > /dev/null 2>&1; rm -rf "$M"' EXIT
  out=$($T up --dir "$M" --pace --tier mem:64M:20 2>&1)
  check "up --pace under tmpfs" eq "$?" 0
  check "  prints the tier as memory-backed" eq "$out" "mem $M/mnt/mem tmpfs"
  check "  over a tmpfs of the tier's size" eq "$(findmnt -n -o FSTYPE,SIZE "$M/back/mem" | tr -s ' ')" "tmpfs 64M"
  check "  no loop device" eq "$(losetup -j "$M/mem.img" -O NAME -n 2>/dev/null)" ""
  dd if=/dev/zero of="$M/mnt/mem/f" bs=1M count=4 oflag=direct status=none
  check "  writes land in it" eq "$(stat -c %s "$M/back/mem/f")" 4194304
  start=$(date +%s.%N)
  dd if="$M/mnt/mem/f" of=/dev/null bs=1M iflag=direct status=none
  took=$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { print a - b }')
  check "  reads are paced (4 MiB at 20 MB/s took ${took}s)" awk -v t="$took" 'BEGIN { exit !(t > 0.2) }'
  $T down --dir "$M"
  check "  down unmounts both layers" test ! -e "$M/mnt/mem" -a ! -e "$M/back/mem"
fi
echo "$failures failure(s)"
[ $failures -eq 0 ]
