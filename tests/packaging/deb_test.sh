#!/usr/bin/env bash
# The Debian package, end to end as root: cpack builds it from BUILD_DIR, dpkg installs it (user and
# group kvstream, /var/lib/kvstream and its tier directories 0750, the conffile, the unit), the
# installed kvstreamd starts as user kvstream on the shipped default config with metrics.listen set,
# as the unit runs it: systemd does not run in containers, so setpriv stands in for User=, a umask for
# UMask= and RESTRICT_FAMILIES (a seccomp filter) for RestrictAddressFamilies=, each read from the
# installed unit, whose ProtectProc=, LimitNOFILE=, TasksMax= and SystemCallFilter= (io_uring
# kept) are checked as written. It serves a put and a get with fewer threads than TasksMax,
# /metrics and /health, reports healthy, stops on SIGTERM.
# The pfs tier's directory is a bind mount (a parallel file system mounted where the shipped config
# puts its stand-in); `dpkg -r` removes the programs and keeps the config and the cached KV, and
# `dpkg -P` removes both but leaves the mounted file system and everything on it untouched.
# Usage: deb_test.sh BUILD_DIR RESTRICT_FAMILIES
#   (exit 77: skipped, not root, no dpkg, or kvstream already installed)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
build=$(cd "$1" && pwd)
restrict_families=$2
[ "$(id -u)" -eq 0 ] || skip "needs root (dpkg -i)"
command -v dpkg > /dev/null || skip "no dpkg"
if grep -q installed <<< "$(dpkg-query -W -f='${Status}' kvstream 2>/dev/null)"; then
  skip "a kvstream package is already installed here; not touching it"
