#!/usr/bin/env bash
# SGLang's HiCache storage: HiCacheFile (SGLang's file backend) on the fast tier versus the kvstream
# backend (kvstream.sglang, zero copy into SGLang's shared-memory host pool) on both tiers, same pages
# and batches, on two emulated tiers (tools/tierlab: loop devices, O_DIRECT, blkio read caps of FAST
# and SLOW MB/s); then kvbench on the same daemon with the same piece size and batches for the tiers'
# alone bandwidths and the bound ratio (b0+b1)/b0. Pages as SGLang sizes them for a 32B-class model
# at TP 1 (64 layers x 8 KV heads x 128 dims, bf16, 64 tokens: 16 MiB, stored as 8 MiB K and V).
# With --gbs the tier images go on tmpfs (BENCH_DIR default /dev/shm/kvstream-bench-sglang), the
# caps default to 2000/700 MB/s and the pages to 128 (2 GiB a pass: shorter passes last a few blkio
# throttle slices and read above the caps by chance). Each backend: the median of 3 passes. Needs root, a build (kvstreamd, kvbench) and the SGLang environment
# (deploy/python-env.sh --sglang).
# Usage: sudo tools/bench-sglang.sh [--gbs] [--fast MBPS] [--slow MBPS] [--pages N] [--batch B] [--out DIR]
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fast="" slow="" pages="" batch=16 out=/var/tmp/kvstream-bench-results gbs=""
parse_options '
  --gbs    gbs=1
  --fast   fast
  --slow   slow
  --pages  pages
  --batch  batch
  --out    out
' "$@"
if [ -n "$gbs" ]; then
  fast=${fast:-2000} slow=${slow:-700} pages=${pages:-128} work="${BENCH_DIR:-/dev/shm/kvstream-bench-sglang}"
else
  fast=${fast:-300} slow=${slow:-150} pages=${pages:-48} work="${BENCH_DIR:-/var/tmp/kvstream-bench}"
fi
source "$root/tools/lib/bench-tiers.sh"
bench_up 7GiB "$out/kvstreamd-sglang.log"
python="$("$root/deploy/python-env.sh" --sglang)"
name="sglang-$fast-$slow"
echo "== kvbench: the same batches (1 rank, $((batch * 2)) pieces of 8 MiB a step, a step per batch), tiers alone and completion"
"$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "$sock" --ranks 1 --steps $(( (pages + batch - 1) / batch )) --requests 1 \
  --chunks $((batch * 2)) --hit-ratio 1 --chunk-size 8MiB --policies completion --write-policies "" \
  --json "$out/$name-kvbench.json"
echo
echo "== SGLang HiCache: HiCacheFile on t0 vs kvstream on t0+t1 (reads $fast/$slow MB/s)"
mkdir -p "$work/mnt/t0/hicache-file"
"$tierlab" run --dir "$work" -- "$python" "$root/tools/bench/bench_sglang.py" --socket "$sock" \
  --file-dir "$work/mnt/t0/hicache-file" --pages "$pages" --batch "$batch" --kvbench "$out/$name-kvbench.json" \
  --json "$out/$name.json"
echo "bench-sglang: bound ratio (b0+b1)/b0 from the caps: $(awk "BEGIN {printf \"%.3f\", ($fast + $slow) / $fast}")"
echo "bench-sglang: results in $out ($name*.json)"
