# shellcheck shell=bash disable=SC2154  # root, die, prog: tools/lib/common.sh
# A real S3 server on 127.0.0.1 for tests and benches: moto's standalone server (moto_server, from
# the environment of deploy/python-env.sh --s3), helpers that drive it through boto3
# (tools/harness/s3cli.py), and the fault-injecting proxy tools/harness/s3fault.py in front of it.
# Source it after tools/lib/common.sh. No root. moto_server is $KVSTREAM_MOTO_SERVER, else the one
# beside $KVSTREAM_S3_PYTHON (its venv's), else moto_server on PATH; the python with boto3 is
# $KVSTREAM_S3_PYTHON, else the python beside moto_server (its venv's), else python3.
#   s3_missing                 prints why the server cannot run here ("" when it can)
#   s3_server_start [--auth] DIR   moto_server on a free port, its pid (DIR/moto.pid), port
#                              (DIR/moto.port) and log (DIR/moto.log) in DIR; returns once it answers
#                              (dies after S3_START_SECONDS, default 30). Exports S3_ENDPOINT
#                              (http://127.0.0.1:PORT), S3_REGION and the keys S3_ACCESS_KEY_ID and
#                              S3_SECRET_ACCESS_KEY (also as AWS_*: any AWS SDK run from here uses
#                              them), the helpers' and the tests' credentials. Without --auth moto
#                              takes any keys (the test keys kvstream-test / kvstream-test-secret).
#                              With --auth it checks every request's SigV4 signature and the
#                              signer's IAM permissions: a wrong secret is 403 SignatureDoesNotMatch,
#                              an unknown key 403 InvalidAccessKeyId (InvalidClientTokenId for IAM),
#                              a user without a policy allowing the action 403 AccessDenied; the
#                              exported keys are then an IAM admin's (every action allowed).
#   s3_server_stop             SIGTERM (SIGKILL after 5 s), resumed first if paused; for an EXIT trap
#   s3_server_pause / s3_server_resume   SIGSTOP / SIGCONT: a server that holds every request
#   s3_create_access_key USER  (--auth) a new IAM user allowed s3:* and an access key of it: prints
#                              "ACCESS_KEY_ID SECRET_ACCESS_KEY"
#   s3_credentials_file PATH [ACCESS_KEY_ID SECRET]   an AWS shared credentials file, mode 0600,
#                              profile [default], with the given keys or the exported ones
#   s3_make_bucket NAME, s3_put BUCKET KEY FILE, s3_get BUCKET KEY FILE ('-': stdin / stdout),
#   s3_list BUCKET [PREFIX] ("SIZE KEY" lines), s3_delete BUCKET KEY: through boto3 with its
#                              retries (S3CLI_OPTIONS=--no-retries: one attempt); status 3 for no
#                              such key or bucket, 1 for another error (its code on stderr)
#   s3_fault_start DIR [ARGS...]   s3fault.py (ARGS: --seed N, ...) in front of the server, its log
#                              DIR/s3fault.log; exports S3_FAULT_ENDPOINT (point the client there)
#   s3_fault CMD [VALUE] [methods=GET,PUT] [count=N]   sets a fault (slowdown RATE, error500 RATE,
#                              delay SECONDS, hang, truncate RATE, corrupt RATE, down, up, clear,
#                              NAME off, reset, stats): prints the proxy's state as JSON
#   s3_fault_stat NAME         one counter of the proxy (forwarded, slowdown, hung, ...)
#   s3_fault_stop              the proxy stopped
#   s3cli ARGS...              tools/harness/s3cli.py itself (--endpoint URL, --no-retries, ping, ...)
# Start and stop in the script's own shell (not in $(...)): the stops wait for their processes.
# State (for the functions above): s3_dir, s3_pid, s3_port, s3_fault_pid, s3_fault_control.

s3_dir="" s3_pid="" s3_port="" s3_fault_pid="" s3_fault_control=""

