#!/usr/bin/env bash
# The Python package as a wheel, built and installed with the network off: client/python (with the
# proto) is copied out of the tree, built into a wheel by `pip wheel --no-build-isolation --no-index`
# in a fresh virtual environment over Debian's python3 (its python3-setuptools and python3-wheel;
# protoc and grpc_python_plugin from Debian generate the modules), installed with `--no-index` into another
# fresh environment that sees only Debian's python3-grpcio 1.51 and python3-protobuf 4.21 (the
# package's floors), and run from outside the tree against a real kvstreamd: attach, persist,
# lookup, retrieve byte-identical, health; warnings are errors.
# Usage: wheel_test.sh BUILD_DIR   (exit 77: skipped without Debian's python3-grpcio,
# python3-protobuf and python3-wheel, or where no network namespace can be made)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
build=$1
python=/usr/bin/python3   # Debian's, with its dist-packages (deploy/install-deps.sh)
need_built "$build/daemon/kvstreamd"
"$python" -c 'import grpc, google.protobuf, wheel' 2> /dev/null ||
  skip "Debian's python3-grpcio, python3-protobuf or python3-wheel is not installed (deploy/install-deps.sh)"
offline=(unshare --net)   # a network namespace with only a down loopback: no network at all
[ "$(id -u)" -eq 0 ] || offline=(unshare --map-root-user --net)
"${offline[@]}" true 2> /dev/null || skip "cannot make a network namespace (unshare --net) to build offline"
work=$(test_work_dir wheel)
daemon=""
cleanup() {
  set +e
  [ -z "$daemon" ] || { kill "$daemon"; wait "$daemon"; } 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*"; exit 1; }

# The sources as a user's checkout has them, without anything a build in the tree left behind.
mkdir -p "$work/src/client" "$work/src/proto"
cp "$root/proto/kvstream.proto" "$work/src/proto/"
if ! git -C "$root/client/python" ls-files -z > "$work/files" 2> /dev/null || [ ! -s "$work/files" ]; then
  (cd "$root/client/python" && find . -type f ! -path './build/*' ! -path '*.egg-info/*' ! -path '*/__pycache__/*' \
    ! -name 'kvstream_pb2*' -print0) > "$work/files"  # not a git checkout: what a build would not leave
fi
mkdir "$work/src/client/python"
tar -C "$root/client/python" --null -T "$work/files" -cf - | tar -xf - -C "$work/src/client/python"
[ -f "$work/src/client/python/setup.py" ] || fail "client/python was not copied"

"$python" -m venv --system-site-packages "$work/build-env"
"${offline[@]}" "$work/build-env/bin/pip" wheel --quiet --disable-pip-version-check --no-build-isolation \
  --no-index --no-deps -w "$work/dist" "$work/src/client/python" > "$work/build.log" 2>&1 ||
  fail "the wheel did not build offline: $(tail -20 "$work/build.log")"
wheel=$(echo "$work"/dist/kvstream-*-py3-none-any.whl)
[ -f "$wheel" ] || fail "no pure-Python wheel in $work/dist: $(ls "$work/dist")"
"$python" - "$wheel" <<'PY' || fail "the wheel's contents"
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = {f"kvstream/_proto/{n}" for n in ("kvstream_pb2.py", "kvstream_pb2_grpc.py", "kvstream_pb2.pyi",
                                         "kvstream.proto")} | {"kvstream/py.typed", "kvstream/lmcache/__init__.py",
                                                             "kvstream/sglang/__init__.py", "kvstream/vllm/__init__.py"}
missing = need - names
assert not missing, f"missing from the wheel: {sorted(missing)}"
stubs = zipfile.ZipFile(sys.argv[1]).read("kvstream/_proto/kvstream_pb2_grpc.py").decode()
assert "from kvstream._proto import kvstream_pb2" in stubs, "the stubs do not import their messages by package"
PY

"$python" -m venv --system-site-packages "$work/env"
"${offline[@]}" "$work/env/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel" \
  > "$work/install.log" 2>&1 || fail "the wheel did not install offline: $(tail -20 "$work/install.log")"

mkdir "$work/tier" "$work/run"
cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $work/run/kvstreamd.sock}
logging: {level: warn}
tiers:
  - {name: t0, path: $work/tier, capacity: 256MiB}
YAML
"$build/daemon/kvstreamd" --config "$work/kvstreamd.yaml" > "$work/daemon.log" 2>&1 &
daemon=$!
wait_socket "$work/run/kvstreamd.sock" || fail "kvstreamd did not start: $(tail -5 "$work/daemon.log")"
(cd "$work" && "$work/env/bin/python" -W error - "$work/run/kvstreamd.sock" "$work/env") <<'PY' ||
import os, sys
import google.protobuf, grpc
import kvstream
assert kvstream.__file__.startswith(sys.argv[2]), f"kvstream imported from {kvstream.__file__}, not the wheel"
payload = os.urandom(1 << 20)
with kvstream.Client.attach(sys.argv[1], model="wheel", rank=0, world_size=1) as c:
    c.arena[0:len(payload)] = payload
    c.persist([("wheel@tp0@h0", 0, len(payload))])
    entries, hits = c.lookup(["wheel@tp0@h0"])
    assert hits == 1 and entries[0].present, entries
    c.arena[0:len(payload)] = bytes(len(payload))
    results, _ = c.retrieve([("wheel@tp0@h0", 0, len(payload))])
    assert results[0].code == kvstream.Code.OK, results
    assert bytes(c.arena[0:len(payload)]) == payload, "retrieve returned other bytes than persist"
    assert c.health().serving
print(f"wheel: kvstream on protobuf {google.protobuf.__version__}, grpcio {grpc.__version__}: persist, lookup, "
      "retrieve byte-identical, health")
PY
  fail "the installed wheel against kvstreamd"
echo "wheel: $(basename "$wheel") built and installed with the network off"
