#!/usr/bin/env bash
# bench-estimate: the daemon's load estimate (docs/design.md section 12, "Load or recompute")
# against what the steps it estimates then take, on real tiers, and what the estimate adds to a
# Lookup. kvstreamd on two tierlab tiers (tools/lib/bench-tiers.sh), driven by kvbench --estimate:
# before each measured step one Lookup with estimate_load over every rank's keys of the step (as a
# client asks before retrieving); the last entry's load_seconds is the step's estimate, and the
# step's time is kvbench's own, client side (from the release of the 2 ranks to the last reply).
# Completion routing, steps read back to back, RUNS runs of STEPS steps per scenario (the runs of a
# scenario read the same chunks), the steps of its runs pooled:
#   1. disk-backed tiers, steady caps FAST/SLOW MB/s (default 300/150), 48 chunks of 8 MiB a step;
#   2. the same with t1's cap moved by kvbench --step-hook (tierlab cap --at {step}): SLOW for the
#      first half of every run, SLOW/3 for the second (one move, mid-run; before each run the cap
#      is back at SLOW and two untimed steps read at it);
#   3. tiers on tmpfs (images in /dev/shm, as bench.sh --gbs) capped at 2000/700 MB/s, 32 chunks
#      of 16 MiB a step, 2*RUNS runs of 4 steps; 4. the same uncapped (as bench.sh --gbs's first
#      table: on few cores the host's verification of every block, not the tiers, sets the pace).
# Each steady scenario (1, 3, 4) starts after an untimed pass of its steps, so that it measures the
# estimate in steady state; scenario 2 measures how it follows a move. Not checked, for what it
# shows: 2b. bench.sh's fluctuating t1 (SLOW and SLOW/3 for 2 steps each, periodic:SLOW:SLOW/3:4),
# which an estimate from past steps cannot anticipate. A step whose estimate is NaN (the daemon had
# measured no tier yet) is counted as unknown, not as an error. Prints one table: per scenario the
# steps, the median and 90th percentile of |estimate - time| / time, the median signed error (the
# bias; < 0: the estimate is short) and PASS when the median is <= 10% and the 90th percentile
# <= 25%.
# 5. Lookup latency (tools/bench/kvlookup_bench, on the disk-backed daemon once its tiers are
# measured): 1,000 keys stored on both tiers, estimate_load off and on alternated, 10 rounds of 500
# calls per mode; p50 and p99 per mode, PASS when the p99 with the estimate is within 1.10x of
# without.
# Exit status 1 when a check fails. Needs root (tierlab) and 6 GiB free in /dev/shm. Results (kvbench
# JSON, logs) go to OUT. About 3 minutes. Tears everything down, also on failure.
# Usage: sudo tools/bench-estimate.sh [--fast MBPS] [--slow MBPS] [--steps N] [--runs N] [--out DIR]
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fast=300 slow=150 steps=8 runs=4 out=/var/tmp/kvstream-bench-results/estimate
parse_options '
  --fast   fast
  --slow   slow
  --steps  steps
  --runs   runs
  --out    out
' "$@"
need_built "$build/tools/kvlookup_bench"
{ [ "$steps" -ge 2 ] && [ "$runs" -ge 1 ]; } || usage_error "--steps must be >= 2 and --runs >= 1"
rm -f "$out"/estimate-*.json "$out/lookup.txt"
failed=0

# kvbench_completion STEPS RUNS [kvbench args]: RUNS completion runs of STEPS steps, read back to back.
kvbench_completion() {
  local n=$1 policies
  policies=$(printf 'completion,%.0s' $(seq "$2"))
  shift 2
  "$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "$sock" --ranks 2 --steps "$n" --hit-ratio 1 \
    --policies "${policies%,}" --write-policies "" --no-alone "$@"
}

# settle STEPS [kvbench args]: one untimed run of the steps (stored first), no estimates.
settle() {
  local n=$1
  shift
  kvbench_completion "$n" 1 "$@" > /dev/null 2>&1 || die "the untimed pass before a scenario failed"
}

# estimate_run NAME STEPS RUNS [kvbench args]: with the estimate, into estimate-NAME.json; prints
# kvbench's estimate table.
estimate_run() {
  local name=$1
  shift
  kvbench_completion "$@" --settle 0 --estimate --json "$out/estimate-$name.json" | sed -n '/^load estimate/,$p'
}

# 1, 2, 2b and 5: disk-backed tiers.
work="${BENCH_DIR:-/var/tmp/kvstream-bench-estimate}"
# shellcheck source-path=SCRIPTDIR source=lib/bench-tiers.sh
source "$root/tools/lib/bench-tiers.sh"
bench_up 7GiB "$out/kvstreamd-disk.log"
disk=(--requests 4 --chunks 6 --chunk-size 8MiB)
low=$((slow / 3))
echo "== 1. disk-backed tiers, steady caps: t0 $fast MB/s, t1 $slow MB/s"
settle "$steps" "${disk[@]}"
estimate_run disk-steady "$steps" "$runs" "${disk[@]}"
echo
echo "== 2. disk-backed tiers, t1's cap moved: $slow MB/s for the first $((steps / 2)) steps of each run, then $low"
for r in $(seq "$runs"); do
  "$tierlab" cap --dir "$work" t1 "$slow"
  settle 2 "${disk[@]}"
  estimate_run "disk-moved-$r" "$steps" 1 "${disk[@]}" --step-hook "$tierlab cap --dir $work t1 periodic:$slow:$low:$steps --at {step}"
