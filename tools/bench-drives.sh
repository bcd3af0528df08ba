#!/usr/bin/env bash
# bench-drives: one tier over several drives plus a PFS tier, against the bound and against the
# best a tier on one drive could do, in one run (needs root, the build, a quiet machine; ~1 min).
#
#   sudo tools/bench-drives.sh [--drive MB/s] [--pfs MB/s] [--steps N] [--out DIR]
#
# tools/tierlab makes five capped tiers on tmpfs-backed loop devices (d0..d3 at --drive MB/s each,
# default 250, and pfs at --pfs MB/s, default 500: 1.5 GB/s in all), then:
#   1. kvstreamd with `nvme` over the four drives + `pfs` (replication all): kvbench's completion
#      run, and fio reading all five directories at once (the bound's bandwidth, same run);
#   2. kvstreamd restarted on the same directories (each drive's saved index), the same steps
#      read again with d2 unmounted (pulled) before step 2: every step must succeed (its chunks
#      come from pfs), and `kvstreamctl health` must name drive nvme.2. The unmount is lazy, so
#      files the daemon holds open stay readable until its directory check notices the drive is
#      gone; the MiB read from nvme.2 per step shows when it stopped using it;
#   3. kvstreamd with `nvme` on d0 alone + the same pfs directory: the same steps under completion.
# Prints MB/s, completion / fio-all (the bound), four drives / one drive, and the capacity.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

drive=250 pfs=500 steps=6 out=/var/tmp/kvstream-bench-results
parse_options '
  --drive  drive
  --pfs    pfs
  --steps  steps
  --out    out
' "$@"
need_root "loop devices, mounts, cgroups"
need_built "$build/daemon/kvstreamd" "$build/tools/kvbench" "$build/tools/kvstreamctl"
work="${BENCH_DIR:-/dev/shm/kvstream-bench-drives}"
mkdir -p "$out"
sock="$work/kvstreamd.sock"
down() {
  set +e
  kvstreamd_stop_all
  "$tierlab" down --dir "$work" > /dev/null
}
trap down EXIT
"$tierlab" down --dir "$work" > /dev/null
"$tierlab" up --dir "$work" --tier "d0:3G:$drive" --tier "d1:3G:$drive" --tier "d2:3G:$drive" \
  --tier "d3:3G:$drive" --tier "pfs:6G:$pfs" > /dev/null

# start_daemon NAME NVME_TIER_YAML PFS_DIR: kvstreamd inside the capped cgroup.
start_daemon() {
  local name=$1 nvme=$2 pfs_dir=$3
  cat > "$work/$name.yaml" <<YAML
socket: {path: $sock, mode: "0600"}
sessions: {max_arena: 4GiB}
logging: {level: warn}
tiers:
  - $nvme
  - {name: pfs, path: $pfs_dir, capacity: 5GiB}
YAML
  kvstreamd_start "$work/$name.yaml" "$out/drives-$name.log" "$tierlab" run --dir "$work" --
}
drives_yaml() {  # NAME: the nvme tier over d0..d3, in directories NAME
  echo "{name: nvme, drives: [$work/mnt/d0/$1, $work/mnt/d1/$1, $work/mnt/d2/$1, $work/mnt/d3/$1], capacity: 10GiB}"
}
bench() {  # NAME [kvbench args]: completion on 2 ranks, 4 requests of 8 x 4 MiB chunks per rank per step
  local name=$1; shift
  "$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "$sock" --ranks 2 --steps "$steps" --requests 4 \
    --chunks 8 --hit-ratio 1 --chunk-size 4MiB --write-policies "" --no-alone --drain-probe 0 \
    --policies completion --json "$out/drives-$name.json" "$@"
}
mbps() {  # JSON LABEL: the run's MB/s
  python3 -c 'import json,sys; r=[r for r in json.load(open(sys.argv[1]))["runs"] if r["label"]==sys.argv[2]][0]
print("%.1f" % (r["throughput_bps"]/1e6))' "$1" "$2"
}

echo "== 1. nvme over four drives at $drive MB/s each + pfs at $pfs MB/s (tmpfs-backed loop devices)"
start_daemon four "$(drives_yaml four)" "$work/mnt/pfs/four"
all="$work/mnt/d0/four,$work/mnt/d1/four,$work/mnt/d2/four,$work/mnt/d3/four,$work/mnt/pfs/four"
bench four --warm-up --fio-all "$all"
capacity=$("$build/tools/kvstreamctl" --socket "$sock" --json tiers |
  python3 -c 'import json,sys; print(sum(t["capacity_bytes"] for t in json.load(sys.stdin) if t["group"]=="nvme"))')
kvstreamd_stop

echo
echo "== 2. the same directories after a restart (each drive's saved index), d2 pulled (unmounted) before step 2"
start_daemon four "$(drives_yaml four)" "$work/mnt/pfs/four"
status=0
# No warm-up here: steps 0 and 1 read d2; after the unmount, only until the daemon notices.
bench pulled --no-populate --step-hook "[ {step} != 2 ] || umount -l $work/mnt/d2" || status=$?
sleep 2  # the daemon looks at its tiers once a second
health=$("$build/tools/kvstreamctl" --socket "$sock" health 2>&1 || true)
kvstreamd_stop

echo
echo "== 3. nvme on one drive (d0) + the same pfs directory: the same steps"
start_daemon one "{name: nvme, path: $work/mnt/d0/one, capacity: 10GiB}" "$work/mnt/pfs/four"
bench one --warm-up
kvstreamd_stop

four=$(mbps "$out/drives-four.json" completion)
fio_all=$(python3 -c 'import json,sys; print("%.1f" % (json.load(open(sys.argv[1]))["fio_all_bps"]/1e6))' "$out/drives-four.json")
one=$(mbps "$out/drives-one.json" completion)
echo
echo "four drives + pfs, completion:  $four MB/s  (fio on all five at once: $fio_all MB/s)"
echo "one drive + pfs, completion:    $one MB/s"
python3 -c 'import sys; f,b,o=map(float,sys.argv[1:4]); print("completion / bound (fio all): %.3f   four drives / one drive: %.2fx" % (f/b, f/o))' \
  "$four" "$fio_all" "$one"
echo "nvme capacity: $capacity bytes (the drives' sum; configured 10 GiB = $((10 << 30)))"
echo "drive pulled mid-run: kvbench exit status $status (0: every step complete); MiB read per step from nvme.2:"
python3 -c 'import json,sys; r=[r for r in json.load(open(sys.argv[1]))["runs"] if r["label"]=="completion"][0]
print("  " + " ".join("%.0f" % (s["tier_bytes"][2] / 2**20) for s in r["steps"]))' "$out/drives-pulled.json"
echo "health says:"
echo "$health" | sed 's/^/  /'
echo "$health" | grep -q "nvme.2" || die "health does not name the pulled drive nvme.2"
[ "$status" = 0 ] || die "a step failed with a drive pulled"
echo
echo "bench-drives: results in $out (drives-*.json, drives-*.log)"
