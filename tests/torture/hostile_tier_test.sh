#!/usr/bin/env bash
# Hostile files on a tier, against the real kvstreamd: whoever can write a tier directory (another
# node of a shared tier, an attacker, a careless script) must not crash, hang or poison the daemon.
# For each class the daemon starts within 5 s, stays up, serves the good chunks put before
# byte-identical, deletes nothing outside its tiers (nor the hostile names), stops on SIGTERM
# within 5 s, and the hostile key is a miss or a clear error:
#  a. chunk files with a valid header checksum whose header lies about sizes (a 2 TiB payload in
#     4 KiB segments, whose header size truncates to 4 KiB; a payload of 2^64-1 bytes);
#  b. a FIFO named like a chunk;
#  c. a fan-out directory that is a symlink to a directory outside the tier holding *.kvc.tmp.*;
#  d. the saved index (.kvstream.index) as a symlink to /dev/zero, and as a 64 GiB sparse file;
#  e. a socket, a directory and a symlink (to a valid chunk outside) named like chunks;
#  f. on a shared tier, those files published under keys by "another node" and looked up by a
#     running node;
#  g. on a shared tier with a cluster key (shared_key_file), a chunk whose MAC does not verify
#     (skipped, saying so, where the daemon does not know shared_key_file);
#  h. a tier directory, and a shared tier's .nodes, replaced by a symlink to outside while the
#     daemon runs: at SIGTERM its saved index lands in the directory it opened, nothing outside
#     is written; a .nodes, or a node's directory in it, that is a symlink at start is refused
#     with a clear error, nothing made outside;
#  i. on a shared tier with a cluster key, a chunk whose payload was rewritten to keep every
#     segment's XXH3-64 checksum (FORGE_PAYLOAD), its header and MAC intact: never served by a
#     second keyed node.
# Usage: hostile_tier_test.sh KVSTREAMD KVSTREAMCTL FORGE_CHUNK FORGE_PAYLOAD  (KVSTREAM_HOSTILE_CASES="a c": those only)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
daemon=$1 ctl=$2 forge=$3 forge_payload=$4
work=$(test_work_dir kvstream-hostile)
pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
current=""
fail() {
  echo "FAILED ($current): $*"
  for log in "$work"/*.log; do echo "--- $log"; tail -8 "$log"; done
  exit 1
}
case_() { current=$1; echo "== $1"; }
# KVSTREAM_HOSTILE_CASES="b d": only those classes (each runs on its own).
want() { [ -z "${KVSTREAM_HOSTILE_CASES:-}" ] || [[ " $KVSTREAM_HOSTILE_CASES " == *" $1 "* ]]; }

head -c 300000 /dev/urandom > "$work/good0.bin"
head -c 1500000 /dev/urandom > "$work/good1.bin"
mkdir -p "$work/outside"

# write_config NAME TIER_LINES [EXTRA]: a daemon config with its own socket.
write_config() {
  cat > "$work/$1.yaml" <<YAML
socket: {path: $work/$1.sock, mode: "0600"}
logging: {level: info}
${3:-}
tiers:
$2
YAML
}

# start NAME: starts kvstreamd with NAME.yaml; fails unless it answers within 5 s.
declare -A pid_of
start() {
  "$daemon" --config "$work/$1.yaml" >> "$work/$1.log" 2>&1 &
  pid_of[$1]=$!
  pids+=($!)
  for _ in $(seq 50); do
    "$ctl" --socket "$work/$1.sock" stats > /dev/null 2>&1 && return 0
    kill -0 "${pid_of[$1]}" 2>/dev/null || fail "$1 exited at start ($(wait "${pid_of[$1]}"; echo "status $?"))"
    sleep 0.1
  done
  fail "$1 did not answer within 5 s of its start"
}

# stop NAME: SIGTERM; fails unless the daemon is gone within 5 s.
stop() {
  local p=${pid_of[$1]}
  kill -0 "$p" 2>/dev/null || fail "$1 is not running any more (crashed?)"
  kill -TERM "$p"
  for _ in $(seq 50); do
    kill -0 "$p" 2>/dev/null || { wait "$p" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  fail "$1 did not stop within 5 s of SIGTERM"
}

# refused NAME PATTERN: kvstreamd with NAME.yaml exits non-zero within 5 s, saying PATTERN.
refused() {
  local rc=0
  timeout 5 "$daemon" --config "$work/$1.yaml" > "$work/refused.txt" 2>&1 || rc=$?
  [ "$rc" -ne 124 ] || fail "$1 started (or hung) where it must refuse: $2"
  [ "$rc" -ne 0 ] || fail "$1 exited 0 where it must refuse: $2"
  grep -q "$2" "$work/refused.txt" || fail "$1 did not say '$2': $(tail -2 "$work/refused.txt")"
}

# untouched DIR: DIR holds only .kvstream.index, and that says "precious" (written before).
untouched() {
  [ "$(ls -A "$1")" = .kvstream.index ] || fail "written outside the tier, in $1: $(ls -A "$1" | tr '\n' ' ')"
  [ "$(cat "$1/.kvstream.index")" = precious ] || fail "$1/.kvstream.index, outside the tier, was overwritten"
}

ctl() { local name=$1; shift; timeout 10 "$ctl" --socket "$work/$name.sock" "$@"; }

# served NAME: the good chunks read back byte-identical.
served() {
  for i in 0 1; do
    ctl "$1" get "good$i" "$work/out.bin" > /dev/null 2>&1 || fail "$1: good$i not served"
    cmp -s "$work/good$i.bin" "$work/out.bin" || fail "$1: good$i not byte-identical"
  done
}

# missed NAME KEY: KEY is a miss or a clear error, within the 10 s timeout, and the daemon is up.
missed() {
  local rc=0
  ctl "$1" get "$2" "$work/out.bin" > "$work/get.txt" 2>&1 || rc=$?
  [ "$rc" -ne 124 ] || fail "$1: get $2 hung"
  [ "$rc" -ne 0 ] || fail "$1: the hostile key $2 was served"
  kill -0 "${pid_of[$1]}" 2>/dev/null || fail "$1 died on get $2"
  ctl "$1" stats > /dev/null || fail "$1 does not answer after get $2"
}

survives() { for f in "$@"; do [ -e "$f" ] || [ -L "$f" ] || fail "$f was deleted"; done; }

# A private daemon with two tiers, the good chunks put and a clean stop (a saved index each).
write_config p "  - {name: t0, path: $work/t0, capacity: 256MiB}
  - {name: t1, path: $work/t1, capacity: 256MiB}"
start p
for i in 0 1; do ctl p put "good$i" "$work/good$i.bin" > /dev/null || fail "put good$i"; done
stop p
# rel KEY: the chunk path of KEY below a tier (what forge_chunk --dir writes).
rel() { local p; p=$("$forge" --dir "$work/scratch" --key "$1"); echo "${p#"$work/scratch/"}"; }

# Each class on t0 (t1 keeps a replica of every good chunk either way); the saved indexes are
# removed first so that the start reads every file of the tier.
restart_with_hostile_files() {
  rm -f "$work/t0/.kvstream.index" "$work/t1/.kvstream.index"
  start p
  served p
}

if want a; then
case_ "a. headers with valid checksums that lie about sizes"
"$forge" --dir "$work/t0" --key lie-2tib --payload-size $((1 << 41)) --segment-size 4096 > /dev/null
"$forge" --dir "$work/t0" --key lie-u64 --payload-size 0xffffffffffffffff --segment-size 4096 > /dev/null
"$forge" --dir "$work/t0" --key lie-count --payload-size 8192 --segment-count 1000000 --header-size 4096 > /dev/null
restart_with_hostile_files
for k in lie-2tib lie-u64 lie-count; do missed p "$k"; done
stop p

fi
if want b; then
case_ "b. a FIFO named like a chunk"
fifo="$work/t0/$(rel fifo)"
mkdir -p "$(dirname "$fifo")"
mkfifo "$fifo"
restart_with_hostile_files
missed p fifo
stop p
survives "$fifo"

fi
if want c; then
case_ "c. a fan-out directory that is a symlink to outside the tier, holding temporaries"
linked=$(rel linked-dir)
fan=${linked%%/*}
mkdir -p "$work/outside/fan"
echo "not the daemon's" > "$work/outside/fan/${linked#*/}.tmp.1.1"
echo "nor this" > "$work/outside/fan/0123.kvc.tmp.7.7"
cp "$work/t1/$(rel good0)" "$work/outside/fan/${linked#*/}"  # a valid chunk of another key
[ -e "$work/t0/$fan" ] && mv "$work/t0/$fan" "$work/t0.$fan.moved"  # (rare: the fan-out name is in use)
ln -s "$work/outside/fan" "$work/t0/$fan"
restart_with_hostile_files
missed p linked-dir
stop p
survives "$work/outside/fan/${linked#*/}.tmp.1.1" "$work/outside/fan/0123.kvc.tmp.7.7" "$work/outside/fan/${linked#*/}"
rm "$work/t0/$fan"
[ -e "$work/t0.$fan.moved" ] && mv "$work/t0.$fan.moved" "$work/t0/$fan"

