#!/usr/bin/env bash
# tools/lib/s3.sh on a real moto_server: started on a free port and answering, the helpers (bucket,
# put, get, list, delete; stdin and stdout; status 3 for a missing key), paused (a request waits)
# and resumed, stopped (its port refuses) idempotently; a moto_server that exits at start failing
# fast; with --auth, real SigV4 checks (a wrong secret 403 SignatureDoesNotMatch, an unknown key
# 403 InvalidAccessKeyId, a user without a policy 403 AccessDenied), a new IAM user's key working,
# and a 0600 credentials file that boto3 reads; s3fault in front of the authenticating server
# (signatures still verify through it, a fault set through s3_fault is seen and counted, down and
# up).
# Usage: s3_lib_test.sh   (exit 77: skipped without moto_server and boto3, see tools/lib/s3.sh)
# shellcheck disable=SC2016,SC2034  # check ... eval '...': expanded (and used) when the check runs
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/s3.sh
source "$root/tools/lib/s3.sh"
why=$(s3_missing)
[ -z "$why" ] || skip "$why"
failures=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}
eq() { [ "$1" = "$2" ] || { echo "     got '$1', want '$2'"; return 1; }; }
has() { grep -qF -- "$2" <<< "$1" || { echo "     '$2' not in: $1"; return 1; }; }
refuses() { ! s3cli --endpoint "$1" ping 2> /dev/null; }

work=$(test_work_dir s3-lib)
trap 's3_fault_stop; s3_server_stop; rm -rf "$work"' EXIT
head -c $((3 * 1024 * 1024 + 17)) /dev/urandom > "$work/obj"

# --- without authentication ---
s3_server_start "$work/moto"
pid=$s3_pid endpoint=$S3_ENDPOINT
check "s3_server_start: S3_ENDPOINT on 127.0.0.1" has "$endpoint" "http://127.0.0.1:"
check "  its pid and port in DIR" eq "$(cat "$work/moto/moto.pid"):$(cat "$work/moto/moto.port")" "$pid:${endpoint##*:}"
check "  the test keys exported" eq "$S3_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "kvstream-test:kvstream-test-secret"
check "s3_make_bucket" s3_make_bucket kvs-test
check "s3_put a 3 MiB object" s3_put kvs-test dir/obj "$work/obj"
check "s3_get it back" s3_get kvs-test dir/obj "$work/got"
check "  byte-identical" cmp -s "$work/obj" "$work/got"
printf 'hello' | s3_put kvs-test small -
check "s3_put from stdin, s3_get to stdout" eq "$(s3_get kvs-test small -)" "hello"
check "s3_list: SIZE KEY lines" eq "$(s3_list kvs-test)" "$(printf '%s dir/obj\n5 small' $((3 * 1024 * 1024 + 17)))"
check "s3_list with a prefix" eq "$(s3_list kvs-test dir/)" "$((3 * 1024 * 1024 + 17)) dir/obj"
s3_get kvs-test nothing-here "$work/none" 2> "$work/err"; rc=$?
check "s3_get of a missing key: status 3" eq "$rc" 3
check "  saying NoSuchKey" has "$(cat "$work/err")" "NoSuchKey (HTTP 404)"
check "s3_delete" s3_delete kvs-test small
check "  the key is gone" eq "$(s3_list kvs-test)" "$((3 * 1024 * 1024 + 17)) dir/obj"

s3_server_pause
check "s3_server_pause: the server is stopped (state T)" eq "$(cut -d' ' -f3 "/proc/$pid/stat")" T
timeout 2 bash -c "$(declare -f s3cli s3_python s3_moto_server); root='$root'; S3CLI_OPTIONS=--no-retries s3cli ls kvs-test" > /dev/null 2>&1
check "  a request waits on it (no answer in 2 s)" eq "$?" 124
s3_server_resume
check "s3_server_resume: it answers again" eq "$(s3_get kvs-test dir/obj - | cmp - "$work/obj" && echo same)" same

s3_server_stop
check "s3_server_stop: the process is gone" eval "! kill -0 $pid 2> /dev/null"
check "  its port refuses" refuses "$endpoint"
check "  S3_ENDPOINT unset" eq "${S3_ENDPOINT:-unset}" unset
check "  a second stop does nothing" s3_server_stop