fi
work=$(mktemp -d /var/tmp/kvstream-deb-XXXXXX)
pid=""
pfs=/var/lib/kvstream/pfs  # the shipped config's stand-in for the parallel file system
cleanup() {
  set +e
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid"
  mountpoint -q "$pfs" && umount "$pfs"
  dpkg -P kvstream > /dev/null 2>&1
  rmdir "$pfs" /var/lib/kvstream 2>/dev/null
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
for d in /var/lib/kvstream /var/lib/kvstream/nvme "$pfs"; do
  [ "$(stat -c %U:%G:%a "$d")" = kvstream:kvstream:750 ] || fail "$d is $(stat -c %U:%G:%a "$d")"
done
[ "$(stat -c %U /run/kvstream)" = kvstream ] || fail "/run/kvstream not owned by kvstream"
if command -v systemd-analyze > /dev/null; then
  # The unit's syntax and paths (no running systemd needed); warnings about the manager are not ours.
  systemd-analyze verify /lib/systemd/system/kvstreamd.service > "$work/verify.log" 2>&1 || true
  if grep -E "kvstreamd.service:[0-9]+:" "$work/verify.log"; then fail "systemd-analyze verify"; fi
fi

# A parallel file system mounted at the pfs tier's directory, with another node's file on it.
mkdir "$work/pfs"
echo "another node's chunk" > "$work/pfs/marker"
chown -R kvstream:kvstream "$work/pfs"
chmod 0750 "$work/pfs"
mounted=no
if mount --bind "$work/pfs" "$pfs" 2> "$work/mount.log"; then
  mounted=yes
else
  echo "NOTE: mount --bind not permitted here ($(cat "$work/mount.log")): purge across a mount point not checked"
fi

# The installed daemon, as the unit runs it, with metrics on (an admin's edit of the conffile).
unit=/lib/systemd/system/kvstreamd.service
unit_value() { sed -n "s/^$1=//p" "$unit" | tail -1; }
read -r -a families <<< "$(unit_value RestrictAddressFamilies)"
[ "${#families[@]}" -gt 0 ] || fail "the unit has no RestrictAddressFamilies="
umask_value=$(unit_value UMask)
# The rest of the hardening docs/security.md names, as the installed unit has it (systemd alone
# applies them; TasksMax is checked against the running daemon's threads below).
[ "$(unit_value ProtectProc)" = invisible ] || fail "the unit lacks ProtectProc=invisible"
nofile=$(unit_value LimitNOFILE)
[[ "$nofile" =~ ^[0-9]+$ ]] && [ "$nofile" -ge 65536 ] || fail "the unit's LimitNOFILE is not 65536 or more: '$nofile'"
tasks_max=$(unit_value TasksMax)
[[ "$tasks_max" =~ ^[0-9]+$ ]] || fail "the unit's TasksMax is not a number: '$tasks_max'"
syscalls=" $(unit_value SystemCallFilter) "
for call in @system-service io_uring_setup io_uring_enter io_uring_register; do
  [[ "$syscalls" == *" $call "* ]] || fail "the unit's SystemCallFilter lacks $call:$syscalls"
done
mport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -i "s/^  listen: \"\" /  listen: \"127.0.0.1:$mport\" /" /etc/kvstream/kvstreamd.yaml
grep -q "listen: \"127.0.0.1:$mport\"" /etc/kvstream/kvstreamd.yaml || fail "could not set metrics.listen in the shipped config"
(umask "${umask_value:-0022}"
 exec "$restrict_families" "${families[@]}" -- setpriv --reuid kvstream --regid kvstream --init-groups \
   /usr/bin/kvstreamd --config /etc/kvstream/kvstreamd.yaml) 2> "$work/kvstreamd.log" &
pid=$!
wait_socket /run/kvstream/kvstreamd.sock || fail "no socket at /run/kvstream/kvstreamd.sock"
[ "$(stat -c %G:%a /run/kvstream/kvstreamd.sock)" = kvstream:660 ] || fail "socket is $(stat -c %G:%a /run/kvstream/kvstreamd.sock)"
head -c 3000000 /dev/urandom > "$work/chunk"
kvstreamctl put deb-test-key "$work/chunk" > /dev/null || fail "put"
kvstreamctl get deb-test-key "$work/back" > /dev/null || fail "get"
cmp "$work/chunk" "$work/back" || fail "bytes differ"
kvstreamctl health > "$work/health" || { cat "$work/health"; fail "health"; }
threads=$(find "/proc/$pid/task" -mindepth 1 -maxdepth 1 | wc -l)
[ "$threads" -le "$tasks_max" ] || fail "kvstreamd runs $threads threads, more than the unit's TasksMax=$tasks_max"
ls /var/lib/kvstream/nvme /var/lib/kvstream/pfs > /dev/null || fail "default tiers not under /var/lib/kvstream"
# GET PATH from the metrics port (bash's /dev/tcp: no curl needed): the whole response.
http_get() {
  timeout 5 bash -c 'exec 3<> "/dev/tcp/127.0.0.1/$1" && printf "GET %s HTTP/1.1\r\nHost: x\r\n\r\n" "$2" >&3 && cat <&3' \
    _ "$mport" "$1" | tr -d '\r'
}
http_get /metrics > "$work/metrics" || fail "no /metrics under RestrictAddressFamilies=${families[*]}"
head -1 "$work/metrics" | grep -q "^HTTP/1.1 200 " || fail "/metrics: $(head -1 "$work/metrics")"
grep -q '^kvstream_healthy 1$' "$work/metrics" || fail "/metrics lacks kvstream_healthy 1: $(head -5 "$work/metrics")"
[ "$(http_get /health | tail -1)" = OK ] || fail "/health is not OK"
# The stand-in bites: where the unit does not allow AF_INET, a connection fails.
if "$restrict_families" AF_UNIX -- bash -c "exec 3<> /dev/tcp/127.0.0.1/$mport" 2> /dev/null; then
  fail "restrict_families AF_UNIX let a TCP socket through"
fi
kill -TERM "$pid"
wait "$pid" || fail "kvstreamd exited with status $? on SIGTERM"
pid=""
[ "$mounted" = no ] || [ -n "$(find "$work/pfs" -name '*.kvc' -print -quit)" ] \
  || fail "the pfs tier wrote no chunk on the mounted file system: $(ls "$pfs")"
echo "installed kvstreamd ran as user kvstream under RestrictAddressFamilies=${families[*]} UMask=$umask_value:" \
     "put/get of 3 MB intact, /metrics and /health answer, health OK, $threads threads (TasksMax=$tasks_max), clean stop"

dpkg -r kvstream > "$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -r"; }
[ ! -e /usr/bin/kvstreamd ] || fail "dpkg -r left /usr/bin/kvstreamd"
[ -f /etc/kvstream/kvstreamd.yaml ] || fail "dpkg -r removed the config"
[ -d /var/lib/kvstream/nvme ] || fail "dpkg -r removed the cached KV"
find "$work/pfs" -type f | sort > "$work/pfs.before"
dpkg -P kvstream > "$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -P"; }
[ ! -e /etc/kvstream/kvstreamd.yaml ] || fail "dpkg -P left the config"
if [ "$mounted" = yes ]; then
  mountpoint -q "$pfs" || fail "dpkg -P unmounted or removed the mounted $pfs"
  [ "$(cat "$pfs/marker" 2> /dev/null)" = "another node's chunk" ] || fail "dpkg -P removed a file on the mounted file system"
  find "$work/pfs" -type f | sort | cmp -s - "$work/pfs.before" || fail "dpkg -P changed the mounted file system"
  grep -q "left these mount points" "$work/dpkg.log" || fail "dpkg -P did not say what it left: $(cat "$work/dpkg.log")"
  [ "$(ls -A /var/lib/kvstream)" = pfs ] || fail "dpkg -P left more than the mount point: $(ls -A /var/lib/kvstream)"
  umount "$pfs"
  rmdir "$pfs" /var/lib/kvstream
  echo "dpkg -r kept config and cache; dpkg -P removed both and left the file system mounted at $pfs" \
       "($(wc -l < "$work/pfs.before") files) untouched"
else
  [ ! -e /var/lib/kvstream ] || fail "dpkg -P left /var/lib/kvstream"
  echo "dpkg -r kept config and cache; dpkg -P removed both"
fi
