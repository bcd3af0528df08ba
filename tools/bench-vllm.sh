#!/usr/bin/env bash
# vLLM's own multi-tier offloading (TieringOffloadingManager, driven as vLLM's scheduler drives it,
# on CPU) with vLLM's `fs` tier on the fast tier, on the slow tier, and the kvstream tier
# (kvstream.vllm_tier) over both, on two emulated tiers (tools/tierlab: loop devices, O_DIRECT, blkio
# read caps of FAST and SLOW MB/s): same requests, same chunks (tools/bench/bench_vllm.py); then
# kvbench on the same daemon, tiers and step shape. Prints MB/s, the ratio of the kvstream tier to
# the better fs configuration and to kvbench's completion run, Python CPU per GB and the bytes
# copied in Python. Needs root, a build (kvstreamd, kvbench) and the Python environment
# (deploy/python-env.sh). With --gbs the GB/s regime: tier images on tmpfs (BENCH_DIR default
# /dev/shm/kvstream-bench-vllm), caps 2000/700 MB/s, 4 steps.
# Usage: sudo tools/bench-vllm.sh [--gbs] [--fast MBPS] [--slow MBPS] [--steps N] [--requests R]
#          [--chunks C] [--passes P] [--out DIR]
# (R requests of C chunks of 8 MiB per step; default 4 x 8; P read passes per backend, default 3)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fast="" slow="" steps="" requests=4 chunks=8 passes=3 gbs="" out=/var/tmp/kvstream-bench-results
parse_options '
  --gbs       gbs=1
  --fast      fast
  --slow      slow
  --steps     steps
  --requests  requests
  --chunks    chunks
  --passes    passes
  --out       out
' "$@"
if [ -n "$gbs" ]; then
  fast=${fast:-2000} slow=${slow:-700} steps=${steps:-4}
  work="${BENCH_DIR:-/dev/shm/kvstream-bench-vllm}"
else
  fast=${fast:-300} slow=${slow:-150} steps=${steps:-6}
  work="${BENCH_DIR:-/var/tmp/kvstream-bench}"
fi
source "$root/tools/lib/bench-tiers.sh"
bench_up 7GiB "$out/kvstreamd-vllm.log"
python="$("$root/deploy/python-env.sh")"
"$python" -c "import vllm.v1.kv_offload.tiering.spec" 2> /dev/null || die "vLLM's tiering is not in $python's environment"
shape="${requests}x${chunks}"
echo "== kvbench: the same step shape (1 rank, $requests requests x $chunks chunks x 8 MiB), tiers alone and completion"
"$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "$sock" --ranks 1 --steps "$steps" --requests "$requests" \
  --chunks "$chunks" --hit-ratio 1 --chunk-size 8MiB --policies completion --write-policies "" \
  --json "$out/vllm-kvbench-$shape.json"
echo
echo "== vLLM TieringOffloadingManager: fs tier on t0, on t1, and the kvstream tier on t0+t1"
"$tierlab" run --dir "$work" -- "$python" "$root/tools/bench/bench_vllm.py" --socket "$sock" \
  --t0-dir "$work/mnt/t0/vllm-fs" --t1-dir "$work/mnt/t1/vllm-fs" --steps "$steps" --requests "$requests" \
  --chunks "$chunks" --chunk-mib 8 --passes "$passes" --kvbench "$out/vllm-kvbench-$shape.json" \
  --json "$out/vllm-$shape${gbs:+-gbs}.json"
