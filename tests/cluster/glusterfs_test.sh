#!/usr/bin/env bash
# Shared tiers on a real distributed file system: a GlusterFS replica-3 volume on local bricks
# (tools/lib/glusterfs.sh), one FUSE mount per node (each its own glusterfs client with its own
# caches), three kvstreamd nodes n1..n3, each with a local tier and `shared: true` on its own mount,
# under one cluster key. Each case checks what it says (bytes with cmp, step results, health and
# /metrics text):
#  1. a chunk n1 publishes is found by n2 and n3 within 3 s (miss_ttl 1 s, the mounts' 1 s entry
#     timeout, 1 s to spare), after each had looked for it and missed; both serve it byte-identical,
#     and n2 copies it to its own local tier (cross-node reuse);
#  2. quota: n2 publishes past its shared quota and evicts only its own files (the others see them
#     gone); n1's chunk stays published and served;
#  3. the cluster key: the cluster serves none of the chunks of a node with another key or none; the
#     node with another key serves none of the cluster's (the one with none serves them as they are:
#     without a key nothing is authenticated);
#  4. a brick process killed in the middle of a step whose reads all go to the shared tier: the step
#     is intact, no read fails (the replica volume hides the loss);
#  5. the volume stopped in the middle of such a step: the step is served from the local tier,
#     health and /metrics name the shared tier unusable, and once the volume starts again the tier
#     is used again by itself (a chunk published after that is found and served across nodes);
#  6. a mount that goes ENOTCONN (its glusterfs client killed): health and /metrics say the tier
#     cannot be used, persists report the lost replica, reads are served from the local tier; after
#     a remount the tier is usable again without a restart (a new chunk reaches the other nodes);
#  7. n1 rewrites a key over and over (unpublish, rename, link) while a node reading only the shared
#     tier gets it: every get is one of the versions, byte for byte, or a miss, never wrong bytes;
#  8. a key replaced under a node's cached entry: GlusterFS answers the node's first read of the
#     name ESTALE (open-behind: the open was never sent, the old file is gone); it is a miss or the
#     new version, never a failed step or an error counted against the tier.
#  9. every brick frozen (SIGSTOP) in the middle of a step: the step is served from the local tier
#     within the step limit (not the freeze), a concurrent persist goes on, health names pfs stalled;
#     after the bricks go on the tier is usable again and a new chunk reaches another node.
# Usage: glusterfs_test.sh KVSTREAMD KVSTREAMCTL KVTORTURE   (exit 77: skipped, no root, FUSE or
# GlusterFS)
set -euo pipefail
kvstreamd=$1 ctl_bin=$2 torture=$3
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/glusterfs.sh
source "$root/tools/lib/glusterfs.sh"
# shellcheck source-path=SCRIPTDIR source=../support/daemon_nodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/daemon_nodes.sh"
why=$(glusterfs_missing)
[ -z "$why" ] || skip "$why"
work=$(test_work_dir glusterfs)
vol="kvs-test-$$"
cleanup() {
  set +e
  [ -z "${writer:-}" ] || kill "$writer" 2> /dev/null
  [ -z "${tracer:-}" ] || kill -INT "$tracer" 2> /dev/null
  [ -z "${frozen[*]:-}" ] || kill -CONT "${frozen[@]}" 2> /dev/null
  kvstreamd_stop_all 2> /dev/null
  glusterfs_down
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "FAILED: line $LINENO: $BASH_COMMAND"' ERR
started=$SECONDS
# case_ "N. TEXT": announces case N; false when KVSTREAM_GLUSTER_CASES (e.g. "5 6") leaves it out.
# Case 1 always runs: the others build on its chunk and copies.
case_() {
  [ -z "${KVSTREAM_GLUSTER_CASES:-}" ] || [ "${1%%.*}" = 1 ] || [[ " $KVSTREAM_GLUSTER_CASES " == *" ${1%%.*} "* ]] ||
    return 1
  echo "== $* ($((SECONDS - started)) s)"
}

glusterfs_up "$work" "$vol" 3 3
mnt() { echo "$work/mnt/node$1"; }
head -c 32 /dev/urandom > "$work/cluster.key"
head -c 32 /dev/urandom > "$work/other.key"
chmod 0600 "$work/cluster.key" "$work/other.key"

# A free TCP port on 127.0.0.1 for a daemon's /metrics.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
declare -A port=() pid=()
# node NAME MOUNT QUOTA KEYFILE LOCAL: writes NAME.yaml and starts it; QUOTA is its shared tier's
# capacity; KEYFILE "" for none; LOCAL 0 for no local tier.
node() {
  local name=$1 m=$2 quota=$3 key=$4 local=$5
  port[$name]=$(free_port)
  {
    echo "socket: {path: $work/$name.sock, mode: \"0600\"}"
    echo "node: $name"
    echo "logging: {level: info}"
    echo "metrics: {listen: 127.0.0.1:${port[$name]}}"
    [ -z "$key" ] || echo "shared_key_file: $key"
    echo "tiers:"
    [ "$local" = 0 ] || echo "  - {name: local, path: $work/local-$name, capacity: 512MiB}"
    echo "  - {name: pfs, path: $(mnt "$m")/kvstream, capacity: $quota, shared: true, miss_ttl: 1s}"
  } > "$work/$name.yaml"
  kvstreamd_start "$work/$name.yaml" "$work/$name.log"
  pid[$name]=$daemon
}
metric() { curl -sf "http://127.0.0.1:${port[$1]}/metrics" | grep "^$2" || true; }

for i in 1 2 3 4 5 6; do head -c $((1000000 + i * 100000)) /dev/urandom > "$work/c$i.bin"; done
node n1 1 1GiB "$work/cluster.key" 1
node n2 2 4MiB "$work/cluster.key" 1
node n3 3 1GiB "$work/cluster.key" 1

if case_ "1. published on n1, found by n2 and n3 within miss_ttl, served byte-identical, reused"; then
for n in n2 n3; do ! present "$n" shared1 || fail "$n finds shared1 before it is published"; done  # misses remembered
ctl n1 put shared1 "$work/c1.bin" | grep -q "written to tier mask 0x3" || fail "n1: put shared1"
put_at=$SECONDS
for n in n2 n3; do until_ 3 present "$n" shared1 || fail "$n does not find shared1 3 s after n1 published it"; done
echo "found by n2 and n3 within $((SECONDS - put_at)) s"
for n in n2 n3; do got "$n" shared1 "$work/c1.bin" || fail "$n: shared1 not byte-identical"; done
until_ 5 on_tiers n2 shared1 3 || fail "n2 did not copy shared1 to its local tier"
ctl n2 --json stats | grep -q '"shared_copies": *[1-9]' || fail "n2 counts no shared copy"

fi
if case_ "2. n2 over its 4 MiB shared quota evicts only its own files"; then
for i in 1 2 3 4 5 6; do ctl n2 put "q$i" "$work/c$i.bin" > /dev/null || fail "n2: put q$i"; done
owned=$(find "$(mnt 1)/kvstream/.nodes/n2" -name '*.kvc' | wc -l)
[[ $owned -lt 6 && $owned -ge 1 ]] || fail "n2 owns $owned files on the shared tier (quota 4 MiB, 6 chunks of 1.1-1.6 MB)"
used=$(tier_json n2 pfs used_bytes)
[ "$used" -le $((4 << 20)) ] || fail "n2 uses $used bytes of its 4 MiB shared quota"
ctl n2 --json tiers | grep -q '"evictions": *[1-9]' || fail "n2 counts no eviction"
until_ 3 absent n3 q1 || fail "n3 still finds q1, which n2 evicted"
got n3 q6 "$work/c6.bin" || fail "n3: q6 (n2's, within its quota)"
got n3 shared1 "$work/c1.bin" || fail "n3: shared1 (n1's) after n2's evictions"
[ -n "$(find "$(mnt 3)/kvstream/.nodes/n1" -name '*.kvc')" ] || fail "n1's files went"

fi
if case_ "3. the cluster key: the cluster serves no chunk of another key or none; another key serves none of its"; then
node other 3 1GiB "$work/other.key" 0
node nokey 3 1GiB "" 0
absent other shared1 || fail "other finds shared1 (published under the cluster key)"
! ctl other get shared1 "$work/out.bin" > /dev/null 2>&1 || fail "other serves shared1"
got nokey shared1 "$work/c1.bin" || fail "nokey: shared1"  # no key: it authenticates nothing, serves as is
ctl other put foreign1 "$work/c2.bin" > /dev/null || fail "other: put foreign1"
ctl nokey put foreign2 "$work/c3.bin" > /dev/null || fail "nokey: put foreign2"
for o in other nokey; do
  [ -n "$(find "$(mnt 1)/kvstream/.nodes/$o" -name '*.kvc')" ] || fail "$o's chunk is not on n1's mount"
done
for n in n1 n2; do
  for k in foreign1 foreign2; do
    absent "$n" "$k" || fail "$n finds $k (not under the cluster key)"
    ! ctl "$n" get "$k" "$work/out.bin" > /dev/null 2>&1 || fail "$n serves $k"
  done
done
kvstreamd_stop "${pid[other]}"
kvstreamd_stop "${pid[nokey]}"

fi
# A node with the shared tier only (no local copy to fall back on), on n2's mount.
reader() { [ -n "${pid[reader]:-}" ] || node reader 2 1GiB "$work/cluster.key" 0; }

# Steps on n1 read the shared tier only (routing static:0: no block on the local tier, the first),
# so that a fault on it lands in the middle of reads; a failed read is still taken over by local.
ctl n1 policy --routing static:0 > /dev/null
stall() {  # kvtorture stall on n1: 32 x 4 MiB, HOOK 30 ms into the step
  "$torture" stall --socket "$work/n1.sock" --chunks 32 --chunk-size 4194304 --hook "$1" --hook-after-ms 30 \
    --step-limit "$2" --persist-limit "$2"
}
pfs_errors() { tier_json n1 pfs read_errors; }

if case_ "4. a brick killed in the middle of a step: the step is intact, no read failed"; then
errors=$(pfs_errors) pfs_read=$(tier_json n1 pfs bytes_read)
brick=$(glusterfs_brick_pid 1)
[ -n "$brick" ] || fail "no pid for brick 1"
out=$(stall "kill -9 $brick" 10) || fail "the step with a brick killed: $out"
echo "$out"
[ -z "$(glusterfs_brick_pid 1)" ] || fail "brick 1 still running"
[ "$(pfs_errors)" = "$errors" ] || fail "reads failed on the shared tier: $errors -> $(pfs_errors)"
read_mib=$((($(tier_json n1 pfs bytes_read) - pfs_read) >> 20))
[ "$read_mib" -ge 64 ] || fail "the step read $read_mib MiB from pfs (of 128)"
# start force restarts the bricks glusterd sees dead: not yet while the killed one is a zombie.
brick_back() { glusterfs_volume start-force && [ -n "$(glusterfs_brick_pid 1)" ]; }
until_ 20 brick_back || fail "brick 1 did not start again"

fi
if case_ "5. the volume stopped in the middle of a step: served from local, the tier unusable, then back"; then
out=$(stall "gluster --mode=script volume stop $vol force > /dev/null" 10) || fail "the step with the volume stopping: $out"
echo "$out"
until_ 5 health_says n1 "tier pfs cannot be used" ||
  fail "n1's health does not name pfs with the volume stopped: $(ctl n1 health)"
{ ctl n1 health || true; } | sed 's/^/  /'
metric n1 'kvstream_tier_usable{tier="pfs"}' | grep -q ' 0$' || fail "metrics: pfs usable: $(metric n1 kvstream_tier_usable)"
got n1 shared1 "$work/c1.bin" || fail "n1: shared1 (on local) with the volume stopped"
glusterfs_volume start
for n in n1 n2 n3; do until_ 20 healthy "$n" || fail "$n: not healthy 20 s after the volume started: $(ctl "$n" health)"; done
metric n1 'kvstream_tier_usable{tier="pfs"}' | grep -q ' 1$' || fail "metrics: pfs not usable again"
ctl n1 put after5 "$work/c3.bin" | grep -q "written to tier mask 0x3" || fail "n1: put after5 not on both tiers"
until_ 3 present n3 after5 || fail "n3 does not find after5"
got n3 after5 "$work/c3.bin" || fail "n3: after5"
fi
ctl n1 policy --routing completion > /dev/null

# The shared tier's file-system calls (its condition check's fstat/fstatvfs, opens, first-page
# reads, publish) run off the I/O loop (io/blocking_call_thread.h): before, the first one on the
# frozen mount held the whole loop, every tier's reads and every persist, for the whole freeze.
if case_ "9. every brick frozen (SIGSTOP) in the middle of a step: the tier stalls, the step is served"; then
read -r -a frozen <<< "$(glusterfs_brick_pid 1) $(glusterfs_brick_pid 2) $(glusterfs_brick_pid 3)"
# The frozen bricks hold the reads until they answer (network.ping-timeout: 42 s): the deadlines
# take the step over to the local tier, health names pfs stalled.
out=$("$torture" stall --socket "$work/n1.sock" --chunks 32 --chunk-size 4194304 --hook "kill -STOP ${frozen[*]}" \
  --hook-after-ms 30 --undo "kill -CONT ${frozen[*]}" --expect-stalled pfs --step-limit 5 --health-limit 5 \
  --persist-limit 5) || { kill -CONT "${frozen[@]}"; fail "the step with the bricks frozen: $out"; }
echo "$out"
kill -CONT "${frozen[@]}"
for n in n1 n2 n3; do until_ 20 healthy "$n" || fail "$n: not healthy 20 s after the bricks went on: $(ctl "$n" health)"; done
ctl n1 put after9 "$work/c4.bin" | grep -q "written to tier mask 0x3" || fail "n1: put after9 not on both tiers"
until_ 3 present n2 after9 || fail "n2 does not find after9"
got n2 after9 "$work/c4.bin" || fail "n2: after9"
fi
if case_ "6. n3's mount goes ENOTCONN: unusable in health and metrics, usable again after a remount"; then
old_dev=$(stat -c %d "$(mnt 3)")
kill -9 "$(glusterfs_client_pid "$(mnt 3)")"
until_ 5 health_says n3 "tier pfs cannot be used" ||
  fail "n3's health does not say pfs cannot be used: $(ctl n3 health)"
{ ctl n3 health || true; } | sed 's/^/  /'
metric n3 'kvstream_tier_usable{tier="pfs"}' | grep -q ' 0$' || fail "metrics: n3's pfs usable"
metric n3 'kvstream_healthy' | grep -q ' 0$' || fail "metrics: n3 healthy: $(metric n3 kvstream_healthy)"
got n3 shared1 "$work/c1.bin" || fail "n3: shared1 (its local copy)"
ctl n3 put during6 "$work/c4.bin" | grep -q "written to tier mask 0x1,.*; replicas lost on tier mask 0x2" ||
  fail "n3: put during6 does not report the lost pfs replica"
[ "$(tier_json n3 pfs readable)" = False ] || fail "n3 reads pfs with its mount gone"
health_says n3 "deleted" && fail "n3's health calls an unreachable mount deleted: $(ctl n3 health)"
glusterfs_umount "$(mnt 3)"
# Another mount meanwhile takes the device number the old one freed, as on any busy node: the
# remounted directory is the same (its inode number, GlusterFS's gfid) on another device.
glusterfs_mount "$work/mnt/spare"
glusterfs_mount "$(mnt 3)"
[ "$(stat -c %i "$(mnt 3)/kvstream")" = "$(stat -c %i "$(mnt 1)/kvstream")" ] || fail "the remount has other inode numbers"
echo "remounted on device $(stat -c %d "$(mnt 3)") (before: $old_dev, the spare: $(stat -c %d "$work/mnt/spare"))"
until_ 10 healthy n3 || fail "n3 not healthy 10 s after the remount: $(ctl n3 health)"
metric n3 'kvstream_tier_usable{tier="pfs"}' | grep -q ' 1$' || fail "metrics: n3's pfs not usable after the remount"
ctl n3 put after6 "$work/c5.bin" | grep -q "written to tier mask 0x3" || fail "n3: put after6 not on both tiers"
until_ 3 present n1 after6 || fail "n1 does not find after6"
got n1 after6 "$work/c5.bin" || fail "n1: after6"

fi
if case_ "7. n1 rewrites a key while a shared-only node reads it: never wrong bytes"; then
reader
ctl n1 put race "$work/c1.bin" > /dev/null
(
  end=$((SECONDS + 5)) v=1
  while [ "$SECONDS" -lt "$end" ]; do
    v=$((3 - v))
    ctl n1 put race "$work/c$v.bin" > /dev/null || exit 1
  done
) &
writer=$!
served=0 missed=0
end=$((SECONDS + 5))
while [ "$SECONDS" -lt "$end" ]; do
  if ctl reader get race "$work/race.bin" > /dev/null 2>&1; then
    cmp -s "$work/race.bin" "$work/c1.bin" || cmp -s "$work/race.bin" "$work/c2.bin" || fail "reader: wrong bytes for race"
    served=$((served + 1))
  else  # a miss, or a failure: the stats below tell
    missed=$((missed + 1))
  fi
done
wait "$writer" || fail "n1: a rewrite of race failed"
writer=""
echo "reader: $served gets byte-identical to a version, $missed misses"
[ "$served" -gt 0 ] || fail "reader never got race"
ctl reader --json stats | grep -q '"retrieve_failures": *0,' || fail "reader: failed retrieves: $(ctl reader --json stats)"

fi
if case_ "8. ESTALE: a name replaced under the reader's cached entry is a miss or the new version"; then
reader
# The reader's failed first-page reads, to see GlusterFS answer ESTALE (strace attached, and
# detached again at the end).
strace -f -p "${pid[reader]}" -e trace=pread64 -e status=failed -o "$work/reader.strace" 2> "$work/strace.err" &
tracer=$!
attached() { grep -q "attached" "$work/strace.err" 2> /dev/null; }
until_ 5 attached || fail "strace did not attach to the reader: $(cat "$work/strace.err")"
stale=0
for i in $(seq 10); do
  ctl n1 put "stale$i" "$work/c1.bin" > /dev/null
  until_ 3 present reader "stale$i" || fail "reader does not find stale$i"
  ctl n1 put "stale$i" "$work/c2.bin" > /dev/null  # a new file under the name the reader just opened
  if ctl reader get "stale$i" "$work/out.bin" > /dev/null 2>&1; then
    cmp -s "$work/out.bin" "$work/c2.bin" || cmp -s "$work/out.bin" "$work/c1.bin" || fail "reader: wrong bytes for stale$i"
  else  # a miss, or a failure: the stats below tell
    stale=$((stale + 1))
  fi
done
kill -INT "$tracer"
wait "$tracer" || true
tracer=""
estale=$(grep -c "pread64.*ESTALE" "$work/reader.strace" || true)
echo "reader: $stale of 10 replaced names missed; $estale first-page reads answered ESTALE"
[ "$estale" -gt 0 ] || fail "GlusterFS answered no read ESTALE: the case did not happen"
ctl reader --json stats | grep -q '"retrieve_failures": *0,' || fail "reader: failed retrieves: $(ctl reader --json stats)"
[ "$(tier_json reader pfs read_errors)" = 0 ] || fail "reader: read errors counted against pfs"
fi
echo "GlusterFS: the cases passed in $((SECONDS - started)) s"
