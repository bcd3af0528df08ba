# shellcheck shell=bash disable=SC2154  # the caller sets root, build, work, out, fast, slow ...
# Sourced by tools/bench.sh, bench-lmcache.sh, bench-sglang.sh and bench-vllm.sh: two emulated tiers
# (tools/tierlab) capped at $fast and $slow MB/s under $work, and kvstreamd on them inside the
# capped cgroup, torn down on exit. The caller has sourced tools/lib/common.sh (root, build,
# tierlab and the helpers) and sets work, fast, slow and out (and pace=1 for tierlab's pacing FUSE
# layer instead of the blkio throttle, shared=1 for t1 as a shared tier, key=1 for a cluster key:
# every chunk written carries a MAC and segment tags, checked on reads from the shared t1);
# this sets sock and daemon (tools/lib/kvstreamd.sh: kvstreamd_stop stops it).

# bench_up T0_CAPACITY DAEMON_LOG: checks root and the build, brings the tiers and the daemon up.
bench_up() {
  local t0_capacity=$1 log=$2
  need_root "loop devices, mounts, cgroups"
  need_built "$build/daemon/kvstreamd" "$build/tools/kvbench"
  mkdir -p "$out"
  "$tierlab" down --dir "$work"
  trap bench_down EXIT
  [ -z "${pace:-}" ] || export TIERLAB_KVFAULTFS="${TIERLAB_KVFAULTFS:-$build/tools/kvfaultfs}"
  "$tierlab" up --dir "$work" ${pace:+--pace} --tier "t0:8G:$fast" --tier "t1:8G:$slow"
  sock="$work/kvstreamd.sock"
  local key_line=""
  if [ -n "${key:-}" ]; then
    (umask 077 && head -c 32 /dev/urandom > "$work/cluster.key")
    key_line="shared_key_file: $work/cluster.key"
  fi
  # Persists wait for staging room (kvbench counts every new chunk as written, and the replication
  # runs measure the write stall that waiting costs), where the default drops them.
  cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $sock, mode: "0600"}
sessions: {max_arena: 4GiB}
staging: {when_full: wait}
logging: {level: ${BENCH_LOG_LEVEL:-warn}}
$key_line
tiers:
  - {name: t0, path: $work/mnt/t0/kvstream, capacity: $t0_capacity}
  - {name: t1, path: $work/mnt/t1/kvstream, capacity: 7GiB${shared:+, shared: true}}
YAML
  daemon_start "$log"
}

# daemon_start LOG [WRAPPER...]: kvstreamd on the tiers (run through WRAPPER when given, e.g. a
# seccomp filter), inside the capped cgroup (it does the reads), as are the benchmarks.
daemon_start() {
  local log=$1; shift
  kvstreamd_start "$work/kvstreamd.yaml" "$log" "$tierlab" run --dir "$work" -- "$@"
}

bench_down() {
  set +e
  kvstreamd_stop_all
  "$tierlab" down --dir "$work"
}
