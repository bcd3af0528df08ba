#!/usr/bin/env bash
# bench-depth: queue_depth auto against the fixed default on a tier whose reads wait (a network
# file system's round trips), in one run (no root; needs the build with kvfaultfs, /dev/fuse; ~2 min).
#
#   tools/bench-depth.sh [--delay MS] [--rounds N] [--out DIR]
#
# The tier is a directory on kvfaultfs (tools/harness/kvfaultfs) that delays every read by
# --delay ms (default 4) and otherwise passes through to /var/tmp. kvstreamd reads it with
# `queue_depth: 2` (the fixed default, 2 MiB in flight), then with `queue_depth: auto`,
# alternated --rounds times (default 3), each a kvbench completion run of 16 steps (after a
# warm-up pass, which is when auto finds its depth). Prints MB/s, the depth auto settled on, and
# auto over fixed.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

delay=4 rounds=3 out=/var/tmp/kvstream-bench-results
parse_options '
  --delay   delay
  --rounds  rounds
  --out     out
' "$@"
faultfs="$build/tools/kvfaultfs"
need_built "$build/daemon/kvstreamd" "$build/tools/kvbench" "$build/tools/kvstreamctl" "$faultfs"
{ [ -c /dev/fuse ] && command -v fusermount3 > /dev/null; } || die "needs /dev/fuse and fusermount3"
mkdir -p "$out"
work=$(mktemp -d /var/tmp/kvstream-bench-depth-XXXXXX)
fs=""
down() {
  set +e
  kvstreamd_stop_all
  fusermount3 -u "$work/mnt" 2>/dev/null
  [ -n "$fs" ] && wait "$fs"
  rm -rf "$work"
}
trap down EXIT
mkdir "$work/back" "$work/mnt"
echo "read * delay $delay" > "$work/rules"
"$faultfs" --backing="$work/back" --rules="$work/rules" "$work/mnt" -f 2> "$work/kvfaultfs.log" &
fs=$!
for _ in $(seq 100); do mountpoint -q "$work/mnt" && break; sleep 0.05; done
mountpoint -q "$work/mnt" || { cat "$work/kvfaultfs.log"; die "kvfaultfs did not mount"; }
sock="$work/kvstreamd.sock"

run() {  # NAME DEPTH
  local name=$1 depth=$2
  cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $sock, mode: "0600"}
logging: {level: info}
tiers:
  - {name: t0, path: $work/mnt/kvstream, capacity: 4GiB, queue_depth: $depth}
YAML
  kvstreamd_start "$work/kvstreamd.yaml" "$out/depth-$name.log"
  "$build/tools/kvbench" --socket "$sock" --ranks 1 --steps 16 --requests 4 --chunks 8 --chunk-size 4MiB \
    --hit-ratio 1 --policies completion --write-policies "" --warm-up --json "$out/depth-$name.json" > "$out/depth-$name.kvbench.log" 2>&1 ||
    { cat "$out/depth-$name.kvbench.log"; die "kvbench failed"; }
  local now
  now=$("$build/tools/kvstreamctl" --socket "$sock" --json tiers | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["queue_depth"])')
  kvstreamd_stop
  python3 - "$out/depth-$name.json" "$name" "$now" <<'PY'
import json, sys
run = [r for r in json.load(open(sys.argv[1]))["runs"] if r["label"] == "completion"][0]
print("%-10s %8.1f MB/s   depth %s" % (sys.argv[2], run["throughput_bps"] / 1e6, sys.argv[3]))
PY
}

echo "== one tier on kvfaultfs, every read delayed $delay ms; 16 steps of 4 x 8 chunks x 4 MiB"
for r in $(seq "$rounds"); do
  run "fixed-$r" 2
  run "auto-$r" auto
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
def mbps(name):
    run = [r for r in json.load(open(f"{sys.argv[1]}/depth-{name}.json"))["runs"] if r["label"] == "completion"][0]
    return run["throughput_bps"] / 1e6
rounds = int(sys.argv[2])
fixed = [mbps(f"fixed-{r}") for r in range(1, rounds + 1)]
auto = [mbps(f"auto-{r}") for r in range(1, rounds + 1)]
print("medians: fixed 2 %.1f MB/s, auto %.1f MB/s: auto / fixed = %.2fx (each round: %s)" % (
    statistics.median(fixed), statistics.median(auto), statistics.median(auto) / statistics.median(fixed),
    " ".join("%.2f" % (a / f) for a, f in zip(auto, fixed))))
PY
echo "bench-depth: results in $out (depth-*.json, depth-*.log)"
