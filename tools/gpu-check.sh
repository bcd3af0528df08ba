#!/usr/bin/env bash
# GPU check for a machine with a CUDA device: builds with the CUDA copier and runs its tests
# (on a machine without a GPU they are skipped). Usage: tools/gpu-check.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-gpu}"
"$root/deploy/install-deps.sh"
nvidia-smi -L || { echo "gpu-check: no GPU visible" >&2; exit 1; }
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSTREAM_WITH_CUDA=ON
cmake --build "$build" -j "$(nproc)" --target cuda_test kvstreamd
cd "$build" && ctest -R cuda_test --output-on-failure
