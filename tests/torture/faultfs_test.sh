#!/usr/bin/env bash
# kvstreamd with its second tier on kvfaultfs (a FUSE file system that injects faults into a real
# tier, tools/harness/kvfaultfs), every read routed to that tier (static:0), so each fault is met:
#  - reads failing with EIO: every chunk still comes back intact from t0, the errors are counted;
#  - reads that hang (no answer until released): a get returns within seconds from t0, health names
#    t1 stalled, a persist meanwhile is not held; released, t1 answers again and health is OK;
#  - writes that hang (a FUSE write that extends a file is done where it is submitted): reads of
#    either tier go on within seconds, and so do persists' writes to t0 while t1 holds all the
#    writes it may have in flight; released, the persists are written to both tiers;
#  - writes failing with ENOSPC: the persist is written to t0 and says t1's replica was lost to
#    lack of space.
# Usage: faultfs_test.sh KVSTREAMD KVSTREAMCTL KVFAULTFS   (exit 77: skipped, no FUSE here)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
daemon=$1 ctl=$2 faultfs=$3
[ -x "$faultfs" ] || skip "kvfaultfs not built (libfuse3-dev missing)"
[ -c /dev/fuse ] && command -v fusermount3 > /dev/null || skip "no /dev/fuse or fusermount3"
work=$(mktemp -d /var/tmp/kvstream-faultfs-XXXXXX)
mkdir "$work/back" "$work/mnt" "$work/t0"
: > "$work/rules"
pid="" fspid=""
cleanup() {
  set +e
  : > "$work/rules"  # releases hung operations
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid"
  fusermount3 -u "$work/mnt" 2>/dev/null
  [ -n "$fspid" ] && wait "$fspid"
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*"; tail -20 "$work/kvstreamd.log"; exit 1; }
"$faultfs" --backing="$work/back" --rules="$work/rules" "$work/mnt" -f 2> "$work/faultfs.log" &
fspid=$!
for _ in $(seq 100); do mountpoint -q "$work/mnt" && break; sleep 0.05; done
mountpoint -q "$work/mnt" || { cat "$work/faultfs.log"; skip "kvfaultfs could not mount"; }
sock="$work/kvstreamd.sock"
cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $sock, mode: "0600"}
logging: {level: info}
tiers:
  - {name: t0, path: $work/t0, capacity: 1GiB}
  - {name: t1, path: $work/mnt/kvstream, capacity: 1GiB, write_queue_depth: 8}
YAML
"$daemon" --config "$work/kvstreamd.yaml" 2> "$work/kvstreamd.log" &
pid=$!
wait_socket "$sock" || fail "kvstreamd did not start on the FUSE tier"
ctl() { "$ctl" --socket "$sock" "$@"; }
rules() { printf '%s\n' "$@" > "$work/rules.new" && mv "$work/rules.new" "$work/rules"; }
timed() {  # COMMAND...: runs it (killed after 30 s), sets `took` to its seconds; fails as it does
  local start
  start=$(date +%s.%N)
  timeout 30 "$@" > /dev/null || return 1
  took=$(echo "$(date +%s.%N) - $start" | bc)
}
json_field() {  # TIER FIELD: a counter of `kvstreamctl --json tiers`
  ctl --json tiers | python3 -c "import json,sys; d=json.load(sys.stdin); d=d['tiers'] if isinstance(d, dict) else d; print([t for t in d if t['name']=='$1'][0]['$2'])"
}
for k in e0 e1 e2 e3 h0 h1; do
  head -c 2500000 /dev/urandom > "$work/$k.bin"
  grep -q "tier mask 0x3" <<< "$(ctl put "$k" "$work/$k.bin")" || fail "put $k not on both tiers"
done
ctl policy --routing static:0 > /dev/null  # share 0 on the first tier: every block asks t1 first

rules "read *.kvc eio"
for k in e0 e1 e2 e3; do
  ctl get "$k" "$work/$k.out" > /dev/null || fail "get $k with t1 failing reads"
  cmp -s "$work/$k.bin" "$work/$k.out" || fail "$k differs"
done
[ "$(json_field t1 read_errors)" -gt 0 ] || fail "t1's read errors not counted"
echo "eio: 4 chunks intact from t0 while t1 fails every read; $(json_field t1 read_errors) read errors counted on t1"

