#!/usr/bin/env bash
# bench-verdict-engines: the load-or-recompute verdict end to end through each engine's real lookup
# and load path on CPU (vLLM's TieringOffloadingManager with the kvstream tier, LMCache's MP L2
# adapter, SGLang's HiCache prefetch into its host pool), with a fake compute clock, against
# kvstreamd (its default configuration) on ONE disk-backed tierlab tier whose read cap steps through
# --caps (default 300,100,30,10 MB/s). Per engine (tools/bench/bench_verdict_engines.py): one
# request's prefix (16 chunks of 4 MiB, 256 tokens each) stored once through the engine; per cap,
# after 20 untimed loads of about 0.5 s each that let the daemon measure the tier at the new cap
# (its estimate is a moving average over steps; shorter steps ride the blkio throttle's burst),
# the TTFT of three modes (medians of --reps, each timed load after the same 0.3 s pause):
#   verdict        the engine's lookup picks h hits: measured lookup + load of h chunks, plus the
#                  predicted compute of the rest (after h cached);
#   load-all       the verdict off: measured lookup + load of every chunk;
#   recompute-all  the predicted compute of the whole prefix.
# The fake compute clock adds kvstream.recompute's prediction for the tokens computed (nothing
# sleeps): a small model shape (KV of 16 KiB a token) at a calibrated recompute_tokens_per_s that
# makes recomputing the prefix as long as loading it at --crossover MB/s (default 40), given to
# each engine as its own recompute settings.
# Checks per engine: TTFT(verdict) <= 1.05 x min(load-all, recompute-all) at every cap, and the hits
# never grow as the cap drops, all at the first cap, at most 2 at the last. Prints a table per
# engine; exit status 1 when a check fails. About 4.5 minutes on 2 cores.
#
# One tier, not two: the check is whether the verdict follows ONE tier's bandwidth as it drops; with
# a second tier the daemon's placement (replication, completion routing) would also decide what a
# load costs, and the cap of one tier would move the load time by less than the cap.
#
# Needs root (loop devices, blkio), a build (kvstreamd) and the Python environments: PYTHON (vLLM and
# LMCache; default: deploy/python-env.sh) and PYTHON_SGLANG (default: deploy/python-env.sh
# --sglang); PYTHONPATH (and PYTHONPATH_SGLANG for SGLang's, default PYTHONPATH) reaches the
# driver: a private install of the kvstream package, say.
# Usage: sudo tools/bench-verdict-engines.sh [--engines vllm,lmcache,sglang] [--caps LIST]
#          [--crossover MBPS] [--reps N] [--out DIR]
# (BENCH_DIR: the tierlab directory, default /var/tmp/kvstream-bench-verdict-engines)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
engines=vllm,lmcache,sglang caps=300,100,30,10 crossover=40 reps=3 out=/var/tmp/kvstream-bench-results/verdict-engines
parse_options '
  --engines    engines
  --caps       caps
  --crossover  crossover
  --reps       reps
  --out        out
' "$@"
[[ $caps =~ ^[0-9.]+(,[0-9.]+)*$ ]] || usage_error "--caps takes MB/s separated by commas"
[[ $reps =~ ^[1-9][0-9]*$ ]] || usage_error "--reps takes a positive number"
IFS=, read -ra engine_list <<< "$engines"
for e in "${engine_list[@]}"; do
  case $e in vllm|lmcache|sglang) ;; *) usage_error "unknown engine '$e' (vllm, lmcache, sglang)" ;; esac
done
need_root "loop devices, mounts, cgroups"
need_built "$build/daemon/kvstreamd"
work="${BENCH_DIR:-/var/tmp/kvstream-bench-verdict-engines}"
first_cap=${caps%%,*}
mkdir -p "$out"

down() {
  set +e
  kvstreamd_stop_all
  "$tierlab" down --dir "$work"
}
"$tierlab" down --dir "$work"
trap down EXIT
"$tierlab" up --dir "$work" --tier "t0:2G:$first_cap" > /dev/null
sock="$work/kvstreamd.sock"
# kvstreamd's defaults but for where it listens, logs and keeps its one tier.
cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $sock, mode: "0600"}
logging: {level: ${BENCH_LOG_LEVEL:-warn}}
tiers:
  - {name: t0, path: $work/mnt/t0/kvstream, capacity: 1GiB}
YAML
kvstreamd_start "$work/kvstreamd.yaml" "$out/kvstreamd.log" "$tierlab" run --dir "$work" --

failed=()
for e in "${engine_list[@]}"; do
  if [ "$e" = sglang ]; then
    python=${PYTHON_SGLANG:-$("$root/deploy/python-env.sh" --sglang)} path=${PYTHONPATH_SGLANG:-${PYTHONPATH:-}}
  else
    python=${PYTHON:-$("$root/deploy/python-env.sh")} path=${PYTHONPATH:-}
  fi
  echo "== $e"
  status=0
  "$tierlab" run --dir "$work" -- env PYTHONPATH="$path" "$python" "$root/tools/bench/bench_verdict_engines.py" --engine "$e" \
    --socket "$sock" --tierlab "$tierlab" --tierlab-dir "$work" --caps "$caps" --crossover-mbps "$crossover" \
    --reps "$reps" --json "$out/$e.json" 2> "$out/$e.stderr" || status=$?
  if [ "$status" != 0 ]; then
    [ "$status" = 1 ] || tail -20 "$out/$e.stderr" >&2
    failed+=("$e")
  fi
  echo
done
kvstreamd_stop
if [ ${#failed[@]} -gt 0 ]; then
  echo "$prog: FAIL (${failed[*]}); results in $out"
  exit 1
fi
echo "$prog: PASS (${engine_list[*]}); results in $out"
