#!/usr/bin/env bash
# A tier that fills up or disappears under a running kvstreamd (tierlab tiers, so root):
#  - its file system full (a 64 MiB tier configured as 1 GiB): persists stay written to the other
#    tiers and say the replica there was lost for lack of space; the failures are counted;
#  - its directory deleted (rm -rf): health says so within seconds, the directory is made again,
#    empty, and replicas go there again; nothing is served from the files that were lost;
#  - its file system lazily unmounted (umount -l): reads and writes both stop using it (no longer
#    reads from the detached file system while writes fail), health names it, t0 serves every chunk.
# Usage: tier_gone_test.sh KVSTREAMD KVSTREAMCTL   (exit 77: skipped, not root or no loop devices)
set -euo pipefail
daemon=$1 ctl=$2
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root (loop devices, mounts)"
[ -d /sys/fs/cgroup/blkio ] && losetup -f > /dev/null 2>&1 || skip "no blkio cgroup or loop devices"
work=$(mktemp -d /var/tmp/kvstream-gone-XXXXXX)
pid=""
cleanup() {
  set +e
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid"
  "$tierlab" down --dir "$work" > /dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*"; tail -20 "$work/kvstreamd.log"; exit 1; }
"$tierlab" up --dir "$work" --tier t0:1G:0 --tier t1:1G:0 --tier t2:64M:0 > /dev/null
sock="$work/kvstreamd.sock"
cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $sock, mode: "0600"}
logging: {level: info}
tiers:
  - {name: t0, path: $work/mnt/t0/kvstream, capacity: 800MiB}
  - {name: t1, path: $work/mnt/t1/kvstream, capacity: 800MiB}
  - {name: t2, path: $work/mnt/t2/kvstream, capacity: 1GiB}
YAML
"$daemon" --config "$work/kvstreamd.yaml" 2> "$work/kvstreamd.log" &
pid=$!
wait_socket "$sock" || true  # if not, the first request below fails and says so
ctl() { "$ctl" --socket "$sock" "$@"; }
head -c 3000000 /dev/urandom > "$work/a.bin"
grep -q "tier mask 0x7" <<< "$(ctl put a "$work/a.bin")" || fail "put a"
for i in $(seq 40); do  # t2 fills up: about 20 chunks of 3 MB fit
  out=$(ctl put "fill$i" "$work/a.bin")
  grep -q "replicas lost on tier mask 0x4: .*No space left" <<< "$out" && break
done
grep -q "written to tier mask 0x3, not synced: a power cut may lose it; replicas lost on tier mask 0x4" <<< "$out" || fail "a full t2 is not reported: $out"
grep -q '"no_space_errors": [1-9]' <<< "$(ctl --json tiers)" || fail "no-space failures not counted"
# Poll `ctl health` until its text matches.
wait_health() {
  for _ in $(seq 50); do ctl health > "$work/health.txt" 2>&1 || true; grep -q "$1" "$work/health.txt" && return 0; sleep 0.1; done
  cat "$work/health.txt"; return 1
}

rm -rf "$work/mnt/t1/kvstream"
for _ in $(seq 50); do [ -d "$work/mnt/t1/kvstream" ] && break; sleep 0.1; done
[ -d "$work/mnt/t1/kvstream" ] || fail "the deleted tier directory was not made again"
grep -q "was deleted\|is gone" "$work/kvstreamd.log" || fail "the deletion was not logged"
[ "$(ctl --json lookup a | grep -o '"tier_mask": *[0-9]*' | grep -o '[0-9]*$')" = 5 ] || fail "a still listed on t1"
ctl get a "$work/a.out" > /dev/null && cmp -s "$work/a.bin" "$work/a.out" || fail "get a after t1 was deleted"
grep -q "tier mask 0x3" <<< "$(ctl put b "$work/a.bin")" || fail "put b after t1 was made again"  # t2 is full
[ -n "$(find "$work/mnt/t1/kvstream" -name '*.kvc')" ] || fail "no replica written to the new t1 directory"

umount -l "$work/mnt/t1"
wait_health "tier t1 cannot be used" || fail "health does not name t1 after umount -l"
ctl health > /dev/null && fail "health says OK with t1 unmounted"
ctl get b "$work/b.out" > /dev/null && cmp -s "$work/a.bin" "$work/b.out" || fail "get b after umount -l"
grep -q "written to tier mask 0x1, not synced: a power cut may lose it; replicas lost on tier mask 0x6" <<< "$(ctl put c "$work/a.bin")" || fail "put c does not report t1 lost"
ctl tiers | grep t1
echo "tier full, gone: lost space reported, deletion healed, unmount reported; every read served from t0"
