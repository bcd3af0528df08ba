#!/usr/bin/env bash
# Soak: the torture suite again and again, long, until DURATION has passed or a round fails: kill -9
# cycles (50 a round), the rewrite-while-read race (60 s), a stalled and a slow tier, a tier deleted,
# unmounted and full, and a FUSE tier failing and hanging (the last three need root). Every round's
# output goes to LOG; the first failure stops the soak with its output.
# Usage: tests/torture/soak.sh [--duration 8h] [--build DIR] [--log FILE]   (durations as sleep(1) takes them)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
duration=1h build="$root/build" log=/var/tmp/kvstream-soak.log
while [ $# -gt 0 ]; do
  case $1 in
    --duration) duration=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    -h|--help) show_help; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
seconds=$(python3 -c "
import re,sys; m=re.fullmatch(r'(\d+(?:\.\d+)?)([smhd]?)', sys.argv[1])
if not m: sys.exit('soak: bad duration ' + sys.argv[1])
print(int(float(m[1]) * {'': 1, 's': 1, 'm': 60, 'h': 3600, 'd': 86400}[m[2]]))" "$duration")
export KVSTREAM_TORTURE_CYCLES=50 KVSTREAM_TORTURE_SECONDS=60
end=$(( $(date +%s) + seconds )) round=0
: > "$log"
while [ "$(date +%s)" -lt "$end" ]; do
  round=$((round + 1))
  echo "== soak round $round ($(date -u +%FT%TZ))" | tee -a "$log"
  if ! (cd "$build" && ctest --output-on-failure -R "torture|rewrite_race" >> "$log" 2>&1); then
    echo "soak: round $round failed; see $log" >&2
    tail -40 "$log" >&2
    exit 1
  fi
done
echo "soak: $round rounds passed in $duration"
