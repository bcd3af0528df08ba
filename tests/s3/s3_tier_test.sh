#!/usr/bin/env bash
# An s3 tier on a real S3 server: moto_server checking every request's signature
# (tools/lib/s3.sh, --auth), behind the fault proxy tools/harness/s3fault.py. Node n1 has a local
# tier and an s3 tier through the proxy (replication all), so a fault on s3 lands on a chunk that
# local also holds. Each case checks what it says (bytes with cmp, step results, health, stats):
#  1. put: the replica on s3 is an object of the chunk's exact size, counted durable (an answered
#     PUT); get from s3 alone (routing static:0) is byte-identical;
#  2. restarts: after a clean stop the next start takes the saved index object (no listing of
#     headers), after a SIGKILL it lists the prefix and reads every header; both serve the chunks;
#  3. the server down in the middle of a step (the proxy refuses connections): the step is served
#     from local within the step limit, health names s3 stalled, and once the server is back the
#     tier is used again by itself;
#  4. the server frozen (SIGSTOP) in the middle of a step: the same, and a persist meanwhile goes on;
#  5. SlowDown and 500 storms (half the requests): every get is whole and byte-identical, retries
#     are counted (a read that fails every attempt is served from local), and the tier is not
#     taken for hung (a store that answers 503 is answering);
#  6. hostile objects: an object altered in the bucket, one truncated, and GET bodies corrupted or
#     cut by the proxy: never a wrong byte served; on a node with only the s3 tier, a miss;
#  7. wrong credentials: kvstreamd refuses to start, naming the tier and the store's answer;
#  8. shared: two nodes on one prefix with a cluster key: one publishes, the other finds it and
#     serves it byte-identical; a node without the key serves none of it;
#  9. TLS: https to moto with a self-signed certificate is refused at start as untrusted (the error
#     names the certificate) and, with tls_verify false, serves byte-identical chunks.
# Usage: s3_tier_test.sh KVSTREAMD KVSTREAMCTL KVTORTURE   (exit 77: skipped, no moto_server)
set -euo pipefail
kvstreamd=$1 ctl_bin=$2 torture=$3
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/s3.sh
source "$root/tools/lib/s3.sh"
# shellcheck source-path=SCRIPTDIR source=../support/daemon_nodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/daemon_nodes.sh"
why=$(s3_missing)
[ -z "$why" ] || skip "$why"
work=$(test_work_dir s3tier)
cleanup() {
  set +e
  s3_server_resume 2> /dev/null
  kvstreamd_stop_all 2> /dev/null
  s3_fault_stop
  s3_server_stop
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "FAILED: line $LINENO: $BASH_COMMAND"' ERR
started=$SECONDS
case_() { echo "== $* ($((SECONDS - started)) s)"; }

s3_server_start --auth "$work/s3"
s3_fault_start "$work/s3" --seed 7
s3_make_bucket kvs
s3_credentials_file "$work/s3.credentials"
s3_credentials_file "$work/wrong.credentials" "$S3_ACCESS_KEY_ID" "not-the-secret"
head -c 32 /dev/urandom > "$work/cluster.key"
head -c 32 /dev/urandom > "$work/other.key"
chmod 0600 "$work/cluster.key" "$work/other.key"
# The proxy's control, as a command line (for kvtorture's hooks) and as a function.
fault_ctl="$(s3_python) $root/tools/harness/s3fault.py ctl $s3_fault_control"
fault() { $fault_ctl "$@" > /dev/null; }

declare -A pid=()
# node NAME LOCAL PREFIX [SHARED KEYFILE [CREDENTIALS]]: writes NAME.yaml and starts it; LOCAL 0:
# no local tier.
node_config() {
  local name=$1 local=$2 prefix=$3 shared=${4:-false} key=${5:-} credentials=${6:-$work/s3.credentials}
  {
    echo "socket: {path: $work/$name.sock, mode: \"0600\"}"
    echo "node: $name"
    echo "logging: {level: info}"
    echo "block_size: 1MiB"
    echo "policies: {replication: all}"
    [ -z "$key" ] || echo "shared_key_file: $key"
    echo "tiers:"
    [ "$local" = 0 ] || echo "  - {name: local, path: $work/local-$name, capacity: 1GiB}"
    echo "  - {name: s3, type: s3, endpoint: $S3_FAULT_ENDPOINT, bucket: kvs, prefix: $prefix,"
    echo "     credentials_file: $credentials, request_timeout: 2s, capacity: 1GiB, shared: $shared}"
  } > "$work/$name.yaml"
}
node() {
  node_config "$@"
  kvstreamd_start "$work/$1.yaml" "$work/$1.log"
  pid[$1]=$daemon
}
# served_right NODE KEY FILE: NODE serves KEY byte-identical to FILE, or misses; never other bytes.
served_right() {
  if ctl "$1" get "$2" "$work/out.bin" > /dev/null 2>&1; then
    cmp -s "$3" "$work/out.bin" || fail "$1 served wrong bytes for $2"
    return 0
  fi
  return 1
}
objects() { grep -c '\.kvc$' <<< "$(s3_list kvs "$1")" || true; }

for i in 1 2 3 4 5 6; do head -c $((3000000 + i * 100000)) /dev/urandom > "$work/c$i.bin"; done
node n1 1 n1/

case_ "1. put: an object of the chunk's size, durable; a get from s3 alone is byte-identical"
for i in 1 2 3 4; do
  out=$(ctl n1 put "k$i" "$work/c$i.bin") || fail "n1: put k$i: $out"
  [[ $out == *"written to tier mask 0x3, durable (synced) on tier mask 0x2"* ]] || fail "n1: put k$i says: $out"
done
[ "$(objects n1/)" = 4 ] || fail "the bucket holds $(objects n1/) chunk objects under n1/, not 4: $(s3_list kvs)"
ctl n1 policy --routing static:0 > /dev/null  # every block from s3
before=$(tier_json n1 s3 bytes_read)
for i in 1 2 3 4; do got n1 "k$i" "$work/c$i.bin" || fail "n1: k$i from s3"; done
[ $(($(tier_json n1 s3 bytes_read) - before)) -ge 12000000 ] || fail "n1 read $(($(tier_json n1 s3 bytes_read) - before)) bytes from s3"

case_ "2. restarts: the saved index after a clean stop, every header after a SIGKILL"
kvstreamd_stop "${pid[n1]}" || fail "n1 did not stop cleanly"
grep -q 'n1/.kvstream.index$' <<< "$(s3_list kvs n1/)" || fail "no saved index object after a clean stop: $(s3_list kvs n1/)"
node n1 1 n1/
grep -q 'n1/.kvstream.index$' <<< "$(s3_list kvs n1/)" && fail "the saved index object is still there after the start"
[ "$(tier_json n1 s3 chunks)" = 4 ] || fail "n1's s3 tier indexes $(tier_json n1 s3 chunks) chunks after a clean restart"
kill -9 "${pid[n1]}"
wait "${pid[n1]}" 2> /dev/null || true
unset "kvstreamd_logs[${pid[n1]}]"
rm -rf "$work/local-n1"  # only s3 holds them now
node n1 1 n1/
[ "$(tier_json n1 s3 chunks)" = 4 ] || fail "n1's s3 tier indexes $(tier_json n1 s3 chunks) chunks after a SIGKILL"
ctl n1 policy --routing static:0 > /dev/null
for i in 1 2 3 4; do got n1 "k$i" "$work/c$i.bin" || fail "n1: k$i after the cold start"; done
for i in 1 2 3 4; do ctl n1 put "k$i" "$work/c$i.bin" > /dev/null; done  # local holds them again
until_ 5 on_tiers n1 k4 3 || fail "k4 is not on both tiers again"

# Steps on n1 read s3 only (routing static:0), so a fault lands in the middle of its reads.
stall() {  # kvtorture stall on n1: 16 x 4 MiB
  "$torture" stall --socket "$work/n1.sock" --chunks 16 --chunk-size 4194304 --hook-after-ms 30 "$@"
}

case_ "3. the server down in the middle of a step: served from local, s3 stalled, then back"
out=$(stall --hook "$fault_ctl down" --undo "$fault_ctl up" --expect-stalled s3 --step-limit 5 --health-limit 5 \
  --persist-limit 10) || { fault up; fail "the step with the server down: $out"; }
echo "$out"
fault up
until_ 10 healthy n1 || fail "n1 not healthy 10 s after the server came back: $(ctl n1 health)"
out=$(ctl n1 put after3 "$work/c5.bin")
[[ $out == *"tier mask 0x3"* ]] || fail "n1: put after3 not on both tiers: $out"

case_ "4. the server frozen (SIGSTOP) in the middle of a step: served from local, s3 stalled, then back"
out=$(stall --hook "kill -STOP $s3_pid" --undo "kill -CONT $s3_pid" --expect-stalled s3 --step-limit 5 \
  --health-limit 5 --persist-limit 5) || { s3_server_resume; fail "the step with the server frozen: $out"; }
echo "$out"
s3_server_resume
until_ 15 healthy n1 || fail "n1 not healthy 15 s after the server went on: $(ctl n1 health)"
out=$(ctl n1 put after4 "$work/c6.bin")
[[ $out == *"tier mask 0x3"* ]] || fail "n1: put after4 not on both tiers: $out"

case_ "5. SlowDown and 500 storms: every get whole and byte-identical, retries counted"
retries=$(tier_json n1 s3 resubmits)
errors=$(tier_json n1 s3 read_errors)
for storm in slowdown error500; do
  fault "$storm" 0.5
  for i in 1 2 3 4; do got n1 "k$i" "$work/c$i.bin" || fail "n1: k$i under a $storm storm"; done
  healthy n1 || fail "n1 is not healthy under a $storm storm (busy is not hung): $(ctl n1 health)"
  fault clear
done
[ "$(tier_json n1 s3 resubmits)" -gt "$retries" ] || fail "no retry counted under the storms"
echo "retries: $(($(tier_json n1 s3 resubmits) - retries)), read errors: $(($(tier_json n1 s3 read_errors) - errors))"

case_ "6. hostile objects: altered, truncated, corrupted or cut in flight: never a wrong byte"
# put_object KEY FILE: n1 persists KEY and prints the object name it added under n1/.
put_object() {
  local before after
  before=$(s3_list kvs n1/ | awk '{print $2}' | sort)
  ctl n1 put "$1" "$2" > /dev/null || fail "n1: put $1"
  after=$(s3_list kvs n1/ | awk '{print $2}' | sort)
  comm -13 <(echo "$before") <(echo "$after") | grep '\.kvc$'
}
for k in 1 2; do
  object=$(put_object "bad$k" "$work/c$k.bin")
  [ -n "$object" ] || fail "no new object for bad$k"
  s3_get kvs "$object" "$work/obj.bin"
  if [ "$k" = 1 ]; then  # one payload byte flipped
    python3 -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[len(b) // 2] ^= 1; open(sys.argv[1], 'wb').write(b)" "$work/obj.bin"
  else  # cut in half
    truncate -s $(($(stat -c %s "$work/obj.bin") / 2)) "$work/obj.bin"
  fi
  s3_put kvs "$object" "$work/obj.bin"
done
got n1 bad1 "$work/c1.bin" || fail "n1: bad1 (altered on s3) not served byte-identical from local"
got n1 bad2 "$work/c2.bin" || fail "n1: bad2 (truncated on s3) not served byte-identical from local"
for bad in corrupt truncate; do
  fault "$bad" 1 methods=GET
  for i in 3 4; do got n1 "k$i" "$work/c$i.bin" || fail "n1: k$i with every GET body under $bad"; done
  fault clear
done
ctl n1 --json stats | grep -q '"retrieve_failures": *0,' || fail "n1: failed retrieves: $(ctl n1 --json stats)"
node n2 0 n2/
ctl n2 put only1 "$work/c3.bin" > /dev/null || fail "n2: put only1"
fault corrupt 1 methods=GET
if served_right n2 only1 "$work/c3.bin"; then fail "n2 served only1 with every GET body corrupted"; fi
fault clear
# The bad copy is out of the index (a checksum mismatch is a bad replica, wherever it went bad).
served_right n2 only1 "$work/c3.bin" || echo "n2: only1 is a miss after its corrupted read"
kvstreamd_stop "${pid[n2]}" || true

case_ "7. wrong credentials: kvstreamd refuses to start, naming the tier"
node_config bad 1 bad/ false "" "$work/wrong.credentials"
if "$kvstreamd" --config "$work/bad.yaml" 2> "$work/bad.log"; then fail "kvstreamd started with a wrong secret"; fi
grep -q "tier 's3'" "$work/bad.log" || fail "the error does not name the tier: $(tail -3 "$work/bad.log")"
grep -qi "SignatureDoesNotMatch\|denied\|403" "$work/bad.log" || fail "the error does not say why: $(tail -3 "$work/bad.log")"
tail -1 "$work/bad.log"

case_ "8. shared: one node publishes, another finds and serves it; a node with another key does not"
node s1 0 shared/ true "$work/cluster.key"
node s2 0 shared/ true "$work/cluster.key"
node s3n 0 shared/ true "$work/other.key"
ctl s1 put pub1 "$work/c4.bin" > /dev/null || fail "s1: put pub1"
until_ 3 present s2 pub1 || fail "s2 does not find pub1 3 s after s1 published it"
got s2 pub1 "$work/c4.bin" || fail "s2: pub1 not byte-identical"
! present s3n pub1 || fail "s3n (another key) finds pub1"
! ctl s3n get pub1 "$work/out.bin" > /dev/null 2>&1 || fail "s3n serves pub1"

case_ "9. TLS: https to a server with a self-signed certificate: refused as untrusted, served with tls_verify false"
tls_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$(s3_moto_server)" -H 127.0.0.1 -p "$tls_port" -s > "$work/moto-tls.log" 2>&1 &
tls_pid=$!
tls_up() { S3CLI_OPTIONS="--no-verify" s3cli --endpoint "https://127.0.0.1:$tls_port" ping > /dev/null 2>&1; }
until_ 30 tls_up || fail "moto_server -s did not answer on https://127.0.0.1:$tls_port: $(tail -3 "$work/moto-tls.log")"
S3CLI_OPTIONS="--no-verify" s3cli --endpoint "https://127.0.0.1:$tls_port" mb tls > /dev/null
for verify in true false; do
  node_config "tls-$verify" 0 t/
  sed -i "s|endpoint: $S3_FAULT_ENDPOINT, bucket: kvs|endpoint: https://127.0.0.1:$tls_port, bucket: tls|; s|shared: false}|shared: false, tls_verify: $verify}|" \
    "$work/tls-$verify.yaml"
done
if "$kvstreamd" --config "$work/tls-true.yaml" 2> "$work/tls-true.log"; then fail "kvstreamd trusted a self-signed certificate"; fi
grep -q "certificate" "$work/tls-true.log" || fail "the refusal does not name the certificate: $(tail -2 "$work/tls-true.log")"
kvstreamd_start "$work/tls-false.yaml" "$work/tls-false.log"
ctl tls-false put tls1 "$work/c5.bin" > /dev/null || fail "put over https"
got tls-false tls1 "$work/c5.bin" || fail "tls1 over https not byte-identical"
kvstreamd_stop "$daemon" || true
kill "$tls_pid"
wait "$tls_pid" 2> /dev/null || true
echo "S3: the cases passed in $((SECONDS - started)) s"
