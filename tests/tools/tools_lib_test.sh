#!/usr/bin/env bash
# The libraries of tools/ that the bench scripts share: tools/lib/options.sh (an option table:
# values, flags, positionals, `--`, unknown arguments, missing values, --help; and every script of
# tools/ answering --help with its header and refusing an unknown argument), and tools/lib/
# kvstreamd.sh on a real kvstreamd (up once its socket is, stopped with status 0; a non-zero exit
# reported; a daemon that exits at start, or never comes up, failing fast with its log's tail).
# Usage: tools_lib_test.sh [all KVSTREAMD | options | daemon KVSTREAMD]
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
failures=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}
eq() { [ "$1" = "$2" ] || { echo "     got '$1', want '$2'"; return 1; }; }
has() { grep -qF -- "$2" <<< "$1" || { echo "     '$2' not in: $1"; return 1; }; }

part=${1:-all}
work=$(test_work_dir tools-lib)
trap 'kvstreamd_stop_all; rm -rf "$work"' EXIT

if [ "$part" = all ] || [ "$part" = options ]; then
  # A script with a table of every kind of row; it prints what it got.
  cat > "$work/opts.sh" <<SH
#!/usr/bin/env bash
# opts: the test's script.
# Usage: opts.sh [--fast MBPS] [--gbs] [--key] [NAME] [-- ARGS]
set -euo pipefail
source "$root/tools/lib/common.sh"
fast=300 gbs="" key="" shared="" name=default rest=()
[ -z "\${PLAIN:-}" ] || help_plain=1
parse_options '
  # a comment row
  --fast   fast     # takes a value
  --gbs    gbs=1
  --key    key=1 shared=yes
  NAME     name
  --       rest
' "\$@"
echo "fast=\$fast gbs=\$gbs key=\$key shared=\$shared name=\$name rest=\${#rest[@]}:\${rest[*]}"
SH
  chmod +x "$work/opts.sh"
  opts() { out=$("$work/opts.sh" "$@" 2>&1); rc=$?; }

  opts
  check "defaults stay without arguments" eq "$out" "fast=300 gbs= key= shared= name=default rest=0:"
  opts --fast 50
  check "an option with a value sets its variable" eq "$out" "fast=50 gbs= key= shared= name=default rest=0:"
  opts --gbs --key
  check "flags set their variables, one flag several" eq "$out" "fast=300 gbs=1 key=1 shared=yes name=default rest=0:"
  opts node7 --fast 1 --gbs
  check "a positional in any place" eq "$out" "fast=1 gbs=1 key= shared= name=node7 rest=0:"
  opts --fast 1 --fast 2
  check "the last of a repeated option wins" eq "$out" "fast=2 gbs= key= shared= name=default rest=0:"
  opts --fast --gbs
  check "the word after an option that takes a value is its value" eq "$out" "fast=--gbs gbs= key= shared= name=default rest=0:"
  opts --fast ""
  check "  an empty one too" eq "$out" "fast= gbs= key= shared= name=default rest=0:"
  opts -- --steps 4 "a b"
  check "everything after -- goes into the -- row's array" eq "$out" "fast=300 gbs= key= shared= name=default rest=3:--steps 4 a b"
  opts --bogus
  check "an unknown option exits 2" eq "$rc" 2
  check "  naming it" eq "$out" "opts: unknown argument '--bogus' (--help)"
  opts one two
  check "a positional too many is unknown" eq "$out" "opts: unknown argument 'two' (--help)"
  opts --fast
  check "a missing value exits 2" eq "$rc" 2
  check "  naming the option" eq "$out" "opts: --fast takes a value"
  opts --help
  check "--help exits 0" eq "$rc" 0
  check "  printing the leading comment block" eq "$out" "$(sed -n '2,3p' "$work/opts.sh")"
  opts --gbs -h --bogus
  check "-h wherever it is, before what follows is looked at" eq "$out" "$(sed -n '2,3p' "$work/opts.sh")"
  out=$(PLAIN=1 "$work/opts.sh" --help)
  check "help_plain=1: without the comment marks" eq "$out" "$(sed -n '2,3p' "$work/opts.sh" | cut -c3-)"
  cat > "$work/bad.sh" <<SH
