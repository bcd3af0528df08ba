#!/usr/bin/env bash
# An NVMe tier and an object store read at once: kvstreamd with an emulated NVMe tier (tools/tierlab:
# a loop device with O_DIRECT and a blkio read cap of NVME MB/s) and an s3 tier on a real S3 server
# on this machine (moto_server, tools/lib/s3.sh: Python, about 3 ms and a core's worth of CPU per
# request), driven by kvbench as 2 tensor-parallel ranks: each tier alone (only:nvme, only:s3: the
# bound D / (b_nvme + b_s3)), completion routing, fastest (NVMe only) and serial (NVMe only, chunk
# after chunk: single-tier offloading), side by side in one run, --runs times; moto_server on a CPU
# of its own, the daemon and kvbench on the others (the store is another machine). Prints each run's
# table and, at the end, the medians: each tier alone (MB/s), completion's gap to the bound, and its
# speedup over serial. The store's link is capped at --s3-cap MB/s (a tbf qdisc on the loopback device,
# removed at exit: every TCP connection to 127.0.0.1 shares it meanwhile); uncapped, moto's CPU sets
# the tier's bandwidth, and on a small machine the daemon's and moto's CPU then compete, which shows
# up as gap. moto reads the whole object for every ranged GET (the tier merges adjacent blocks into
# one GET, up to 16 MiB).
# Needs root (loop devices, cgroups, tc) and a build (tests/run.sh; BUILD_DIR, default build/).
# Results (JSON, logs) go to OUT. Tears everything down, also on failure.
# Usage: sudo tools/bench-s3.sh [--nvme MBPS] [--s3-cap MBPS] [--runs N] [--steps N] [--chunk-size SIZE] [--block-size SIZE]
#          [--out DIR] [--check GAP]
#   --nvme MBPS        the NVMe tier's read cap (default 300)
#   --s3-cap MBPS      the object store's link (default 400; 0: uncapped)
#   --runs N           kvbench runs, each with every policy (default 3)
#   --steps N          measured steps per run, 4 requests x 8 chunks x 2 ranks each (default 4)
#   --chunk-size SIZE  bytes per chunk per rank (default 8MiB)
#   --block-size SIZE  the daemon's block_size: one ranged GET each (default 2MiB)
#   --out DIR          results (default /var/tmp/kvstream-bench-s3-results)
#   --check GAP        exit 3 if the median completion gap exceeds GAP (e.g. 0.05)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source-path=SCRIPTDIR source=lib/s3.sh
source "$root/tools/lib/s3.sh"
nvme=300 s3cap=400 runs=3 steps=4 chunk_size=8MiB block_size=2MiB out=/var/tmp/kvstream-bench-s3-results check=""
parse_options '
  --nvme        nvme
  --s3-cap      s3cap
  --runs        runs
  --steps       steps
  --chunk-size  chunk_size
  --block-size  block_size
  --out         out
  --check       check
' "$@"
need_root "loop devices, mounts, cgroups"
need_built "$build/daemon/kvstreamd" "$build/tools/kvbench"
why=$(s3_missing)
[ -z "$why" ] || die "$why"
work="${BENCH_DIR:-/var/tmp/kvstream-bench-s3}"
mkdir -p "$out" "$work"
down() {
  set +e
  kvstreamd_stop_all
  s3_server_stop
  [ "$s3cap" = 0 ] || tc qdisc del dev lo root 2> /dev/null
  "$tierlab" down --dir "$work"
}
"$tierlab" down --dir "$work"
trap down EXIT
"$tierlab" up --dir "$work" --tier "nvme:8G:$nvme"
s3_server_start "$work/s3"
# The store's network link: a token bucket on the loopback device, as blkio caps the NVMe tier.
if [ "$s3cap" != 0 ]; then
  tc qdisc replace dev lo root tbf rate "$((s3cap * 8))mbit" burst 4mb latency 200ms ||
    die "tc cannot shape the loopback device here (--s3-cap 0: uncapped)"
fi
# The object store is another machine on a real node: moto_server gets the last CPU to itself and
# the daemon and kvbench the others, so that neither side's CPU shows up as the other's bandwidth
# (moto takes a core at a few hundred MB/s). One CPU: no pinning.
cpus=$(nproc)
pin=()
if [ "$cpus" -ge 2 ]; then
  taskset -a -p -c $((cpus - 1)) "$s3_pid" > /dev/null
  pin=(taskset -c "0-$((cpus - 2))")
fi
s3_make_bucket kvbench
s3_credentials_file "$work/s3.credentials"
sock="$work/kvstreamd.sock"
cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $sock, mode: "0600"}
sessions: {max_arena: 4GiB}
staging: {when_full: wait}
block_size: $block_size
logging: {level: ${BENCH_LOG_LEVEL:-warn}}
tiers:
  - {name: nvme, path: $work/mnt/nvme/kvstream, capacity: 7GiB}
  - {name: s3, type: s3, endpoint: $S3_ENDPOINT, bucket: kvbench, prefix: kvstream/,
     credentials_file: $work/s3.credentials, capacity: 7GiB}
YAML
kvstreamd_start "$work/kvstreamd.yaml" "$out/kvstreamd.log" "$tierlab" run --dir "$work" -- "${pin[@]}"
for run in $(seq "$runs"); do
  echo "== run $run of $runs: nvme capped at $nvme MB/s, s3 on moto_server ($S3_ENDPOINT) capped at $s3cap MB/s"
  "$tierlab" run --dir "$work" -- "${pin[@]}" "$build/tools/kvbench" --socket "$sock" --ranks 2 --steps "$steps" --requests 4 \
    --chunks 8 --hit-ratio 1 --chunk-size "$chunk_size" --policies completion,fastest,serial --write-policies "" \
    --key-prefix "run$run/" --json "$out/s3-run$run.json"
  echo
done
python3 - "$out" "$runs" "${check:-}" <<'PY'
import json, statistics, sys
out, runs, check = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {"only:nvme": [], "only:s3": [], "gap": [], "vs_serial": []}
for r in range(1, runs + 1):
    j = json.load(open(f"{out}/s3-run{r}.json"))
    for run in j["runs"]:
        name = run["label"]
        if name in ("only:nvme", "only:s3"):
            rows[name].append(run["throughput_bps"] / 1e6)
        if name == "completion":
            rows["gap"].append(100 * run["gap"])
            rows["vs_serial"].append(run["speedup_vs_serial"])
med = {k: statistics.median(v) for k, v in rows.items() if v}
print(f"medians of {runs} runs: nvme alone {med['only:nvme']:.0f} MB/s, s3 alone {med['only:s3']:.0f} MB/s, "
      f"completion gap to the bound {med['gap']:+.1f}% (runs: {', '.join(f'{g:+.1f}%' for g in rows['gap'])}), "
      f"{med['vs_serial']:.2f}x serial")
if check and med["gap"] > 100 * float(check):
    print(f"check FAILED: median completion gap {med['gap']:+.1f}% > {100 * float(check):.1f}%")
    sys.exit(3)
PY
echo "bench-s3: results in $out (s3-run*.json, kvstreamd.log)"
