#!/usr/bin/env bash
# Core-level benchmark (no daemon) on two emulated tiers made by tools/tierlab: kvcore_bench runs
# inside the capped cgroup, prints its table, and everything is torn down. tools/bench.sh is the
# daemon-level headline benchmark. Needs root.
# Usage: tools/bench-core.sh [FAST_MBPS] [SLOW_MBPS] [-- kvcore_bench options]
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fast=300 slow=150 bench_args=()
parse_options '
  FAST_MBPS  fast
  SLOW_MBPS  slow
  --         bench_args
' "$@"
bench="${KVCORE_BENCH:-$root/build/tools/kvcore_bench}"
work="${BENCH_DIR:-/var/tmp/kvstream-bench-core}"
[ -x "$bench" ] || die "$bench not built (run tests/run.sh or cmake --build build)"
trap '"$tierlab" down --dir "$work"' EXIT
"$tierlab" down --dir "$work"
"$tierlab" up --dir "$work" --tier "t0:6G:$fast" --tier "t1:6G:$slow"
"$tierlab" run --dir "$work" -- "$bench" --tier "t0=$work/mnt/t0" --tier "t1=$work/mnt/t1" "${bench_args[@]}"
