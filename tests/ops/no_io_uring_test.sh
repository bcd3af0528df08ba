#!/usr/bin/env bash
# kvstreamd where io_uring is denied (a seccomp filter as Docker's default profile has, through
# tests/support/deny_io_uring): with io_engine auto it starts, says at start that its tiers use the
# thread engine (and its stats say so), serves put/get byte-identical through both tiers, and stops on SIGTERM; with
# io_engine io_uring it refuses to start with the reason.
# Usage: no_io_uring_test.sh KVSTREAMD KVSTREAMCTL DENY_IO_URING
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
daemon=$1 ctl=$2 deny=$3
work=$(test_work_dir kvstream-no-io-uring)
pid=""
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
config() {  # ENGINE
  cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $work/kvstreamd.sock, mode: "0600"}
logging: {level: info}
io_engine: $1
tiers:
  - {name: t0, path: $work/t0, capacity: 1GiB}
  - {name: t1, path: $work/t1, capacity: 1GiB}
YAML
}

config io_uring
if "$deny" "$daemon" --config "$work/kvstreamd.yaml" 2> "$work/refused.log"; then
  die "io_engine io_uring started without io_uring"
fi
grep -q "io_uring_queue_init" "$work/refused.log" || die "the refusal does not say why: $(cat "$work/refused.log")"

config auto
"$deny" "$daemon" --config "$work/kvstreamd.yaml" 2> "$work/kvstreamd.log" &
pid=$!
wait_socket "$work/kvstreamd.sock" || die "kvstreamd did not start: $(cat "$work/kvstreamd.log")"
for t in t0 t1; do
  grep -q "tier $t .*I/O engine threads" "$work/kvstreamd.log" || die "tier $t does not say it uses threads"
done
head -c $((3 << 20)) /dev/urandom > "$work/in"
"$ctl" --socket "$work/kvstreamd.sock" put chunk-a "$work/in" > /dev/null
"$ctl" --socket "$work/kvstreamd.sock" get chunk-a "$work/out" > /dev/null
cmp "$work/in" "$work/out" || die "get returned other bytes than put"
"$ctl" --socket "$work/kvstreamd.sock" --json tiers | python3 -c '
import json, sys
tiers = json.load(sys.stdin)
assert all(t["io_engine"] == "threads" for t in tiers), tiers
assert all(t["replicas_written"] >= 1 for t in tiers), tiers
assert not any(t["fixed_buffers"] for t in tiers), tiers
'
kill -TERM "$pid"
wait "$pid" || die "kvstreamd exited with $? on SIGTERM"
pid=""
echo "no io_uring: the daemon ran on the thread engine, put/get byte-identical on both tiers, stopped cleanly"
