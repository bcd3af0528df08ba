#!/usr/bin/env bash
# Creates (or reuses) the Python virtual environment for kvstream's Python tests and benchmarks:
# the packages of tests/python/requirements.txt (LMCache, which brings torch; pytest) from PyPI,
# then the kvstream package from client/python. Prints the environment's python on stdout.
# Usage: deploy/python-env.sh [VENV]     (default: $KVSTREAM_VENV or /var/tmp/kvstream-venv)
# The requirements install once per environment (a stamp records what was installed; about
# 3 minutes and 9 GiB the first time); kvstream itself is reinstalled on every call.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${KVSTREAM_VENV:-/var/tmp/kvstream-venv}}"
requirements="$root/tests/python/requirements.txt"
python=/usr/bin/python3   # Debian's python3 (python3-venv from deploy/install-deps.sh)
want="$("$python" --version 2>&1) $(sha256sum "$requirements" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.kvstream-stamp" 2>/dev/null)" != "$want" ]; then
  echo "python-env: installing $requirements into $venv" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --upgrade pip >&2
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements" >&2
  echo "$want" > "$venv/.kvstream-stamp"
fi
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$root/client/python" >&2
echo "$venv/bin/python"
