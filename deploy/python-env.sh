#!/usr/bin/env bash
# Creates (or reuses) a Python virtual environment for kvstream's Python tests and benchmarks and
# prints its python on stdout. Each engine gets its own (their torch pins conflict):
#   default   tests/python/requirements.txt (LMCache and vLLM, which bring torch; pytest) in
#             $KVSTREAM_VENV or /var/tmp/kvstream-venv (about 3 minutes and 9 GiB the first time);
#   --sglang  tests/sglang/requirements.txt, then sglang itself without its GPU dependencies
#             (tests/sglang/requirements-nodeps.txt), in $KVSTREAM_SGLANG_VENV or
#             /var/tmp/kvstream-venv-sglang (about 3 minutes and 6 GiB);
#   --sglang-gpu  the full sglang with its GPU kernels (tests/sglang/requirements-gpu.txt), for
#             tools/gpu-check.sh, in /var/tmp/kvstream-venv-sglang-gpu;
#   --s3      tests/s3/requirements.txt (moto's S3 server moto_server, boto3, pytest) for the S3
#             tier's tests and tools/lib/s3.sh, in $KVSTREAM_S3_VENV or /var/tmp/kvstream-venv-s3
#             (about 25 seconds and 350 MB; no kvstream package: nothing there imports it).
# The requirements install once per environment (a stamp records what was installed); the kvstream
# package from client/python is built (without network) and reinstalled on every call (not --s3).
# Usage: deploy/python-env.sh [--sglang | --sglang-gpu | --s3] [VENV]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
  -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
  --sglang|--sglang-gpu|--s3|"") ;;
  -*) echo "python-env: unknown option '$1' (usage: deploy/python-env.sh [--sglang | --sglang-gpu | --s3] [VENV])" >&2; exit 2 ;;
esac
case "${2:-}" in -*) echo "python-env: VENV must be a path, got '$2'" >&2; exit 2 ;; esac
client=1  # the kvstream package goes into the environment (not into --s3's)
if [ "${1:-}" = --sglang ]; then
  shift
  venv="${1:-${KVSTREAM_SGLANG_VENV:-/var/tmp/kvstream-venv-sglang}}"
  requirements="$root/tests/sglang/requirements.txt"
  nodeps="$root/tests/sglang/requirements-nodeps.txt"
elif [ "${1:-}" = --sglang-gpu ]; then
  shift
  venv="${1:-/var/tmp/kvstream-venv-sglang-gpu}"
  requirements="$root/tests/sglang/requirements-gpu.txt"
  nodeps=""
elif [ "${1:-}" = --s3 ]; then
  shift
  venv="${1:-${KVSTREAM_S3_VENV:-/var/tmp/kvstream-venv-s3}}"
  requirements="$root/tests/s3/requirements.txt"
  nodeps=""
  client=""
else
  venv="${1:-${KVSTREAM_VENV:-/var/tmp/kvstream-venv}}"
  requirements="$root/tests/python/requirements.txt"
  nodeps=""
fi
python=/usr/bin/python3   # Debian's python3 (python3-venv from deploy/install-deps.sh)
want="$("$python" --version 2>&1) $(cat "$requirements" ${nodeps:+"$nodeps"} | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.kvstream-stamp" 2>/dev/null)" != "$want" ]; then
  echo "python-env: installing $requirements into $venv" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  pip=("$venv/bin/pip" install -q --disable-pip-version-check)
  "${pip[@]}" --upgrade pip 'setuptools>=70.1' >&2   # setuptools builds kvstream's wheel itself
  "${pip[@]}" -r "$requirements" >&2
  [ -z "$nodeps" ] || "${pip[@]}" --no-deps -r "$nodeps" >&2
  echo "$want" > "$venv/.kvstream-stamp"
fi
[ -n "$client" ] || { echo "$venv/bin/python"; exit 0; }
# Built here, offline, by the environment's setuptools (>= 70.1 builds wheels without `wheel`) and
# Debian's protoc (client/python/setup.py).
"$venv/bin/python" -c 'import setuptools, sys; sys.exit(tuple(map(int, setuptools.__version__.split(".")[:2])) < (70, 1))' ||
  "$venv/bin/pip" install -q --disable-pip-version-check 'setuptools>=70.1' >&2
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps --no-build-isolation \
  "$root/client/python" >&2
echo "$venv/bin/python"
