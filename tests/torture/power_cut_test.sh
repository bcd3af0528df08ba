#!/usr/bin/env bash
# Power cuts under load (kvtorture crash with a cut command) against a real kvstreamd whose tiers
# are on kvfaultfs --power-cut (their directories made by the daemon at its first start), once per
# fsync policy and tier layout: two plain tiers, and one shared tier (shared: true, its chunks
# in the node's own directory and published by a link). Each cycle persists and reads under
# load, SIGKILLs the daemon, cuts the power (every byte not fdatasync'ed and every create, rename
# and unlink whose directory was not fsynced is dropped from the backing directory; every other
# cut also tears the last unsynced write at 4 KiB blocks), brings it back and restarts the daemon,
# then reads every key of the ledger:
#   - never a bad byte: every chunk served is an intact version of its key;
#   - fsync: chunk: every version acknowledged durable is served (or a newer one);
#   - fsync: none: every version acknowledged before the last sync point (a `sync` of kvfaultfs,
#     as sync(2), every 0.2 s) is served; those acknowledged since may be lost (counted as rolled
#     back; that is the bound).
# Usage: power_cut_test.sh KVSTREAMD KVTORTURE KVFAULTFS [--cuts N] [--policy none|chunk|all]
#                          [--layout plain|shared|all]
#   --cuts N   cuts per fsync policy and layout (default 3, or KVSTREAM_TORTURE_CYCLES; 200 by hand)
# Exit 77: skipped (no FUSE here).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
daemon=$1 torture=$2 faultfs=$3
shift 3
cuts=${KVSTREAM_TORTURE_CYCLES:-3} policies="chunk none" layouts="plain shared"
while [ $# -gt 0 ]; do
  case $1 in
    --cuts) cuts=$2; shift 2 ;;
    --policy) [ "$2" = all ] && policies="chunk none" || policies=$2; shift 2 ;;
    --layout) [ "$2" = all ] && layouts="plain shared" || layouts=$2; shift 2 ;;
    *) echo "power_cut_test.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$faultfs" ] || skip "kvfaultfs not built (libfuse3-dev missing)"
if [ ! -c /dev/fuse ] || ! command -v fusermount3 > /dev/null; then skip "no /dev/fuse or fusermount3"; fi
work=$(mktemp -d /var/tmp/kvstream-powercut-XXXXXX)
fspid=""
unmount() {
  if [ -n "$fspid" ]; then
    fusermount3 -u "$work/mnt" 2>/dev/null || true
    wait "$fspid" || true
  fi
  fspid=""
}
cleanup() {
  set +e
  unmount
  rm -rf "$work"
}
trap cleanup EXIT
seed=${KVSTREAM_TORTURE_SEED:-$RANDOM}
for layout in $layouts; do
for policy in $policies; do
  unmount
  rm -rf "${work:?}/back" "${work:?}/mnt"
  mkdir -p "$work/back" "$work/mnt"  # the daemon makes its tier directories
  : > "$work/rules"
  "$faultfs" --backing="$work/back" --rules="$work/rules" --power-cut "$work/mnt" -f 2> "$work/faultfs.log" &
  fspid=$!
  for _ in $(seq 100); do mountpoint -q "$work/mnt" && break; sleep 0.05; done
  mountpoint -q "$work/mnt" || { cat "$work/faultfs.log"; skip "kvfaultfs could not mount"; }
  power=$work/mnt/.kvfaultfs-power
  if [ "$layout" = shared ]; then
    tiers="node: n0
tiers:
  - {name: pfs, path: $work/mnt/pfs, capacity: 2GiB, shared: true}"
  else
    tiers="tiers:
  - {name: t0, path: $work/mnt/t0, capacity: 2GiB}
  - {name: t1, path: $work/mnt/t1, capacity: 2GiB}"
  fi
  cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $work/kvstreamd.sock, mode: "0600"}
sessions: {max_arena: 64MiB}
logging: {level: warn}
policies: {writes: immediate, fsync: $policy}
$tiers
YAML
  sync_options=()
  [ "$policy" = none ] && sync_options=(--sync-command "echo sync > $power" --sync-seconds 0.2 --synced-floor)
  : > "$work/kvstreamd.log"
  start=$(date +%s)
  # shellcheck disable=SC2016  # KVTORTURE_SEED is kvtorture's, expanded when it runs the command
  "$torture" crash --daemon "$daemon" --config "$work/kvstreamd.yaml" --socket "$work/kvstreamd.sock" \
    --log "$work/kvstreamd.log" --cycles "$cuts" --seed "$seed" --min-seconds 0.2 --max-seconds 0.8 \
    --cut-command 'if [ $((KVTORTURE_SEED % 2)) = 1 ]; then echo "cut tear $KVTORTURE_SEED"; else echo cut; fi > '"$power" \
    --power-on-command "echo on > $power" "${sync_options[@]}" \
    | tee "$work/torture.out" | tail -1 \
    || { echo "FAILED: $layout tiers, fsync: $policy (seed $seed)"; tail -20 "$work/kvstreamd.log"; cat "$work/faultfs.log"; exit 1; }
  grep -q "^restore_errors 0$" "$power" || { echo "FAILED: kvfaultfs could not undo a change"; cat "$power"; exit 1; }
  echo "$layout tiers, fsync: $policy: $cuts power cuts in $(( $(date +%s) - start )) s (seed $seed)"
done
done
