#!/usr/bin/env bash
# The fault proxy tools/harness/s3fault.py against a real moto_server: tests/s3/s3fault_test.py
# (pytest, in the environment of deploy/python-env.sh --s3: $KVSTREAM_S3_PYTHON, see tools/lib/s3.sh).
# Usage: s3fault_test.sh [PYTEST_ARGS...]   (exit 77: skipped without moto_server and boto3)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/s3.sh
source "$root/tools/lib/s3.sh"
why=$(s3_missing)
[ -z "$why" ] || skip "$why"
"$(s3_python)" -c 'import pytest' 2> /dev/null || skip "$(s3_python) has no pytest (deploy/python-env.sh --s3)"
work=$(test_work_dir s3fault)
trap 'rm -rf "$work"' EXIT
KVSTREAM_MOTO_SERVER=$(s3_moto_server) "$(s3_python)" -m pytest -q -p no:cacheprovider --basetemp "$work/pytest" \
  "$root/tests/s3/s3fault_test.py" "$@"
