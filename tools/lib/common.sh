# shellcheck shell=bash disable=SC2034  # (the variables are for the scripts that source this)
# The preamble the scripts of tools/ and tests/ share. Source it first thing after `set`:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"            (a script in tools/)
#   source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh" (a script in tests/*/)
# It sets no shell options (each script keeps its own `set`) and runs nothing; it sets:
#   root     the repository's root
#   build    the build directory: $BUILD_DIR, default $root/build
#   tierlab  $root/tools/tierlab, the emulated tiers
#   prog     the script's name without .sh (bench, bench-nodes, tierlab, ...), for messages
# and defines the helpers below, parse_options (tools/lib/options.sh) and kvstreamd_start and
# kvstreamd_stop (tools/lib/kvstreamd.sh).

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${BUILD_DIR:-$root/build}"
tierlab="$root/tools/tierlab"
prog=${0##*/}
prog=${prog%.sh}
# shellcheck source-path=SCRIPTDIR/lib source-path=SCRIPTDIR/../../tools/lib source=options.sh
source "$root/tools/lib/options.sh"
# shellcheck source-path=SCRIPTDIR/lib source-path=SCRIPTDIR/../../tools/lib source=kvstreamd.sh
source "$root/tools/lib/kvstreamd.sh"

# die MESSAGE: "PROG: MESSAGE" on stderr, exit status 1.
die() { echo "$prog: $*" >&2; exit 1; }

# usage_error MESSAGE: "PROG: MESSAGE" on stderr, exit status 2 (a bad option or argument).
usage_error() { echo "$prog: $*" >&2; exit 2; }

# show_help: prints the script's leading comment block (its --help); without the comment marks
# ("# ") where the script sets help_plain=1.
show_help() {
  if [ -n "${help_plain:-}" ]; then
    sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  else
    sed -n '2,/^[^#]/{/^#/p}' "$0"
  fi
}

# need_root WHY: dies unless root ("PROG: must run as root (WHY)").
need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root ($1)"; }

# need_built PATH...: dies at the first PATH that is not an executable ("... not built").
need_built() {
  local b
  for b in "$@"; do
    [ -x "$b" ] || die "$b not built (cmake --build build, or tests/run.sh)"
  done
}

# wait_socket PATH [TRIES] [PID]: waits until PATH is a socket (a daemon is up), polling every
# 50 ms, TRIES times (default 200: 10 s). Status 0 once it is there, 1 if it never came, 2 as soon
# as process PID (when given: the daemon that should make it) has exited.
wait_socket() {
  local _
  for _ in $(seq "${2:-200}"); do
    [ -S "$1" ] && return 0
    [ -z "${3:-}" ] || kill -0 "$3" 2> /dev/null || return 2
    sleep 0.05
  done
  [ -S "$1" ]
}

# For tests:
# skip WHY: "SKIPPED: WHY" on stdout, exit status 77 (ctest's skip: SKIP_RETURN_CODE in
# tests/CMakeLists.txt).
skip() { echo "SKIPPED: $*"; exit 77; }

# test_work_dir NAME: makes and prints a fresh directory NAME-XXXXXX under $KVSTREAM_TEST_DIR,
# default the current directory (under ctest, the test's build directory).
test_work_dir() { mktemp -d "${KVSTREAM_TEST_DIR:-$PWD}/$1-XXXXXX"; }