rules "read *.kvc hang"
timed "$ctl" --socket "$sock" get h0 "$work/h0.out" || fail "get h0 with t1 hanging"
cmp -s "$work/h0.bin" "$work/h0.out" || fail "h0 differs"
(( $(echo "$took < 5" | bc) )) || fail "get h0 took $took s with t1 hanging"
ctl health > "$work/health.txt" && fail "health OK while t1 hangs"
grep -q "t1" "$work/health.txt" || fail "health does not name t1: $(cat "$work/health.txt")"
head -c 4096 /dev/urandom > "$work/p.bin"
get_took=$took
timed "$ctl" --socket "$sock" put p "$work/p.bin" || fail "put p while t1 hangs"
(( $(echo "$took < 5" | bc) )) || fail "a persist waited $took s behind t1's hung reads"
echo "hang: get of 2.5 MB in $get_took s from t0, health names t1, a 4 KiB persist took $took s"
rules
for _ in $(seq 100); do ctl health > /dev/null && break; sleep 0.1; done
ctl health > /dev/null || fail "health not OK again after t1 was released: $(ctl health)"
ctl get h1 "$work/h1.out" > /dev/null && cmp -s "$work/h1.bin" "$work/h1.out" || fail "h1 after release"
echo "released: t1 answers again, health OK"

rules "write *.tmp* hang"
written=$(json_field t0 replicas_written)
written_t1=$(json_field t1 replicas_written)
put_pids=()
for k in w0 w1 w2 w3 w4 w5 w6 w7 w8 w9; do
  head -c 2500000 /dev/urandom > "$work/$k.bin"
  "$ctl" --socket "$sock" put "$k" "$work/$k.bin" > "$work/$k.put" 2>&1 &
  put_pids+=($!)
done
# t1 holds as many writes as it may have in flight, hung; t0's replicas are written meanwhile.
deadline=$(( $(date +%s) + 10 ))
while [ "$(json_field t0 replicas_written)" -lt $((written + 10)) ] && [ "$(date +%s)" -lt $deadline ]; do sleep 0.1; done
[ "$(json_field t0 replicas_written)" -ge $((written + 10)) ] ||
  fail "t0 wrote $(( $(json_field t0 replicas_written) - written )) of 10 replicas in 10 s while t1's writes hang"
timed "$ctl" --socket "$sock" get h1 "$work/h1.out" || fail "get h1 with t1's writes hanging"
cmp -s "$work/h1.bin" "$work/h1.out" || fail "h1 differs"
(( $(echo "$took < 5" | bc) )) || fail "a get (read from t1) waited $took s behind t1's hung write"
ctl policy --routing static:1 > /dev/null
timeout 30 "$ctl" --socket "$sock" get e1 "$work/e1.out" > /dev/null && cmp -s "$work/e1.bin" "$work/e1.out" ||
  fail "get e1 from t0 with t1's writes hanging"
ctl policy --routing static:0 > /dev/null
# The hang really held: no replica reached t1 and every put still waits for its t1 copy.
[ "$(json_field t1 replicas_written)" -eq "$written_t1" ] || fail "t1 wrote replicas while its writes hang"
for put_pid in "${put_pids[@]}"; do kill -0 "$put_pid" 2>/dev/null || fail "a put returned while its t1 write hangs"; done
echo "write hang: t0 wrote 10 replicas and a get of 2.5 MB from t1 took $took s while t1's writes hang"
rules
for i in $(seq 0 9); do
  wait "${put_pids[$i]}" || fail "put w$i after t1's writes were released: $(cat "$work/w$i.put")"
  grep -q "tier mask 0x3" "$work/w$i.put" || fail "w$i not written to both tiers after release: $(cat "$work/w$i.put")"
  ctl get "w$i" "$work/w$i.out" > /dev/null && cmp -s "$work/w$i.bin" "$work/w$i.out" || fail "w$i after release"
done
echo "released: w0-w9 written to both tiers"

rules "write *.tmp* enospc"
out=$(ctl put n0 "$work/e0.bin")
grep -q "written to tier mask 0x1, not synced: a power cut may lose it; replicas lost on tier mask 0x2" <<< "$out" || fail "ENOSPC on t1 not reported: $out"
grep -qi "no space" <<< "$out" || fail "the lost replica's reason is not 'no space': $out"
ctl get n0 "$work/n0.out" > /dev/null && cmp -s "$work/e0.bin" "$work/n0.out" || fail "n0 not served from t0"
echo "enospc: $out"