# The programs, resolved once: moto_server, and the python whose boto3 the helpers use.
s3_moto_server() {
  if [ -n "${KVSTREAM_MOTO_SERVER:-}" ]; then
    echo "$KVSTREAM_MOTO_SERVER"
  elif [ -n "${KVSTREAM_S3_PYTHON:-}" ] && [ -x "$(dirname "$KVSTREAM_S3_PYTHON")/moto_server" ]; then
    echo "$(dirname "$KVSTREAM_S3_PYTHON")/moto_server"
  else
    command -v moto_server || true
  fi
}
s3_python() {
  local moto
  if [ -n "${KVSTREAM_S3_PYTHON:-}" ]; then echo "$KVSTREAM_S3_PYTHON"; return; fi
  moto=$(s3_moto_server)
  if [ -n "$moto" ] && [ -x "$(dirname "$moto")/python" ]; then echo "$(dirname "$moto")/python"; return; fi
  command -v python3
}

s3_missing() {
  local moto python
  moto=$(s3_moto_server)
  [ -n "$moto" ] || { echo "no moto_server (deploy/python-env.sh --s3, then KVSTREAM_MOTO_SERVER=<venv>/bin/moto_server)"; return; }
  [ -x "$moto" ] || { echo "KVSTREAM_MOTO_SERVER=$moto is not an executable"; return; }
  python=$(s3_python)
  "$python" -c 'import boto3' 2> /dev/null || echo "$python has no boto3 (deploy/python-env.sh --s3, then KVSTREAM_S3_PYTHON)"
}

# s3cli ARGS...: tools/harness/s3cli.py with the python that has boto3.
s3cli() {
  # shellcheck disable=SC2086  # S3CLI_OPTIONS: words
  "$(s3_python)" "$root/tools/harness/s3cli.py" ${S3CLI_OPTIONS:-} "$@"
}

