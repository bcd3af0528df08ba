#!/usr/bin/env bash
# The headline benchmark: kvstreamd on two emulated tiers (tools/tierlab: loop devices with
# O_DIRECT and blkio read caps of FAST and SLOW MB/s), driven by kvbench as 2 tensor-parallel
# ranks with 8 MiB chunks, every policy side by side against the bound measured in the same run:
#   1. steady caps, with fio on the fast tier's files as the single-tier reference and
#      deferred vs immediate writes of each step's new chunks;
#   2. the slow tier fluctuating per step (periodic SLOW / SLOW/3, as a shared parallel FS);
#   3. a production request trace (TRACE, default bench/traces/conversation_trace.jsonl in the repo).
# With --gbs, the GB/s regime instead (tier images on tmpfs, BENCH_DIR default /dev/shm/...; 16 MiB
# chunks), where the host side is the bottleneck: uncapped (fio on t0, and on both tiers at once,
# as the references), then caps 2000/700 and 3500/1200 MB/s; every table has the daemon's CPU
# seconds per GB read; each run follows an untimed pass of its own policy (kvbench --warm-up: the
# policy before it would otherwise leave it the throttle's credit) (--fast, --slow and --check do
# not apply; --steps defaults to 4).
# With --replication, the replication policies instead (disk-backed tiers at FAST/SLOW read caps):
# single-tier offloading (serial, new KV on the first tier) against completion routing with
# replication all and adaptive, on a write-heavy workload (a quarter of each step stored, 50 ms
# forward gap) with write caps at the paper's write/read ratios (FAST/3, SLOW*1.15) and at the read
# caps, and on a read-heavy one (90% stored); the time until each step's chunks are written, write
# amplification and write stall; each tier's alone run (the bound, kvsim --validate's references)
# persists the same new KV on the first tier, so it carries the same staging work and idle time
# (--check does not apply; --steps defaults to 12: identical write-heavy runs differ by 2-5% over 6).
# --pace (not with --gbs): the caps are kept by tierlab's pacing FUSE layer (tierlab up --pace:
# tools/harness/kvfaultfs serving each direction at its cap, no credit for idle time) instead of
# the blkio throttle, which lets a tier that idled read ahead of its cap (docs/design-notes.md: the
# replication runs idle while writes drain, and kvsim --validate holds there only with --pace).
# --shared: t1 is a shared tier (shared: true, as a parallel FS every node writes); --key: the same
# with a cluster key (shared_key_file, docs/security.md): every chunk written carries a MAC and a
# tag per segment, and every block read from t1 is verified against its tag instead of its XXH3
# checksum, so a run with --key against one with --shared shows what the key costs.
# With --busy-reads, reads that never pause (no forward-pass gap) while each step's new KV (a
# quarter of the step, 8 MiB chunks) is persisted in the background (kvbench --write-gap 0
# --background-writes), at FAST/SLOW steady caps: the daemon with staging.max_defer at its default
# (250ms) and at 3600s (writes then run during reads only under staging pressure), alternated
# three times; each run prints its persists' p50/p95 (call to written) and its read loss against
# the same reads without writes (--steps defaults to 12).
# With --engines, the two I/O engines at FAST/SLOW steady caps, alternated twice in one run:
# kvstreamd on io_uring, then under a seccomp filter denying io_uring_setup (build/tests/
# deny_io_uring: io_engine auto falls back to threads), completion and serial each; prints each
# round's completion time on threads over io_uring's.
# Needs root. Results (JSON, PNG) go to OUT. Tears everything down, also on failure.
# Usage: sudo tools/bench.sh [--gbs | --replication | --engines | --busy-reads] [--pace] [--shared | --key] [--fast MBPS] [--slow MBPS] [--steps N] [--out DIR] [--check GAP]
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fast=300 slow=150 steps=8 out=/var/tmp/kvstream-bench-results check="" gbs="" replication="" pace="" shared="" key="" engines="" busy=""
parse_options '
  --gbs          gbs=1
  --replication  replication=1
  --engines      engines=1
  --busy-reads   busy=1
  --pace         pace=1
  --shared       shared=1
  --key          key=1 shared=1
  --fast         fast
  --slow         slow
  --steps        steps
  --out          out
  --check        check
