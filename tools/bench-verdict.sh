#!/usr/bin/env bash
# bench-verdict: kvsim's load-or-recompute verdict against always recomputing and always loading
# (and storing) over a grid of workloads and nodes, in the model alone (no root, no daemon; needs
# build/tools/kvsim; about a minute on 2 cores).
#
#   tools/bench-verdict.sh [--sequential] [--requests N] [--jobs N] [--out DIR]
#
# The grid (128 cells): traces {conversation: bench/traces/conversation_trace.jsonl, long-doc:
# kvsim --synthetic long-doc (32 documents of 32k-128k tokens, 8 reads each)} x models {8B, 14B,
# 32B, 70B} x storage {0.3, 1, 3, 10} GB/s in all, two tiers splitting it 2:1 (writes as fast as
# reads, replication all, 32 GiB of staging) x host memory {16GiB, 128GiB} x arrival rate {low,
# high}: kvsim --load 0.5 and 0.9, the rates at which recomputing every prompt in full would keep
# the node's prefill busy half and nine tenths of the time. Each cell runs kvsim once with the
# policies recompute, completion (always load the hit, store all new KV) and verdict. Loads
# overlap forward passes (kvsim --overlap, for all three policies) unless --sequential (each
# step's loads before its forward pass). --requests N replays only each trace's first N requests
# (default: all of them); the output says which.
#
# Per cell: mean and p99 TTFT of each policy. Checks, each on the mean and on the p99:
#   1. verdict <= 1.01 x the better of recompute and completion, in every cell;
#   2. verdict >= 1.05 x better than both (better / verdict >= 1.05) in every cell where
#      recompute and completion are within 2x of each other.
# Prints the table (flags: ! a check failed in that cell; ~ recompute and completion within 2x),
# the cells that fail, and one PASS/FAIL line per check with its count of cells; exit status 1
# when a check fails. Results (each cell's kvsim output and --json) go to --out, default
# /var/tmp/kvstream-bench-results/verdict.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

sequential="" requests=0 jobs=2 out=/var/tmp/kvstream-bench-results/verdict
parse_options '
  --sequential  sequential=1
  --requests    requests
  --jobs        jobs
  --out         out
' "$@"
[[ $requests =~ ^[0-9]+$ ]] || usage_error "--requests takes a number"
[[ $jobs =~ ^[1-9][0-9]*$ ]] || usage_error "--jobs takes a positive number"
kvsim="$build/tools/kvsim"
need_built "$kvsim"
mkdir -p "$out"
rm -f "$out"/cell-*.json "$out"/cell-*.txt

traces="conversation long-doc" models="8B 14B 32B 70B" storage="0.3 1 3 10" memories="16GiB 128GiB"
loads="0.5 0.9"
mode=--overlap
[ -z "$sequential" ] || mode=""

# run_cell TRACE MODEL GBPS MEMORY LOAD: one kvsim run into $out/cell-NAME.{txt,json} (run by xargs).
# shellcheck disable=SC2317
run_cell() {
  local trace=$1 model=$2 gbps=$3 memory=$4 load=$5 input bw
  local name="$trace-$model-$gbps-$memory-$load"
  if [ "$trace" = conversation ]; then input=(--trace "$root/bench/traces/conversation_trace.jsonl"); else input=(--synthetic long-doc); fi
  bw=$(awk -v g="$gbps" 'BEGIN { printf "%.6g,%.6g", g * 2e9 / 3, g * 1e9 / 3 }')
  # shellcheck disable=SC2086  # $mode is empty or one flag
  "$kvsim" "${input[@]}" --requests "$requests" --model "$model" --memory "$memory" --bw "$bw" --load "$load" \
    --policies recompute,completion,verdict $mode --json "$out/cell-$name.json" > "$out/cell-$name.txt" 2>&1 ||
    { echo "$prog: kvsim failed in cell $name:" >&2; cat "$out/cell-$name.txt" >&2; return 1; }
}
export -f run_cell
export kvsim root requests mode out prog

start=$SECONDS
for t in $traces; do for m in $models; do for s in $storage; do for mem in $memories; do for l in $loads; do
  echo "$t $m $s $mem $l"