s3_server_start() {
  local auth="" dir moto log _ keys
  if [ "${1:-}" = --auth ]; then auth=1; shift; fi
  dir=${1:?s3_server_start [--auth] DIR}
  [ -z "$s3_pid" ] || die "an S3 server is already running (pid $s3_pid): s3_server_stop first"
  moto=$(s3_moto_server)
  [ -n "$moto" ] || die "no moto_server: $(s3_missing)"
  mkdir -p "$dir"
  s3_dir=$dir log=$dir/moto.log s3_port=""
  # Port 0: the kernel's free port, which werkzeug then logs ("Running on http://127.0.0.1:PORT").
  # Authentication stays off until the admin key exists (INITIAL_NO_AUTH_ACTION_COUNT unset is
  # infinity); moto's /moto-api/reset-auth then turns it on for every request after.
  : > "$log"  # there before the first look (the redirection below is the background job's)
  env -u INITIAL_NO_AUTH_ACTION_COUNT "$moto" -H 127.0.0.1 -p 0 > "$log" 2>&1 &
  s3_pid=$!
  echo "$s3_pid" > "$dir/moto.pid"
  for _ in $(seq $((${S3_START_SECONDS:-30} * 10))); do
    if ! kill -0 "$s3_pid" 2> /dev/null; then
      local status=0
      wait "$s3_pid" || status=$?
      s3_pid=""
      tail -n 20 "$log" | sed 's/^/    /' >&2
      die "moto_server exited with status $status before it answered (log: $log)"
    fi
    [ -n "$s3_port" ] || s3_port=$(grep -o 'Running on http://127\.0\.0\.1:[0-9]*' "$log" | head -1 | sed 's/.*://' || true)
    if [ -n "$s3_port" ] && s3cli --endpoint "http://127.0.0.1:$s3_port" ping 2> /dev/null; then
      break
    fi
    sleep 0.1
  done
  if [ -z "$s3_port" ] || ! s3cli --endpoint "http://127.0.0.1:$s3_port" ping 2> /dev/null; then
    tail -n 20 "$log" | sed 's/^/    /' >&2
    s3_server_stop
    die "moto_server did not answer in ${S3_START_SECONDS:-30} s (log: $log)"
  fi
  echo "$s3_port" > "$dir/moto.port"
  export S3_ENDPOINT="http://127.0.0.1:$s3_port" S3_REGION=us-east-1
  export S3_ACCESS_KEY_ID=kvstream-test S3_SECRET_ACCESS_KEY=kvstream-test-secret
  if [ -n "$auth" ]; then
    keys=$(s3cli iam-key kvstream-admin --all) || die "creating the IAM admin on moto failed (log: $log)"
    S3_ACCESS_KEY_ID=${keys% *} S3_SECRET_ACCESS_KEY=${keys#* }
    s3cli auth-on || die "turning moto's authentication on failed (log: $log)"
  fi
  export AWS_ACCESS_KEY_ID=$S3_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY=$S3_SECRET_ACCESS_KEY AWS_DEFAULT_REGION=$S3_REGION
}

s3_server_stop() {
  local _
  [ -n "$s3_pid" ] || return 0
  kill -CONT "$s3_pid" 2> /dev/null || true
  kill -TERM "$s3_pid" 2> /dev/null || true
  for _ in $(seq 50); do
    kill -0 "$s3_pid" 2> /dev/null || break
    sleep 0.1
  done
  kill -KILL "$s3_pid" 2> /dev/null || true
  wait "$s3_pid" 2> /dev/null || true
  rm -f "$s3_dir/moto.pid"
  s3_pid="" s3_port=""
  unset S3_ENDPOINT
}

s3_server_pause() {
  [ -n "$s3_pid" ] || die "s3_server_pause: no S3 server"
  kill -STOP "$s3_pid"
}

s3_server_resume() {
  [ -n "$s3_pid" ] || die "s3_server_resume: no S3 server"
  kill -CONT "$s3_pid"
}

s3_create_access_key() { s3cli iam-key "${1:?s3_create_access_key USER}"; }

s3_credentials_file() {
  local path=${1:?s3_credentials_file PATH [ACCESS_KEY_ID SECRET]} id=${2:-$S3_ACCESS_KEY_ID} secret=${3:-$S3_SECRET_ACCESS_KEY}
  # Made 0600 before a secret is in it, even where PATH already was (umask does not touch it).
  (umask 077 && : > "$path.tmp") && chmod 600 "$path.tmp" &&
    printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$id" "$secret" > "$path.tmp" &&
    mv -f "$path.tmp" "$path"
}

s3_make_bucket() { s3cli mb "${1:?s3_make_bucket NAME}"; }
s3_put() { s3cli put "${1:?s3_put BUCKET KEY FILE}" "${2:?}" "${3:?}"; }
s3_get() { s3cli get "${1:?s3_get BUCKET KEY FILE}" "${2:?}" "${3:?}"; }
s3_list() { s3cli ls "${1:?s3_list BUCKET [PREFIX]}" "${2:-}"; }
s3_delete() { s3cli rm "${1:?s3_delete BUCKET KEY}" "${2:?}"; }

s3_fault_start() {
  local dir=${1:?s3_fault_start DIR [ARGS...]} log line _
  shift
  [ -n "${S3_ENDPOINT:-}" ] || die "s3_fault_start: no S3 server (s3_server_start first)"
  [ -z "$s3_fault_pid" ] || die "s3fault is already running (pid $s3_fault_pid)"
  mkdir -p "$dir"
  log=$dir/s3fault.log
  : > "$log"
  "$(s3_python)" "$root/tools/harness/s3fault.py" --upstream "$S3_ENDPOINT" "$@" > "$log" 2>&1 &
  s3_fault_pid=$!
  for _ in $(seq 100); do
    line=$(grep -m1 '^s3fault: listening ' "$log" || true)
    [ -z "$line" ] || break
    kill -0 "$s3_fault_pid" 2> /dev/null || break
    sleep 0.1
  done
  if [ -z "$line" ]; then
    tail -n 20 "$log" | sed 's/^/    /' >&2
    s3_fault_stop
    die "s3fault did not start (log: $log)"
  fi
  # "s3fault: listening ADDR:PORT control ADDR:PORT upstream URL"
  read -r _ _ S3_FAULT_ENDPOINT _ s3_fault_control _ <<< "$line"
  export S3_FAULT_ENDPOINT="http://$S3_FAULT_ENDPOINT"
  s3_fault_control="http://$s3_fault_control"
}

s3_fault() {
  [ -n "$s3_fault_control" ] || die "s3_fault: no s3fault (s3_fault_start first)"
  "$(s3_python)" "$root/tools/harness/s3fault.py" ctl "$s3_fault_control" "$@"
}

s3_fault_stat() {
  s3_fault stats | "$(s3_python)" -c 'import json, sys; print(json.load(sys.stdin)["counters"][sys.argv[1]])' "${1:?s3_fault_stat NAME}"
}

s3_fault_stop() {
  [ -n "$s3_fault_pid" ] || return 0
  kill -TERM "$s3_fault_pid" 2> /dev/null || true
  wait "$s3_fault_pid" 2> /dev/null || true
  s3_fault_pid="" s3_fault_control=""
  unset S3_FAULT_ENDPOINT
}
