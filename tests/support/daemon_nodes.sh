# shellcheck shell=bash disable=SC2154  # work and ctl_bin: the sourcing test's
# Helpers of the scripts that run several kvstreamd nodes (tests/cluster, tests/s3): node NAME's
# socket is $work/NAME.sock, its logs $work/*.log, kvstreamctl is $ctl_bin. Source it after
# tools/lib/common.sh, with work and ctl_bin set.
#   fail TEXT...             prints FAILED and the tail of every log, exits 1
#   until_ SECONDS CMD...    polls CMD every 0.1 s until it succeeds (0) or SECONDS pass (1)
#   ctl NODE ARGS...         kvstreamctl on NODE
#   got NODE KEY FILE        NODE serves KEY, byte-identical to FILE
#   present NODE KEY / absent NODE KEY   NODE's lookup finds KEY / does not
#   on_tiers NODE KEY MASK   NODE's index holds KEY on the tiers of MASK
#   health_says NODE TEXT    NODE's health names TEXT;  healthy NODE: its health is OK
#   tier_json NODE TIER FIELD   a field of NODE's `kvstreamctl --json tiers` for TIER
fail() {
  echo "FAILED: $*"
  for l in "$work"/*.log; do echo "== $l"; tail -8 "$l"; done
  exit 1
}
until_() {
  local end=$((SECONDS + $1))
  shift
  while ! "$@"; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.1
  done
}
ctl() { "$ctl_bin" --socket "$work/$1.sock" "${@:2}"; }
got() { ctl "$1" get "$2" "$work/out.bin" > /dev/null 2>&1 && cmp -s "$3" "$work/out.bin"; }
present() { ctl "$1" --json lookup "$2" | grep -q '"present": *true'; }
absent() { ! present "$@"; }
on_tiers() { ctl "$1" --json lookup "$2" | grep -q "\"tier_mask\": *$3\b"; }
health_says() { { ctl "$1" health 2>&1 || true; } | grep -q "$2"; }
healthy() { ctl "$1" health > /dev/null 2>&1; }
tier_json() { ctl "$1" --json tiers | python3 -c "import json, sys; print([t for t in json.load(sys.stdin) if t['name'] == '$2'][0]['$3'])"; }