fi
if want d; then
case_ "d. the saved index a symlink to /dev/zero, then a 64 GiB sparse file"
start p
stop p  # a clean stop: each tier has its saved index again
ln -sf /dev/zero "$work/t0/.kvstream.index"
start p
served p
stop p
survives "$work/t0/.kvstream.index"
rm -f "$work/t0/.kvstream.index"
truncate -s 64G "$work/t0/.kvstream.index"
start p
served p
stop p

fi
if want e; then
case_ "e. a socket, a directory and a symlink to a valid chunk outside, named like chunks"
sockfile="$work/t0/$(rel socket)"
mkdir -p "$(dirname "$sockfile")"
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$sockfile"
dirfile="$work/t0/$(rel directory)"
mkdir -p "$dirfile"
cp "$work/t1/$(rel good1)" "$work/outside/good1.kvc"
mkdir -p "$(dirname "$work/t0/$(rel symlinked)")"
ln -s "$work/outside/good1.kvc" "$work/t0/$(rel symlinked)"
restart_with_hostile_files
for k in socket directory symlinked; do missed p "$k"; done
stop p
survives "$sockfile" "$dirfile" "$work/t0/$(rel symlinked)" "$work/outside/good1.kvc"

# Shared: two nodes on one directory, each with a private tier of its own too.
fi
if want f; then
case_ "f. hostile files published on a shared tier by another node"
shared="$work/shared"
for n in n1 n2; do
  write_config "$n" "  - {name: own, path: $work/$n-own, capacity: 256MiB}
  - {name: pfs, path: $shared, capacity: 256MiB, shared: true, miss_ttl: 0s}" "node: $n"
