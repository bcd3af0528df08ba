#!/usr/bin/env bash
# LMCache's own LocalDiskBackend on the fast tier versus the kvstream plugin on both tiers, through
# LMCache's StorageManager on two emulated tiers (tools/tierlab: loop devices, O_DIRECT, blkio read
# caps of FAST and SLOW MB/s), same keys, chunk sizes and steps; then kvbench on the same daemon
# and steps for the tiers' alone bandwidths, the bound ratio (b0+b1)/b0 and the plugin's overhead;
# then LMCache's multi-process L2 layer: its fs adapter on the fast tier versus the kvstream L2
# adapter on the same daemon (tools/bench_lmcache_l2.py: same keys, same load batches).
# Needs root, a build (kvstreamd, kvbench) and the Python environment (deploy/python-env.sh).
# Usage: sudo tools/bench-lmcache.sh [--fast MBPS] [--slow MBPS] [--steps N] [--requests R] [--chunks C] [--out DIR]
# (R requests of C chunks of 8 MiB per step; default 4 x 8)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fast=300 slow=150 steps=6 requests=4 chunks=8 out=/var/tmp/kvstream-bench-results
while [ $# -gt 0 ]; do
  case $1 in
    --fast) fast=$2; shift 2 ;;
    --slow) slow=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --chunks) chunks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "bench-lmcache: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
build="${BUILD_DIR:-$root/build}"
work="${BENCH_DIR:-/var/tmp/kvstream-bench}"
source "$root/tools/bench-tiers.sh"
bench_up bench-lmcache 3GiB "$out/kvstreamd-lmcache.log"
python="$("$root/deploy/python-env.sh")"
echo "== kvbench: the same step shape (1 rank, $requests requests x $chunks chunks x 8 MiB), tiers alone and completion"
"$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "$sock" --ranks 1 --steps "$steps" --requests "$requests" \
  --chunks "$chunks" --hit-ratio 1 --chunk-size 8MiB --policies completion,serial --write-policies "" \
  --json "$out/lmcache-kvbench-${requests}x${chunks}.json"
echo
echo "== LMCache StorageManager: LocalDiskBackend on t0 (O_DIRECT) vs the kvstream plugin on t0+t1"
"$tierlab" run --dir "$work" -- "$python" "$root/tools/lmcache_bench.py" --socket "$sock" \
  --disk-dir "$work/mnt/t0/lmcache-disk" --steps "$steps" --requests "$requests" --chunks "$chunks" --chunk-mib 8 \
  --kvbench "$out/lmcache-kvbench-${requests}x${chunks}.json" --json "$out/lmcache-${requests}x${chunks}.json"
echo
echo "== LMCache multi-process L2: the fs adapter on t0 vs the kvstream L2 adapter on t0+t1 ($((requests * chunks)) chunks of 8 MiB, loads of $chunks, $requests at once)"
"$tierlab" run --dir "$work" -- "$python" "$root/tools/bench_lmcache_l2.py" --daemon-socket "$sock" \
  --fs-dir "$work/mnt/t0/lmcache-mp-fs" --chunks $((requests * chunks)) --chunk-mib 8 --batch "$chunks" \
  --concurrent "$requests" --passes 3
