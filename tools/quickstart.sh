#!/usr/bin/env bash
# Installs dependencies, builds KVStream, starts kvstreamd on two tier directories under a state
# directory, runs a small client workload (persist 16 chunks to both tiers, retrieve them in one
# step across both), prints the step records and tier stats, and stops the daemon.
# Usage: tools/quickstart.sh [STATE_DIR]     (default: /var/tmp/kvstream-quickstart)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
state=/var/tmp/kvstream-quickstart
parse_options 'STATE_DIR state' "$@"
"$root/deploy/install-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target kvstreamd kvstreamctl kvdemo
rm -rf "$state"
mkdir -p "$state"
sock="$state/kvstreamd.sock"
cat > "$state/kvstreamd.yaml" <<YAML
socket: {path: $sock, mode: "0600"}
logging: {level: info}
tiers:
  - {name: nvme, path: $state/tier-nvme, capacity: 1GiB}
  - {name: pfs, path: $state/tier-pfs, capacity: 1GiB}
YAML
echo "== starting kvstreamd ($state/kvstreamd.yaml)"
trap kvstreamd_stop_all EXIT
kvstreamd_start "$state/kvstreamd.yaml" "$state/kvstreamd.log"
echo "== demo client"
"$build/tools/kvdemo" --socket "$sock" --chunks 16 --chunk-size 4MiB
echo "== kvstreamctl steps"
"$build/tools/kvstreamctl" --socket "$sock" steps
echo "== kvstreamctl tiers"
"$build/tools/kvstreamctl" --socket "$sock" tiers
echo "== kvstreamctl stats"
"$build/tools/kvstreamctl" --socket "$sock" stats
echo "== stopping kvstreamd (SIGTERM drains staged writes)"
kvstreamd_stop
echo "== daemon log"
cat "$state/kvstreamd.log"
