#!/usr/bin/env bash
# The Debian package, end to end as root: cpack builds it from BUILD_DIR, dpkg installs it (user and
# group kvstream, /var/lib/kvstream, the conffile, the unit), the installed kvstreamd starts as user
# kvstream on the shipped default config (systemd does not run in containers: setpriv stands in for
# the unit's User=), serves a put and a get, reports healthy, stops on SIGTERM; then `dpkg -r` removes
# the programs and keeps the config and the cached KV, and `dpkg -P` removes both.
# Usage: deb_test.sh BUILD_DIR   (exit 77: skipped, not root, no dpkg, or kvstream already installed)
set -euo pipefail
build=$(cd "$1" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: needs root (dpkg -i)"; exit 77; }
command -v dpkg > /dev/null || { echo "SKIPPED: no dpkg"; exit 77; }
if grep -q installed <<< "$(dpkg-query -W -f='${Status}' kvstream 2>/dev/null)"; then
  echo "SKIPPED: a kvstream package is already installed here; not touching it"; exit 77
fi
work=$(mktemp -d /var/tmp/kvstream-deb-XXXXXX)
pid=""
cleanup() {
  set +e
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid"
  dpkg -P kvstream > /dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$work/kvstreamd.log" ] && tail -20 "$work/kvstreamd.log"; exit 1; }

(cd "$work" && cpack --config "$build/CPackConfig.cmake" -G DEB -B "$work" > "$work/cpack.log") \
  || { cat "$work/cpack.log"; fail "cpack"; }
deb=$(ls "$work"/kvstream_*.deb)
echo "built $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB)"
grep -q liburing <<< "$(dpkg-deb -f "$deb" Depends)" || fail "Depends lacks the shared libraries: $(dpkg-deb -f "$deb" Depends)"

dpkg -i "$deb" > "$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -i"; }
for f in /usr/bin/kvstreamd /usr/bin/kvstreamctl /usr/bin/kvbench /usr/bin/kvsim \
         /lib/systemd/system/kvstreamd.service /etc/kvstream/kvstreamd.yaml; do
  [ -e "$f" ] || fail "$f not installed"
done
grep -q /etc/kvstream/kvstreamd.yaml <<< "$(dpkg-query -W -f='${Conffiles}' kvstream)" || fail "the config is not a conffile"
getent passwd kvstream > /dev/null || fail "no user kvstream"
[ "$(stat -c %U:%G:%a /var/lib/kvstream)" = kvstream:kvstream:750 ] || fail "/var/lib/kvstream is $(stat -c %U:%G:%a /var/lib/kvstream)"
[ "$(stat -c %U /run/kvstream)" = kvstream ] || fail "/run/kvstream not owned by kvstream"
if command -v systemd-analyze > /dev/null; then
  # The unit's syntax and paths (no running systemd needed); warnings about the manager are not ours.
  systemd-analyze verify /lib/systemd/system/kvstreamd.service > "$work/verify.log" 2>&1 || true
  if grep -E "kvstreamd.service:[0-9]+:" "$work/verify.log"; then fail "systemd-analyze verify"; fi
fi

# The installed daemon, as the unit runs it.
setpriv --reuid kvstream --regid kvstream --init-groups /usr/bin/kvstreamd --config /etc/kvstream/kvstreamd.yaml 2> "$work/kvstreamd.log" &
pid=$!
for _ in $(seq 200); do [ -S /run/kvstream/kvstreamd.sock ] && break; sleep 0.05; done
[ -S /run/kvstream/kvstreamd.sock ] || fail "no socket at /run/kvstream/kvstreamd.sock"
[ "$(stat -c %G:%a /run/kvstream/kvstreamd.sock)" = kvstream:660 ] || fail "socket is $(stat -c %G:%a /run/kvstream/kvstreamd.sock)"
head -c 3000000 /dev/urandom > "$work/chunk"
kvstreamctl put deb-test-key "$work/chunk" > /dev/null || fail "put"
kvstreamctl get deb-test-key "$work/back" > /dev/null || fail "get"
cmp "$work/chunk" "$work/back" || fail "bytes differ"
kvstreamctl health > "$work/health" || { cat "$work/health"; fail "health"; }
ls /var/lib/kvstream/nvme /var/lib/kvstream/pfs > /dev/null || fail "default tiers not under /var/lib/kvstream"
kill -TERM "$pid"
wait "$pid" || fail "kvstreamd exited with status $? on SIGTERM"
pid=""
echo "installed kvstreamd ran as user kvstream: put/get of 3 MB intact, health OK, clean stop"

dpkg -r kvstream > "$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -r"; }
[ ! -e /usr/bin/kvstreamd ] || fail "dpkg -r left /usr/bin/kvstreamd"
[ -f /etc/kvstream/kvstreamd.yaml ] || fail "dpkg -r removed the config"
[ -d /var/lib/kvstream/nvme ] || fail "dpkg -r removed the cached KV"
dpkg -P kvstream > "$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -P"; }
[ ! -e /etc/kvstream/kvstreamd.yaml ] || fail "dpkg -P left the config"
[ ! -e /var/lib/kvstream ] || fail "dpkg -P left /var/lib/kvstream"
echo "dpkg -r kept config and cache; dpkg -P removed both"