done
echo
echo "== 2b. disk-backed tiers, t1 fluctuating per step as in bench.sh: $slow / $low MB/s, 2 steps each"
estimate_run disk-periodic "$steps" "$runs" "${disk[@]}" --step-hook "$tierlab cap --dir $work t1 periodic:$slow:$low:4 --at {step}"
"$tierlab" cap --dir "$work" t1 "$slow"
echo
echo "== 5. Lookup latency, 1,000 keys on both tiers (disk-backed daemon, tiers measured)"
lookup=0
"$tierlab" run --dir "$work" -- "$build/tools/kvlookup_bench" --socket "$sock" --keys 1000 --rounds 10 --calls 500 \
  > "$out/lookup.txt" || lookup=$?
cat "$out/lookup.txt"
[ "$lookup" = 0 ] || failed=1
bench_down
trap - EXIT

# 3 and 4: tmpfs-backed tiers.
work="${BENCH_DIR_GBS:-/dev/shm/kvstream-bench-estimate}"
free=$(df -Pk "$(dirname "$work")" | awk 'NR == 2 {print $4}')
[ "$free" -ge $((6 << 20)) ] || die "$(dirname "$work") has $((free >> 20)) GiB free; the tmpfs tiers need 6"
fast=0 slow=0
bench_up 7GiB "$out/kvstreamd-tmpfs.log"
tmpfs=(--requests 4 --chunks 4 --chunk-size 16MiB)
# tmpfs_scenario TITLE NAME T0 T1: the tmpfs tiers capped at T0/T1 MB/s (0: none), settled, measured.
tmpfs_scenario() {
  echo
  echo "== $1"
  "$tierlab" cap --dir "$work" t0 "$3"
  "$tierlab" cap --dir "$work" t1 "$4"
  settle 4 "${tmpfs[@]}"
  estimate_run "$2" 4 $((2 * runs)) "${tmpfs[@]}"
}
tmpfs_scenario "3. tmpfs-backed tiers capped at 2000/700 MB/s" tmpfs-caps 2000 700
tmpfs_scenario "4. tmpfs-backed tiers uncapped" tmpfs-uncapped 0 0

echo
python3 - "$out" "$fast/$slow" <<'PY' || failed=1
import glob, json, math, sys
out = sys.argv[1]
def pct(values, q):  # nearest rank, as kvbench's Percentile
    v = sorted(values)
    return v[min(len(v), max(1, math.ceil(q * len(v)))) - 1] if v else float("nan")
rows = [("disk-steady", "1 disk steady", True), ("disk-moved", "2 disk t1 moved mid-run", True),
        ("tmpfs-caps", "3 tmpfs 2000/700", True), ("tmpfs-uncapped", "4 tmpfs uncapped", True),
        ("disk-periodic", "2b disk t1 per 2 steps", False)]
print("load estimate against the step's time (client side), completion routing, steps pooled over the runs:")
print("%-24s %6s %8s %12s %10s %8s %9s  %s" % ("scenario", "steps", "unknown", "median|err|", "p90|err|", "bias",
                                             "MB/s", "verdict (<= 10% / <= 25%)"))
ok = True
for name, title, checked in rows:
    errors, unknown, seconds, nbytes = [], 0, 0.0, 0
    runs = [run for path in sorted(glob.glob(f"{out}/estimate-{name}.json") + glob.glob(f"{out}/estimate-{name}-*.json"))
            for run in json.load(open(path))["runs"]]
    for run in runs:
        for s in run["steps"]:
            seconds += s["seconds"]
            nbytes += s["bytes"]
            if s.get("estimate_seconds") is None:
                unknown += 1
            else:
                errors.append((s["estimate_seconds"] - s["seconds"]) / s["seconds"])
    med, p90 = pct([abs(e) for e in errors], 0.5), pct([abs(e) for e in errors], 0.9)
    passed = med <= 0.10 and p90 <= 0.25
    ok &= passed or not checked
    verdict = ("PASS" if passed else "FAIL") if checked else "(not checked)"
    print("%-24s %6d %8d %11.1f%% %9.1f%% %+7.1f%% %9.1f  %s" % (title, len(errors), unknown, 100 * med, 100 * p90,
                                                            100 * pct(errors, 0.5), nbytes / seconds / 1e6, verdict))
first = []  # scenario 2: the first step of each run at the moved cap, which no past step can foresee
for path in sorted(glob.glob(f"{out}/estimate-disk-moved-*.json")):
    for run in json.load(open(path))["runs"]:
        s = run["steps"][len(run["steps"]) // 2]
        if s.get("estimate_seconds") is not None:
            first.append("%+.0f%%" % (100 * (s["estimate_seconds"] - s["seconds"]) / s["seconds"]))
print("2: the error of the first step at the moved cap, per run: " + " ".join(first))
sys.exit(0 if ok else 1)
PY
echo "lookup latency: $(grep -o 'p99 on / off.*' "$out/lookup.txt" || echo 'no result')"
echo "bench-estimate: results in $out (estimate-*.json, lookup.txt, kvstreamd-*.log)"
exit "$failed"
