#!/usr/bin/env bash
# kill -9 cycles under load (kvtorture crash) against a real kvstreamd on two tier directories:
# no acknowledged chunk lost, no bad byte served. KVSTREAM_TORTURE_CYCLES sets the cycles (default
# 5 here; the reliability target is >= 50).
# Usage: crash_test.sh KVSTREAMD KVTORTURE
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
daemon=$1 torture=$2
work=$(test_work_dir kvtorture-crash)
trap 'rm -rf "$work"' EXIT
cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $work/kvstreamd.sock, mode: "0600"}
sessions: {max_arena: 64MiB}
logging: {level: warn}
policies: {writes: immediate}
tiers:
  - {name: t0, path: $work/t0, capacity: 2GiB}
  - {name: t1, path: $work/t1, capacity: 2GiB}
YAML
"$torture" crash --daemon "$daemon" --config "$work/kvstreamd.yaml" --socket "$work/kvstreamd.sock" \
  --log "$work/kvstreamd.log" --cycles "${KVSTREAM_TORTURE_CYCLES:-5}" --seed "${KVSTREAM_TORTURE_SEED:-$RANDOM}" \
  || { tail -20 "$work/kvstreamd.log"; exit 1; }