# The scripts that source it run under set -euo pipefail: nothing in it may trip that.
out=$(bash -c 'set -euo pipefail; source "$1/tools/lib/common.sh"; source "$1/tools/lib/s3.sh"
  trap "s3_fault_stop; s3_server_stop" EXIT  # (when it fails half-way too)
  s3_server_start "$2"; s3_fault_start "$2"; s3_make_bucket strict; s3_put strict k /dev/null
  s3_list strict; s3_fault stats > /dev/null; s3_fault_stop; s3_server_stop; echo done' _ "$root" "$work/strict" 2>&1)
check "start, helpers and stop under set -euo pipefail" eq "$out" "$(printf '0 k\ndone')"
err=$( (KVSTREAM_MOTO_SERVER=/bin/false S3_START_SECONDS=5 s3_server_start "$work/bad") 2>&1); rc=$?
check "a moto_server that exits at start: s3_server_start dies" eq "$rc" 1
check "  with its status" has "$err" "moto_server exited with status 1 before it answered"

# --- with authentication ---
s3_server_start --auth "$work/moto-auth"
admin_id=$S3_ACCESS_KEY_ID admin_secret=$S3_SECRET_ACCESS_KEY
check "s3_server_start --auth: an IAM admin's key exported" eval '[ "$admin_id" != kvstream-test ] && [ ${#admin_secret} -ge 20 ]'
check "  the admin's key is accepted" s3_make_bucket kvs-auth
check "  and signs a put and a get" eval 's3_put kvs-auth obj "$work/obj" && s3_get kvs-auth obj "$work/got-auth" && cmp -s "$work/obj" "$work/got-auth"'
out=$(S3_SECRET_ACCESS_KEY=wrong-secret S3CLI_OPTIONS=--no-retries s3_list kvs-auth 2>&1); rc=$?
check "a wrong secret: refused" eq "$rc" 1
check "  403 SignatureDoesNotMatch" has "$out" "SignatureDoesNotMatch (HTTP 403)"
out=$(S3_ACCESS_KEY_ID=AKIANOSUCHKEY0000000 S3CLI_OPTIONS=--no-retries s3_get kvs-auth obj - 2>&1 > /dev/null); rc=$?
check "an unknown key: 403 InvalidAccessKeyId" eq "$rc:$out" "1:s3cli: get: InvalidAccessKeyId (HTTP 403)"
out=$(S3_ACCESS_KEY_ID=kvstream-test S3_SECRET_ACCESS_KEY=kvstream-test-secret s3_list kvs-auth 2>&1); rc=$?
check "the test keys are refused once authentication is on" eq "$rc:$out" "1:s3cli: ls: InvalidAccessKeyId (HTTP 403)"
keys=$(s3_create_access_key tier-user)
check "s3_create_access_key: ACCESS_KEY_ID SECRET" eval '[[ "$keys" =~ ^[A-Z0-9]{16,}\ [^\ ]{20,}$ ]]'
check "  the new key reads" eval 'S3_ACCESS_KEY_ID=${keys% *} S3_SECRET_ACCESS_KEY=${keys#* } s3_get kvs-auth obj - | cmp -s - "$work/obj"'
out=$(S3_ACCESS_KEY_ID=${keys% *} S3_SECRET_ACCESS_KEY=${keys#* } s3cli iam-key not-allowed 2>&1); rc=$?
check "  but is no admin: IAM 403 AccessDenied" eq "$rc:$out" "1:s3cli: iam-key: AccessDenied (HTTP 403)"

s3_credentials_file "$work/credentials" "${keys% *}" "${keys#* }"
check "s3_credentials_file: mode 0600" eq "$(stat -c %a "$work/credentials")" 600
check "  profile default with the key" eq "$(sed -n 1,2p "$work/credentials")" "$(printf '[default]\naws_access_key_id = %s' "${keys% *}")"
read_with_file() {  # boto3's own credential chain on a credentials file: no key in the environment
  env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_SHARED_CREDENTIALS_FILE="$1" AWS_CONFIG_FILE=/dev/null \
    "$(s3_python)" -c 'import boto3, sys; from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1", config=Config(retries={"total_max_attempts": 1}))
sys.stdout.buffer.write(s3.get_object(Bucket="kvs-auth", Key="obj")["Body"].read())' "$S3_ENDPOINT"
}
check "  boto3 reads through it" eval 'read_with_file "$work/credentials" | cmp -s - "$work/obj"'
s3_credentials_file "$work/credentials-bad" "${keys% *}" not-the-secret
out=$(read_with_file "$work/credentials-bad" 2>&1 > /dev/null)
check "  a file with a wrong secret: SignatureDoesNotMatch" has "$out" "SignatureDoesNotMatch"
touch "$work/credentials-existing" && chmod 644 "$work/credentials-existing"
s3_credentials_file "$work/credentials-existing"
check "  over an existing 0644 file: 0600, the exported keys" eq "$(stat -c %a "$work/credentials-existing"):$(sed -n 2p "$work/credentials-existing")" "600:aws_access_key_id = $admin_id"

# --- s3fault in front of the authenticating server ---
s3_fault_start "$work/fault" --seed 7
proxied() { s3cli --endpoint "$S3_FAULT_ENDPOINT" "$@"; }
check "s3_fault_start: S3_FAULT_ENDPOINT on another port" eval '[ "$S3_FAULT_ENDPOINT" != "$S3_ENDPOINT" ]'
check "  a signed get through it verifies upstream" eval 'proxied get kvs-auth obj - | cmp -s - "$work/obj"'
out=$(S3_SECRET_ACCESS_KEY=wrong-secret proxied --no-retries ls kvs-auth 2>&1)
check "  a wrong secret through it: SignatureDoesNotMatch" has "$out" "SignatureDoesNotMatch (HTTP 403)"
s3_fault slowdown 1 methods=GET count=1 > /dev/null
out=$(proxied --no-retries get kvs-auth obj - 2>&1 > /dev/null)
check "s3_fault slowdown 1 count=1: the next GET is 503 SlowDown" eq "$out" "s3cli: get: SlowDown (HTTP 503)"
check "  the one after it is served" eval 'proxied --no-retries get kvs-auth obj - | cmp -s - "$work/obj"'
check "  s3_fault_stat slowdown: 1" eq "$(s3_fault_stat slowdown)" 1
s3_fault down > /dev/null
check "s3_fault down: the proxy's port refuses" refuses "$S3_FAULT_ENDPOINT"
s3_fault up > /dev/null
check "s3_fault up: it serves again on the same port" eval 'proxied --no-retries ls kvs-auth | grep -q " obj$"'
fault_endpoint=$S3_FAULT_ENDPOINT
s3_fault_stop
check "s3_fault_stop: its port refuses" refuses "$fault_endpoint"

[ "$failures" = 0 ] || { echo "$failures failed"; exit 1; }
echo "all passed"