#!/usr/bin/env bash
source "$root/tools/lib/common.sh"
parse_options '--fast fast slow' "\$@"
SH
  out=$(bash "$work/bad.sh" 2>&1)
  check "a table row with a value and two variables is refused" has "$out" "options table: '--fast' takes one variable"

  # The scripts themselves: parse_options runs before anything else they do.
  for script in "$root"/tools/*.sh; do
    name=$(basename "$script" .sh)
    unmark=""  # help_plain=1 (bench-nodes): without the comment marks
    ! grep -q '^help_plain=1' "$script" || unmark='s/^# \{0,1\}//'
    want=$(sed -n '2,/^[^#]/{/^#/p}' "$script" | sed "$unmark")
    out=$("$script" --help 2>&1); rc=$?
    check "$name --help: its header, status 0" eq "$rc:$out" "0:$want"
    out=$("$script" --no-such-option 2>&1); rc=$?
    check "$name --no-such-option: status 2" eq "$rc:$out" "2:$name: unknown argument '--no-such-option' (--help)"
  done
fi

if [ "$part" = all ] || [ "$part" = daemon ]; then
  [ -n "${2:-}" ] || { echo "usage: $0 daemon KVSTREAMD" >&2; exit 2; }
  kvstreamd=$2
  config() {  # config NAME [LINE]: a one-tier config $work/NAME.yaml on socket $work/NAME.sock
    cat > "$work/$1.yaml" <<YAML
socket: {path: $work/$1.sock, mode: "0600"}
logging: {level: info}
tiers:
  - {name: t0, path: $work/$1-t0, capacity: 64MiB}
${2:-}
YAML
  }

  config up
  check "kvstreamd_socket reads the socket off the config" eq "$(kvstreamd_socket "$work/up.yaml")" "$work/up.sock"
  kvstreamd_start "$work/up.yaml" "$work/up.log"
  pid=$daemon
  check "kvstreamd_start returns with the socket up" test -S "$work/up.sock"
  check "  and daemon set to the live daemon's pid" kill -0 "$pid"
  check "  which serves" python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$work/up.sock"
  kvstreamd_stop 2> "$work/err"; rc=$? err=$(cat "$work/err")  # (not in $(...): a subshell cannot wait)
  check "kvstreamd_stop: status 0 after SIGTERM, nothing said" eq "$rc:$err" "0:"
  check "  the daemon is gone" eval "! kill -0 $pid 2> /dev/null"
  check "  and its socket" test ! -e "$work/up.sock"
  check "  daemon cleared" eq "$daemon" ""
  check "  its log says it stopped" has "$(cat "$work/up.log")" "stopped"

  kvstreamd_start "$work/up.yaml" "$work/up-again.log"
  pid=$daemon
  kill -KILL "$pid"
  kvstreamd_stop 2> "$work/err"; rc=$? err=$(cat "$work/err")
  check "a daemon killed under us: kvstreamd_stop returns its status" eq "$rc" 137
  check "  and says so" has "$err" "tools_lib_test: kvstreamd (pid $pid) exited with status 137"
  check "  with its log's tail" has "$err" "serving on $work/up.sock"
  check "its stale socket is left behind" test -S "$work/up.sock"
  kvstreamd_start "$work/up.yaml" "$work/up-stale.log"
  check "kvstreamd_start removes a stale socket and comes up" kill -0 "$daemon"
  err=$( (kvstreamd_start "$work/up.yaml" "$work/up-twice.log") 2>&1); rc=$?
  check "a live socket at the path: kvstreamd_start dies" eq "$rc" 1
  check "  saying a kvstreamd serves there" has "$err" "a kvstreamd is already serving on $work/up.sock"
  check "  and the first daemon still serves" test -S "$work/up.sock"
  config second
  first=$daemon
  kvstreamd_start "$work/second.yaml" "$work/second.log"
  second=$daemon
  kvstreamd_stop_all
  check "kvstreamd_stop_all stops every daemon" eval "! kill -0 $first 2> /dev/null && ! kill -0 $second 2> /dev/null"

  config bad "bogus_key: 1"
  start=$(date +%s%N)
  err=$( (kvstreamd_start "$work/bad.yaml" "$work/bad.log") 2>&1); rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  check "a daemon that exits at start: kvstreamd_start dies" eq "$rc" 1
  check "  fast (${ms} ms, not the 10 s socket wait)" test "$ms" -lt 3000
  check "  with its exit status" has "$err" "kvstreamd exited with status 2 before its socket $work/bad.sock was up"
  check "  and its log's tail" has "$err" "bogus_key"

  printf '#!/bin/sh\necho $$ > "%s"\nexec sleep 30\n' "$work/mute.pid" > "$work/mute"
  chmod +x "$work/mute"
  start=$(date +%s%N)
  err=$( (kvstreamd=$work/mute KVSTREAMD_START_SECONDS=1 kvstreamd_start "$work/up.yaml" "$work/mute.log") 2>&1); rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  check "a daemon whose socket never comes: kvstreamd_start dies after KVSTREAMD_START_SECONDS" eq "$rc" 1
  check "  (${ms} ms)" test "$ms" -lt 3000
  check "  saying so" has "$err" "kvstreamd's socket $work/up.sock was not up after 1 s"
  check "  having stopped it" eval "! kill -0 $(cat "$work/mute.pid") 2> /dev/null"
fi

[ "$failures" = 0 ] || { echo "$failures failed"; exit 1; }
echo "all passed"
