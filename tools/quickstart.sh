#!/usr/bin/env bash
# Installs dependencies, builds KVStream, and runs the core demo on two tier directories under a
# state directory: persist 16 chunks (replicated to both tiers), reopen the store (index rebuilt
# from the files), retrieve them in one step across both tiers and print the step record and the
# tier stats. (Until kvstreamd lands, the demo drives the storage core directly.)
# Usage: tools/quickstart.sh [STATE_DIR]     (default: /var/tmp/kvstream-quickstart)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="${1:-/var/tmp/kvstream-quickstart}"
build="${BUILD_DIR:-$root/build}"
"$root/deploy/install-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target kvcore_demo
rm -rf "$state"
mkdir -p "$state"
echo "== kvcore_demo on $state"
"$build/tools/kvcore_demo" "$state"
