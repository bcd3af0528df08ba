#!/usr/bin/env bash
# GPU check for a machine with a CUDA device (and PyPI for the Python environment): builds with
# the CUDA copier and runs its tests (skipped in tests/run.sh without a GPU), a GPU-pinned pool as a
# device-pinned client region (tools/harness/gpu/gpu_check_pinned.py: PyTorch only), then vLLM with
# the kvstream connector and LMCache plugin end to end (tools/harness/gpu/gpu_check_vllm.py), then an
# SGLang server with the kvstream HiCache backend end to end (tools/harness/gpu/gpu_check_sglang.py).
# Usage: tools/gpu-check.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
parse_options '' "$@"  # none: --help
build="${BUILD_DIR:-$root/build-gpu}"
"$root/deploy/install-deps.sh"
nvidia-smi -L || die "no GPU visible"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSTREAM_WITH_CUDA=ON
cmake --build "$build" -j "$(nproc)" --target cuda_test kvstreamd
(cd "$build" && ctest -R cuda_test --output-on-failure)
# A pool the GPU pinned, added as a device-pinned client region: retrieved chunks byte-identical on the GPU.
python="$("$root/deploy/python-env.sh")"
(cd "$root" && "$python" tools/harness/gpu/gpu_check_pinned.py "$build/daemon")
# vLLM + LMCache + kvstreamd end to end (tiny dummy-weight model, two passes, step batching).
(cd "$root" && BUILD_DIR="$build" "$python" tools/harness/gpu/gpu_check_vllm.py --build "$build")
# SGLang (its own environment: the full sglang with its GPU kernels) + the kvstream HiCache backend.
python="$("$root/deploy/python-env.sh" --sglang-gpu)"
cd "$root" && "$python" tools/harness/gpu/gpu_check_sglang.py --build "$build"