done; done; done; done; done | xargs -P "$jobs" -L 1 bash -c 'run_cell "$@"' run_cell ||
  die "a kvsim run failed (its output is above)"

echo "== bench-verdict: TTFT (s) of recompute, completion and verdict; loads $([ -n "$mode" ] &&
  echo "overlap forward passes (kvsim --overlap, every policy)" || echo "are each step's T_ret (sequential)")"
echo "   storage: two tiers 2:1, writes as fast as reads, replication all; load: kvsim --load (low 0.5, high 0.9)"
status=0
python3 - "$out" "$requests" "$traces" "$models" "$storage" "$memories" "$loads" <<'PY' || status=$?
import json, sys
out, requests = sys.argv[1], int(sys.argv[2])
traces, models, storage, memories, loads = (a.split() for a in sys.argv[3:8])
cells, seen = [], {}
for t in traces:
    for m in models:
        for s in storage:
            for mem in memories:
                for l in loads:
                    j = json.load(open(f"{out}/cell-{t}-{m}-{s}-{mem}-{l}.json"))
                    seen[t] = j["requests"]
                    p = {r["policy"]: r for r in j["policies"]}
                    cells.append((t, m, s, mem, l, p))
for t in traces:
    what = "first %d requests" % seen[t] if requests else "all %d requests" % seen[t]
    print(f"   {t}: {what}")
print()
print("%-12s %-4s %5s %6s %4s | %9s %9s %9s | %9s %9s %9s | %s" % (
    "trace", "mdl", "GB/s", "memory", "load", "rec mean", "comp mean", "verd mean", "rec p99", "comp p99", "verd p99",
    "verd/best mean p99"))
checks = {("1", "mean"): [0, 0], ("1", "p99"): [0, 0], ("2", "mean"): [0, 0], ("2", "p99"): [0, 0]}
failing = []
for t, m, s, mem, l, p in cells:
    flags, ratios = "", []
    for metric, key in (("mean", "ttft_mean_s"), ("p99", "ttft_p99_s")):
        rec, comp, ver = p["recompute"][key], p["completion"][key], p["verdict"][key]
        best = min(rec, comp)
        ratio = ver / best if best > 0 else 1.0
        ratios.append(ratio)
        ok1 = ver <= 1.01 * best
        checks[("1", metric)][0] += ok1
        checks[("1", metric)][1] += 1
        if not ok1:
            failing.append(f"{t} {m} {s} GB/s {mem} load {l}: check 1 ({metric}) verdict {ver:.3f} s > 1.01 x {best:.3f} s")
        close = max(rec, comp) <= 2 * best
        if close:
            ok2 = ver * 1.05 <= best
            checks[("2", metric)][0] += ok2
            checks[("2", metric)][1] += 1
            if not ok2:
                failing.append(f"{t} {m} {s} GB/s {mem} load {l}: check 2 ({metric}) recompute {rec:.3f} and "
                               f"completion {comp:.3f} s within 2x, verdict {ver:.3f} s only {best / ver:.3f}x better")
        flags += ("" if ok1 and (not close or ok2) else "!") + ("~" if close else "")
    print("%-12s %-4s %5s %6s %4s | %9.2f %9.2f %9.2f | %9.2f %9.2f %9.2f | %5.3f %5.3f %s" % (
        t, m, s, mem, l, p["recompute"]["ttft_mean_s"], p["completion"]["ttft_mean_s"], p["verdict"]["ttft_mean_s"],
        p["recompute"]["ttft_p99_s"], p["completion"]["ttft_p99_s"], p["verdict"]["ttft_p99_s"], ratios[0], ratios[1],
        flags))
print()
for f in failing:
    print("FAILING CELL: " + f)
status = 0
for (n, metric), (ok, total) in checks.items():
    what = ("verdict <= 1.01x the better of recompute and completion" if n == "1" else
            "verdict >= 1.05x better than both where they are within 2x")
    verdict = "PASS" if ok == total else "FAIL"
    status |= verdict == "FAIL"
    print(f"{verdict} check {n} ({metric}): {what}: {ok}/{total} cells")
sys.exit(status)
PY
echo "bench-verdict: $((SECONDS - start)) s; each cell's kvsim output and --json in $out"
exit "$status"