' "$@"
if [ -n "$gbs" ]; then
  [ -z "$pace" ] || usage_error "--pace does not apply to --gbs (FUSE cannot pace GB/s tiers here)"
  work="${BENCH_DIR:-/dev/shm/kvstream-bench-gbs}"
  source "$root/tools/lib/bench-tiers.sh"
  fast=0 slow=0  # uncapped first
  [ "$steps" = 8 ] && steps=4  # 512 MiB per step: 2 GiB per tier in memory
  bench_up 7GiB "$out/kvstreamd.log"
  gbs_run() {  # NAME FAST SLOW [kvbench args]
    local name=$1 f=$2 s=$3; shift 3
    "$tierlab" cap --dir "$work" t0 "$f"
    "$tierlab" cap --dir "$work" t1 "$s"
    echo
    echo "== $name: t0 ${f/#0/uncapped} MB/s, t1 ${s/#0/uncapped} MB/s (tmpfs-backed loop devices)"
    "$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "$sock" --ranks 2 --steps "$steps" --requests 4 \
      --chunks 4 --hit-ratio 1 --chunk-size 16MiB --write-policies "" --warm-up \
      --policies completion,static:0.5,static:0.67,static:0.75,fastest,serial \
      --json "$out/gbs-$name.json" "$@"
  }
  gbs_run uncapped 0 0 --fio "$work/mnt/t0/kvstream" --fio-all "$work/mnt/t0/kvstream,$work/mnt/t1/kvstream"
  gbs_run caps-2000-700 2000 700
  gbs_run caps-3500-1200 3500 1200
  echo
  echo "bench: results in $out (gbs-*.json, kvstreamd.log)"
  exit 0
fi
if [ -n "$engines" ]; then
  work="${BENCH_DIR:-/var/tmp/kvstream-bench}"
  source "$root/tools/lib/bench-tiers.sh"
  need_built "$build/tests/deny_io_uring"
  bench_up 7GiB "$out/kvstreamd-io_uring-1.log"
  engines_run() {  # NAME
    echo
    echo "== $1: steady caps t0 $fast MB/s, t1 $slow MB/s"
    "$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "$sock" --ranks 2 --steps "$steps" --requests 4 \
      --chunks 8 --hit-ratio 0.75 --chunk-size 8MiB --policies completion,serial --write-policies "" \
      --json "$out/engine-$1.json"
  }
  # Alternated, twice: io_uring, threads under a seccomp filter denying io_uring_setup (io_engine
  # auto falls back), and again.
  for round in 1 2; do
    [ "$round" = 1 ] || daemon_start "$out/kvstreamd-io_uring-$round.log"
    engines_run "io_uring-$round"
    kvstreamd_stop
    daemon_start "$out/kvstreamd-threads-$round.log" "$build/tests/deny_io_uring"
    "$build/tools/kvstreamctl" --socket "$sock" --json tiers | python3 -c '
import json, sys
engines = {t["name"]: t["io_engine"] for t in json.load(sys.stdin)}
print("tiers under the filter:", engines)
sys.exit(0 if set(engines.values()) == {"threads"} else 1)' || die "the daemon under the filter is not on threads"
    engines_run "threads-seccomp-$round"
    kvstreamd_stop
  done
  echo
  python3 - "$out" <<'PY'
import json, sys
def completion(name):
    runs = json.load(open(f"{sys.argv[1]}/engine-{name}.json"))["runs"]
    return [r for r in runs if r["label"] == "completion"][0]
for r in (1, 2):
    u, t = completion(f"io_uring-{r}"), completion(f"threads-seccomp-{r}")
    print("round %d: completion io_uring %.3f s (%.1f MB/s, gap %+.1f%%), threads under seccomp %.3f s "
          "(%.1f MB/s, gap %+.1f%%): threads / io_uring time = %.3f" % (
              r, u["total_seconds"], u["throughput_bps"] / 1e6, 100 * u["gap"], t["total_seconds"],
              t["throughput_bps"] / 1e6, 100 * t["gap"], t["total_seconds"] / u["total_seconds"]))
PY
  echo "bench: results in $out (engine-*.json, kvstreamd-*.log)"
  exit 0
