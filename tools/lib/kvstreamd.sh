# shellcheck shell=bash disable=SC2154  # build and prog: tools/lib/common.sh
# kvstreamd for a script of tools/: started in the background on a config, up once its socket is,
# stopped with its exit status checked. tools/lib/common.sh sources it (build, die, prog are there).
# The binary is $kvstreamd, default $build/daemon/kvstreamd; the environment of the call reaches
# the daemon (KVSTREAM_COPY_THREADS=1 kvstreamd_start ...).
#   kvstreamd_start CONFIG LOG [RUNNER...]   sets daemon (its pid); dies if it does not come up
#   kvstreamd_stop [PID]                     SIGTERM, then its exit status (default: $daemon)
#   kvstreamd_stop_all                       every daemon still running (for an EXIT trap)

# The daemons started and not stopped yet: pid -> its log.
declare -gA kvstreamd_logs=()

# kvstreamd_socket CONFIG: prints the socket path CONFIG names on its `socket: {path: P, ...}`
# line (the form the scripts' configs use).
kvstreamd_socket() {
  sed -n 's/^socket: *{ *path: *\([^,} ]*\).*/\1/p' "$1" | head -1
}

# kvstreamd_start CONFIG LOG [RUNNER...]: kvstreamd --config CONFIG in the background, its stderr
# to LOG, run by RUNNER when given (tierlab run --dir DIR --: in the capped cgroup; a seccomp
# filter; RUNNER must exec the daemon, so that its pid is the daemon's). Returns once the socket
# CONFIG names is up; sets daemon to the pid. Dies with the tail of LOG and the exit status if the
# daemon exits first, and stops it and dies if its socket is not up in KVSTREAMD_START_SECONDS
# (default 10). A stale socket (its daemon gone) is removed first; a live one is an error.
kvstreamd_start() {
  local config=$1 log=$2 sock status waited=0
  shift 2
  sock=$(kvstreamd_socket "$config")
  [ -n "$sock" ] || die "$config names no socket (socket: {path: PATH, ...})"
  if [ -S "$sock" ]; then
    ! python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$sock" 2> /dev/null ||
      die "a kvstreamd is already serving on $sock"
    rm -f "$sock"
  fi
  "$@" "${kvstreamd:-$build/daemon/kvstreamd}" --config "$config" 2> "$log" &
  daemon=$!
  kvstreamd_logs[$daemon]=$log
  wait_socket "$sock" $((${KVSTREAMD_START_SECONDS:-10} * 20)) "$daemon" || waited=$?
  [ "$waited" != 0 ] || return 0
  if [ "$waited" = 2 ]; then
    status=0
    wait "$daemon" || status=$?
    unset "kvstreamd_logs[$daemon]"
    kvstreamd_log_tail "$log"
    die "kvstreamd exited with status $status before its socket $sock was up (log: $log)"
  fi
  kvstreamd_log_tail "$log"
  kvstreamd_stop "$daemon" || true
  die "kvstreamd's socket $sock was not up after ${KVSTREAMD_START_SECONDS:-10} s (log: $log)"
}

# kvstreamd_stop [PID]: SIGTERM to the daemon PID (default $daemon; the daemon drains its staged
# writes first), waits for it and returns its exit status; a non-zero one is reported on stderr
# with the tail of its log. Clears daemon when it was PID. Status 0 when there is none.
kvstreamd_stop() {
  local pid=${1:-${daemon:-}} status=0
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2> /dev/null || true  # it may have exited already: its status says how
  wait "$pid" || status=$?
  [ "$pid" != "${daemon:-}" ] || daemon=""
  if [ "$status" != 0 ]; then
    echo "$prog: kvstreamd (pid $pid) exited with status $status" >&2
    kvstreamd_log_tail "${kvstreamd_logs[$pid]:-}"
  fi
  unset "kvstreamd_logs[$pid]"
  return "$status"
}

# kvstreamd_stop_all: kvstreamd_stop for every daemon still running; status 1 if one failed.
kvstreamd_stop_all() {
  local pid status=0
  for pid in "${!kvstreamd_logs[@]}"; do
    kvstreamd_stop "$pid" || status=1
  done
  return "$status"
}

# kvstreamd_log_tail LOG: its last 20 lines on stderr, indented.
kvstreamd_log_tail() {
  [ -s "${1:-}" ] || return 0
  echo "$prog: the end of $1:" >&2
  tail -20 "$1" | sed 's/^/  /' >&2
}
