#!/usr/bin/env bash
# Installs dependencies, builds KVStream and runs every test through ctest.
# Usage: tests/run.sh            (build dir: build/, override with BUILD_DIR=...)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
"$root/deploy/install-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSTREAM_WERROR=ON
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure --timeout 600 -j 2