fi
if [ -n "$busy" ]; then
  work="${BENCH_DIR:-/var/tmp/kvstream-bench}"
  source "$root/tools/lib/bench-tiers.sh"
  [ "$steps" = 8 ] && steps=12
  bench_up 7GiB "$out/kvstreamd-defer-250ms-1.log"
  busy_run() {  # NAME
    echo
    echo "== $1: reads back to back at $fast/$slow MB/s, each step's new KV persisted in the background"
    "$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "$sock" --ranks 2 --steps "$steps" --requests 4 \
      --chunks 8 --hit-ratio 0.75 --chunk-size 8MiB --policies "" --write-policies deferred --write-gap 0 \
      --background-writes --no-alone --json "$out/busy-$1.json" | grep -E '^completion\+writes'
  }
  for round in 1 2 3; do
    for defer in 250ms 3600s; do
      [ "$round$defer" = 1250ms ] || {
        sed -i '/^staging:/d' "$work/kvstreamd.yaml"
        echo "staging: {max_defer: $defer, when_full: wait}" >> "$work/kvstreamd.yaml"
        daemon_start "$out/kvstreamd-defer-$defer-$round.log"
      }
      busy_run "defer-$defer-$round"
      kvstreamd_stop
    done
  done
  echo
  echo "bench: results in $out (busy-*.json, kvstreamd-defer-*.log)"
  exit 0
fi
if [ -n "$replication" ]; then
  work="${BENCH_DIR:-/var/tmp/kvstream-bench}"
  source "$root/tools/lib/bench-tiers.sh"
  [ "$steps" = 8 ] && steps=12
  bench_up 7GiB "$out/kvstreamd.log"
  replication_run() {  # NAME T0_WRITE T1_WRITE [kvbench args]
    local name=$1 w0=$2 w1=$3; shift 3
    "$tierlab" cap --dir "$work" t0 "$fast" "$w0"
    "$tierlab" cap --dir "$work" t1 "$slow" "$w1"
    echo
    echo "== $name: reads $fast/$slow MB/s, writes $w0/$w1 MB/s"
    "$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "$sock" --ranks 2 --steps "$steps" --requests 4 \
      --chunks 8 --chunk-size 8MiB --policies "" --write-policies "" --replications all,adaptive --alone-writes \
      --json "$out/replication-$name.json" "$@"
  }
  replication_run write-heavy-paper-writes $((fast / 3)) $((slow * 115 / 100)) --hit-ratio 0.25 --write-gap 0.05
  replication_run write-heavy-writes-as-reads "$fast" "$slow" --hit-ratio 0.25 --write-gap 0.05
  replication_run read-heavy "$fast" "$slow" --hit-ratio 0.9 --write-gap 0.3
  echo
  echo "bench: results in $out (replication-*.json, kvstreamd.log)"
  exit 0
fi
work="${BENCH_DIR:-/var/tmp/kvstream-bench}"
trace="${TRACE:-$root/bench/traces/conversation_trace.jsonl}"
[ -r "$trace" ] || die "trace $trace not readable (TRACE=FILE names another)"
source "$root/tools/lib/bench-tiers.sh"
bench_up 7GiB "$out/kvstreamd.log"
common=(--socket "$sock" --ranks 2 --steps "$steps" --requests 4 --chunks 8 --hit-ratio 0.75 --chunk-size 8MiB)
echo "== 1. steady caps: t0 $fast MB/s, t1 $slow MB/s"
"$tierlab" run --dir "$work" -- "$build/tools/kvbench" "${common[@]}" --fio "$work/mnt/t0/kvstream" \
  --json "$out/steady.json" --plot "$out/steady.png" ${check:+--check "$check"}
low=$((slow / 3))
echo
echo "== 2. fluctuating t1: per step, periodic $slow/$low MB/s (2 steps each), t0 steady $fast MB/s"
"$tierlab" run --dir "$work" -- "$build/tools/kvbench" "${common[@]}" \
  --policies completion,static:0.5,static:0.67,static:0.75,static:0.86,fastest,serial --write-policies "" \
  --step-hook "$tierlab cap --dir $work t1 periodic:$slow:$low:4 --at {step}" \
  --json "$out/fluctuating.json" --plot "$out/fluctuating.png"
"$tierlab" cap --dir "$work" t1 "$slow"
echo
echo "== 3. request trace ($trace): 8 requests per step through a 2 GiB host LRU, 16 MiB chunks"
"$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "$sock" --ranks 2 --workload trace --trace "$trace" \
  --kv-bytes-per-token 32768 --host-cache 2GiB --batch 8 --warmup 2000 --trace-requests 400 --max-steps 4 \
  --policies completion,static:0.67,fastest,serial --write-policies "" \
  --json "$out/trace.json" --plot "$out/trace.png"
echo
echo "bench: results in $out (steady, fluctuating and trace .json/.png, kvstreamd.log)"