done
start n1
start n2
for i in 0 1; do ctl n1 put "good$i" "$work/good$i.bin" > /dev/null || fail "put good$i on n1"; done
served n2  # from n1's published files
"$forge" --dir "$shared" --key pub-lie --payload-size $((1 << 41)) --segment-size 4096 > /dev/null
pub_fifo="$shared/$(rel pub-fifo)"
mkdir -p "$(dirname "$pub_fifo")"
mkfifo "$pub_fifo"
pub_link="$shared/$(rel pub-link)"
mkdir -p "$(dirname "$pub_link")"
ln -s "$work/outside/good1.kvc" "$pub_link"
for k in pub-lie pub-fifo pub-link; do missed n2 "$k"; done
served n2
stop n2
stop n1
survives "$pub_fifo" "$pub_link" "$work/outside/good1.kvc"

fi
if want g; then
case_ "g. a chunk whose MAC does not verify under the cluster key"
head -c 32 /dev/urandom > "$work/cluster.key"
head -c 32 /dev/urandom > "$work/other.key"
chmod 0600 "$work/cluster.key" "$work/other.key"
shared_g="$work/shared-g"
write_config g1 "  - {name: pfs, path: $shared_g, capacity: 256MiB, shared: true, miss_ttl: 0s}" "node: g1
shared_key_file: $work/cluster.key"
write_config g2 "  - {name: pfs, path: $shared_g, capacity: 256MiB, shared: true, miss_ttl: 0s}" "node: g2
shared_key_file: $work/other.key"
# A daemon that does not know the key refuses the config at once.
"$daemon" --config "$work/g1.yaml" > "$work/check.txt" 2>&1 & probe=$!
pids+=($probe)
for _ in $(seq 30); do kill -0 "$probe" 2>/dev/null || break; sleep 0.1; done
kill -9 "$probe" 2>/dev/null || true
wait "$probe" 2>/dev/null || true
if ! grep -q "shared_key_file.* is not a known key" "$work/check.txt"; then
  start g1
  start g2
  ctl g2 put forged "$work/good0.bin" > /dev/null || fail "put on g2 (another key)"
  ctl g1 put good1 "$work/good1.bin" > /dev/null || fail "put on g1"
  missed g1 forged
  ctl g1 get good1 "$work/out.bin" > /dev/null && cmp -s "$work/good1.bin" "$work/out.bin" || fail "g1: good1"
  stop g2
  stop g1
