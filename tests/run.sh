#!/usr/bin/env bash
# Installs dependencies, builds KVStream and runs every test: the C++ suite through ctest, a clang
# build that checks the lock annotations (-Wthread-safety; a violation fails the run), then the
# Python client, LMCache plugin and step-batching tests (pytest, against the built kvstreamd, with
# real LMCache from PyPI in the virtual environment of deploy/python-env.sh).
# Usage: tests/run.sh   (build dirs: build/ and build-tsa/, override with BUILD_DIR=...; venv: KVSTREAM_VENV)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
"$root/deploy/install-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSTREAM_WERROR=ON
cmake --build "$build" -j "$(nproc)"
(cd "$build" && ctest --output-on-failure --timeout 600 -j 2)
# Thread-safety analysis: the libraries (core, daemon, client) with clang; nothing to run.
CC=clang CXX=clang++ cmake -S "$root" -B "${build}-tsa" -DCMAKE_BUILD_TYPE=Debug -DKVSTREAM_THREAD_SAFETY=ON \
  -DKVSTREAM_BUILD_TESTS=OFF -DKVSTREAM_BUILD_TOOLS=OFF -DKVSTREAM_WITH_CUDA=OFF
cmake --build "${build}-tsa" -j "$(nproc)"
python="$("$root/deploy/python-env.sh")"
"$python" -c "import lmcache, kvstream.lmcache"   # the LMCache tests must run, not skip
cd "$root/tests/python"
KVSTREAMD="$build/daemon/kvstreamd" "$python" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning
