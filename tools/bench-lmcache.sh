#!/usr/bin/env bash
# LMCache's own LocalDiskBackend on the fast tier versus the kvstream plugin on both tiers, through
# LMCache's StorageManager on two emulated tiers (tools/tierlab: loop devices, O_DIRECT, blkio read
# caps of FAST and SLOW MB/s), same keys, chunk sizes and steps; then kvbench on the same daemon
# and steps for the tiers' alone bandwidths, the bound ratio (b0+b1)/b0 and the plugin's overhead;
# then LMCache's multi-process L2 layer: its fs adapter on the fast tier versus the kvstream L2
# adapter on the same daemon (tools/bench/bench_lmcache_l2.py: same keys, same load batches).
# Needs root, a build (kvstreamd, kvbench) and the Python environment (deploy/python-env.sh).
# With --gbs the GB/s regime: tier images on tmpfs (BENCH_DIR default /dev/shm/kvstream-bench-lmcache),
# caps 2000/700 MB/s, 12 steps (3 GiB per mode) and L2 passes of 256 chunks (2 GiB): shorter passes
# last a few blkio throttle slices, and then read above the caps by chance.
# Usage: sudo tools/bench-lmcache.sh [--gbs] [--fast MBPS] [--slow MBPS] [--steps N] [--requests R]
#          [--chunks C] [--mp-chunks M] [--out DIR]
# (R requests of C chunks of 8 MiB per step; default 4 x 8; the L2 passes read M chunks, default R x C;
# LMCACHE_BENCH_PROFILE=PATH writes a cProfile of each mode's timed reads to PATH.<mode>)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fast="" slow="" steps="" requests=4 chunks=8 mp_chunks="" gbs="" out=/var/tmp/kvstream-bench-results
parse_options '
  --gbs        gbs=1
  --fast       fast
  --slow       slow
  --steps      steps
  --requests   requests
  --chunks     chunks
  --mp-chunks  mp_chunks
  --out        out
' "$@"
if [ -n "$gbs" ]; then
  fast=${fast:-2000} slow=${slow:-700} steps=${steps:-12} mp_chunks=${mp_chunks:-256}
  work="${BENCH_DIR:-/dev/shm/kvstream-bench-lmcache}"
else
  fast=${fast:-300} slow=${slow:-150} steps=${steps:-6}
  work="${BENCH_DIR:-/var/tmp/kvstream-bench}"
fi
source "$root/tools/lib/bench-tiers.sh"
mp_chunks=${mp_chunks:-$((requests * chunks))}
bench_up 5GiB "$out/kvstreamd-lmcache.log"
python="$("$root/deploy/python-env.sh")"
echo "== kvbench: the same step shape (1 rank, $requests requests x $chunks chunks x 8 MiB), tiers alone and completion"
"$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "$sock" --ranks 1 --steps "$steps" --requests "$requests" \
  --chunks "$chunks" --hit-ratio 1 --chunk-size 8MiB --policies completion,serial --write-policies "" \
  --json "$out/lmcache-kvbench-${requests}x${chunks}.json"
echo
echo "== LMCache StorageManager: LocalDiskBackend on t0 (O_DIRECT) vs the kvstream plugin on t0+t1"
"$tierlab" run --dir "$work" -- "$python" "$root/tools/bench/lmcache_bench.py" --socket "$sock" \
  --disk-dir "$work/mnt/t0/lmcache-disk" --steps "$steps" --requests "$requests" --chunks "$chunks" --chunk-mib 8 \
  --kvbench "$out/lmcache-kvbench-${requests}x${chunks}.json" --json "$out/lmcache-${requests}x${chunks}.json" \
  ${LMCACHE_BENCH_PROFILE:+--profile "$LMCACHE_BENCH_PROFILE"}
echo
echo "== LMCache multi-process L2: the fs adapter on t0 vs the kvstream L2 adapter on t0+t1 ($mp_chunks chunks of 8 MiB, loads of $chunks, $requests at once)"
"$tierlab" run --dir "$work" -- "$python" "$root/tools/bench/bench_lmcache_l2.py" --daemon-socket "$sock" \
  --fs-dir "$work/mnt/t0/lmcache-mp-fs" --chunks "$mp_chunks" --chunk-mib 8 --batch "$chunks" \
  --concurrent "$requests" --passes 3