else
  echo "SKIPPED case g: this kvstreamd does not accept shared_key_file: $(head -1 "$work/check.txt")"
fi
fi
if want h; then
case_ "h. tier directories replaced by symlinks while running, a shared tier's .nodes a symlink at start"
mkdir -p "$work/outside/h"
echo precious > "$work/outside/h/.kvstream.index"
start p
mv "$work/t0" "$work/t0.moved"
ln -s "$work/outside/h" "$work/t0"
stop p
untouched "$work/outside/h"
[ -f "$work/t0.moved/.kvstream.index" ] || fail "t0's saved index is not in the directory it opened"
rm "$work/t0"
mv "$work/t0.moved" "$work/t0"
shared_h="$work/shared-h"
write_config h1 "  - {name: pfs, path: $shared_h, capacity: 256MiB, shared: true}" "node: h1"
start h1
ctl h1 put good0 "$work/good0.bin" > /dev/null || fail "put on h1"
mkdir -p "$work/outside/hn/h1"
echo precious > "$work/outside/hn/h1/.kvstream.index"
mv "$shared_h/.nodes" "$shared_h/.nodes.moved"  # another writer of the shared directory
ln -s "$work/outside/hn" "$shared_h/.nodes"
stop h1
untouched "$work/outside/hn/h1"
[ -f "$shared_h/.nodes.moved/h1/.kvstream.index" ] || fail "h1's saved index is not in its own directory"
rm -r "$work/outside/hn/h1"
refused h1 "\.nodes is not a directory (found: symbolic link)"
[ -z "$(ls -A "$work/outside/hn")" ] || fail "made outside the tier: $(ls -A "$work/outside/hn")"
rm "$shared_h/.nodes"
mv "$shared_h/.nodes.moved" "$shared_h/.nodes"
mv "$shared_h/.nodes/h1" "$work/h1.moved"
ln -s "$work/outside/hn" "$shared_h/.nodes/h1"
refused h1 "\.nodes/h1 is not a directory (found: symbolic link)"
[ -z "$(ls -A "$work/outside/hn")" ] || fail "made outside the tier: $(ls -A "$work/outside/hn")"
rm "$shared_h/.nodes/h1"
mv "$work/h1.moved" "$shared_h/.nodes/h1"
start h1
ctl h1 get good0 "$work/out.bin" > /dev/null && cmp -s "$work/good0.bin" "$work/out.bin" || fail "h1: good0 after its directories came back"
stop h1
fi
if want i; then
case_ "i. a payload forged to keep its XXH3 segment checksums under an intact MAC"
[ -f "$work/cluster.key" ] || { head -c 32 /dev/urandom > "$work/cluster.key"; chmod 0600 "$work/cluster.key"; }
shared_i="$work/shared-i"
for n in i1 i2; do
  write_config "$n" "  - {name: pfs, path: $shared_i, capacity: 256MiB, shared: true, miss_ttl: 0s}" "node: $n
shared_key_file: $work/cluster.key"
done
start i1
ctl i1 put victim "$work/good1.bin" > /dev/null || fail "put victim on i1"
ctl i1 put good0 "$work/good0.bin" > /dev/null || fail "put good0 on i1"
stop i1
victim="$shared_i/$(rel victim)"
head -c 4096 "$victim" > "$work/victim.header"
"$forge_payload" "$victim" > "$work/forge.txt" || fail "forge_payload: $(cat "$work/forge.txt")"
cmp -s <(head -c 4096 "$victim") "$work/victim.header" || fail "the forgery changed the header"
start i2
missed i2 victim
ctl i2 get good0 "$work/out.bin" > /dev/null && cmp -s "$work/good0.bin" "$work/out.bin" || fail "i2: good0"
stop i2
survives "$victim"
fi
echo "every hostile tier file was skipped or missed: no crash, no hang, nothing outside deleted or written"
