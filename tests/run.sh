#!/usr/bin/env bash
# Installs dependencies, builds KVStream and runs every test: the C++ suite through ctest (on
# io_uring, then again on the thread I/O engine: KVSTREAM_IO_ENGINE=threads), a clang
# build that checks the lock annotations (-Wthread-safety; a violation fails the run) and runs the
# libFuzzer targets briefly (KVSTREAM_FUZZ_SECONDS, default 15 each), then the
# Python client, LMCache plugin and step-batching tests (pytest, against the built kvstreamd, with
# real LMCache from PyPI in the virtual environment of deploy/python-env.sh), and the SGLang HiCache
# backend tests (real SGLang host pools on CPU, in the environment of deploy/python-env.sh --sglang).
# Before ctest it makes the S3 environment (deploy/python-env.sh --s3: moto's S3 server, boto3) and
# hands it to ctest's S3 tests as KVSTREAM_MOTO_SERVER (moto_server) and KVSTREAM_S3_PYTHON (its
# python); they skip without them.
# Usage: tests/run.sh   (build dirs: build/ and build-clang/, override with BUILD_DIR=...; venvs:
#        KVSTREAM_VENV, KVSTREAM_SGLANG_VENV, KVSTREAM_S3_VENV)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
"$root/deploy/install-deps.sh"
# The S3 tests' server and client (tools/lib/s3.sh, tests/s3/), for ctest below.
s3_python="$("$root/deploy/python-env.sh" --s3)"
export KVSTREAM_S3_PYTHON="$s3_python" KVSTREAM_MOTO_SERVER="${s3_python%/python}/moto_server"
"$s3_python" -c "import boto3, moto.server" && [ -x "$KVSTREAM_MOTO_SERVER" ]   # so they run, not skip
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSTREAM_WERROR=ON
cmake --build "$build" -j "$(nproc)"
(cd "$build" && ctest --output-on-failure --timeout 600 -j 2)
# Again on the thread I/O engine (what `io_engine: auto` falls back to where io_uring is denied).
(cd "$build" && KVSTREAM_IO_ENGINE=threads ctest --output-on-failure --timeout 600 -j 2)
# clang: the libraries (core, daemon, client) with the lock annotations checked (-Wthread-safety),
# instrumented for the libFuzzer targets, which then run a short while each from valid seeds.
CC=clang CXX=clang++ cmake -S "$root" -B "${build}-clang" -DCMAKE_BUILD_TYPE=Debug -DKVSTREAM_THREAD_SAFETY=ON \
  -DKVSTREAM_FUZZ=ON -DKVSTREAM_BUILD_TESTS=OFF -DKVSTREAM_BUILD_TOOLS=OFF -DKVSTREAM_WITH_CUDA=OFF
cmake --build "${build}-clang" -j "$(nproc)"
fuzz="${build}-clang/tests/fuzz"
"$fuzz/make_fuzz_seeds" "$fuzz/corpus" "$root/deploy/kvstreamd.yaml"
for f in fuzz_chunk_header fuzz_checkpoint fuzz_daemon_config fuzz_requests fuzz_http_request; do
  (cd "$fuzz" && "./$f" -max_total_time="${KVSTREAM_FUZZ_SECONDS:-15}" -print_final_stats=0 "corpus/$f" 2>&1 | tail -1)
done
python="$("$root/deploy/python-env.sh")"
"$python" -c "import lmcache, kvstream.lmcache"   # the LMCache tests must run, not skip
(cd "$root/tests/python" &&
  KVSTREAMD="$build/daemon/kvstreamd" "$python" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning)
python="$("$root/deploy/python-env.sh" --sglang)"
"$python" -c "import sglang.srt.mem_cache.hicache_storage, kvstream.sglang"   # must run, not skip
cd "$root/tests/sglang"
KVSTREAMD="$build/daemon/kvstreamd" "$python" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning \
  -W ignore::UserWarning
