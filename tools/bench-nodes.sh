#!/usr/bin/env bash
# Many nodes, one parallel file system, on one machine (docs/design.md section 10): N kvstreamd
# daemons (the nodes), each with its own emulated NVMe tier and all on ONE emulated PFS tier (one
# directory, `shared: true`), every daemon inside the same tools/tierlab blkio cgroup, so each node
# has its own NVMe read cap and all contend for the one PFS cap. Each node is driven by its own
# kvbench with keys of its own (--key-prefix nodeI/) and its own load (idle gap between steps).
#   1. each node alone (the others idle): kvbench's only:nvme and only:pfs runs (its NVMe bandwidth
#      b_i and the PFS's B), completion (its step with the PFS to itself), fastest (NVMe only, step
#      batching) and serial (NVMe only, chunk after chunk: single-tier offloading);
#   2. all nodes at once, each by completion routing, node i at load L_i (gap between steps = its
#      solo step x (1/L_i - 1), as kvsim --node-load), for about --seconds; counted over the window
#      in which every node is reading (each daemon's step records give each step's start): per
#      node its bytes and share per tier, its mean step time against its bound and against serial
#      NVMe-only, and the aggregate of all nodes against every node reading its NVMe alone;
#   3. kvsim --validate-nodes on the measured per-node shares (OUT/nodes.json): predicted vs measured;
#   4. cross-node reuse (2 nodes or more): node1 persists a set of chunks; node2 reads the same keys,
#      first from node1's files on the PFS, then again once they are copied to its own NVMe
#      (shared_copies); the baseline is node2 without a shared tier (every chunk a miss).
# The bound of a node whose PFS is contended: D_i / (b_i + p_i), with b_i its NVMe alone (only:nvme,
# phase 1) and p_i the PFS bandwidth it got while it had PFS reads in flight (its step records'
# PFS bytes over PFS busy time, in the window). kvbench's own bound (D / sum of each tier alone, from
# its only:<tier> runs) holds for a node with the PFS to itself: phase 1 prints it. The daemon's own
# per-step bound (D / the tiers' bandwidths in that very step) is printed beside it.
# Sizes stay small (per node --steps x 4 requests x 4 chunks x --chunk-size, 512 MiB by default, on
# its NVMe and on the PFS, plus 256 MiB for the reuse run): sparse images, about 1.2 GiB of data per
# node. The sum of the caps ((N x NVMe) + PFS) must stay below what the disk under DIR delivers, or
# the disk, not the caps, sets the bandwidths (docs/design.md section 5): check the printed alone
# bandwidths against the caps; put DIR on tmpfs (--dir /dev/shm/...) to take the disk out.
# Needs root and a build (tests/run.sh; BUILD_DIR, default build/). Results (JSON, logs) go to OUT.
# Tears everything down, also on failure.
# Usage: sudo tools/bench-nodes.sh [--nodes N] [--nvme MBPS] [--pfs MBPS] [--dir DIR] [--out DIR]
#          [--seconds S] [--loads L1,L2,...] [--steps N] [--chunk-size SIZE] [--glusterfs]
#   --nodes N        nodes (daemons), 1 to 8 (default 4)
#   --nvme MBPS      each node's NVMe read cap (default 300)
#   --pfs MBPS       the one PFS read cap, shared by all nodes (default 300)
#   --dir DIR        tier images and sockets (default $BENCH_DIR or /var/tmp/kvstream-bench-nodes: on
#                    disk; /dev/shm/... puts them in memory)
#   --out DIR        results (default /var/tmp/kvstream-bench-nodes-results)
#   --seconds S      length of phase 2, all nodes at once (default 60; at most 250: a daemon keeps its
#                    last 1024 step records)
#   --loads LIST     per-node loads in (0, 1], node1 first (default 1,0.5,0.25,0.1, repeated)
#   --steps N        distinct steps per node, 16 chunks each (default 4); phase 2 repeats them
#   --chunk-size S   bytes per chunk (default 8MiB: 128 MiB per step)
#   --glusterfs      the PFS tier is a GlusterFS volume (tools/lib/bench-nodes-glusterfs.sh): replica
#                    2, both bricks on the capped PFS loop device, O_DIRECT, in the cgroup;
#                    node i's shared tier on its own FUSE mount of it. Adds phase 5: fio (O_DIRECT)
#                    on the same mounts, against phase 2's aggregate and PFS bandwidth
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
help_plain=1  # --help: the header without its comment marks
nodes=4 nvme=300 pfs=300 work="${BENCH_DIR:-/var/tmp/kvstream-bench-nodes}" out=/var/tmp/kvstream-bench-nodes-results
seconds=60 loads="1,0.5,0.25,0.1" steps=4 chunk=8MiB glusterfs=""
parse_options '
  --nodes       nodes
  --nvme        nvme
  --pfs         pfs
  --dir         work
  --out         out
  --seconds     seconds
  --loads       loads
  --steps       steps
  --chunk-size  chunk
  --glusterfs   glusterfs=1
' "$@"
[[ $nodes =~ ^[1-8]$ ]] || usage_error "--nodes is 1 to 8"
for v in "$nvme" "$pfs" "$seconds" "$steps"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || usage_error "--nvme, --pfs, --seconds and --steps take positive integers"
done
[ "$seconds" -le 250 ] || usage_error "--seconds is at most 250 (a daemon keeps 1024 step records)"
[[ $chunk =~ ^[1-9][0-9]*MiB$ ]] || usage_error "--chunk-size is N MiB (e.g. 8MiB)"
python=python3
need_root "loop devices, mounts, cgroups"
need_built "$build/daemon/kvstreamd" "$build/tools/kvbench" "$build/tools/kvstreamctl" "$build/tools/kvsim"
command -v "$python" > /dev/null || die "needs python3 (deploy/install-deps.sh installs it)"
if [ -n "$glusterfs" ]; then
  # shellcheck source-path=SCRIPTDIR source=lib/glusterfs.sh
  source "$root/tools/lib/glusterfs.sh"
  # shellcheck source-path=SCRIPTDIR source=lib/bench-nodes-glusterfs.sh
  source "$root/tools/lib/bench-nodes-glusterfs.sh"
  command -v fio > /dev/null || die "--glusterfs needs fio"
fi
ctl() { "$build/tools/kvstreamctl" --socket "$1" --json "${@:2}"; }
export KVSIM="$build/tools/kvsim"

# Node i's load, from --loads (repeated when it is shorter than N).
IFS=, read -r -a load_list <<< "$loads"
for l in "${load_list[@]}"; do
  awk -v l="$l" 'BEGIN { exit !(l > 0 && l <= 1) }' || usage_error "a load is in (0, 1], got '$l'"
done
chunk_mib=${chunk%MiB}
step_mib=$((16 * chunk_mib))
node_mib=$((steps * step_mib))
reuse_steps=2 reuse_mib=$((2 * step_mib))
nvme_img=$((node_mib + reuse_mib + 512))
pfs_img=$((nodes * node_mib + reuse_mib + 512))
# On GlusterFS each brick holds a copy, and phase 5 writes a fio file per node (and per NVMe tier).
[ -z "$glusterfs" ] || pfs_img=$((gnodes_replica * (nodes * (node_mib + gnodes_fio_mib) + 2 * reuse_mib) + 512))
[ -z "$glusterfs" ] || nvme_img=$((nvme_img + gnodes_fio_mib))
shape=(--ranks 1 --requests 4 --chunks 4 --hit-ratio 1 --chunk-size "$chunk" --write-policies "")

benches=()
cleanup() {
  set +e
  for p in "${benches[@]}"; do kill "$p" 2> /dev/null; done
  kvstreamd_stop_all
  [ -z "$glusterfs" ] || gnodes_down
  "$tierlab" down --dir "$work"
}
mkdir -p "$out" "$work"
rm -f "$out"/*.json "$out"/*.log
"$tierlab" down --dir "$work"
trap cleanup EXIT
tiers=()
for i in $(seq "$nodes"); do tiers+=(--tier "nvme$i:${nvme_img}M:$nvme"); done
echo "== tiers: $nodes NVMe (${nvme} MB/s each) and one PFS (${pfs} MB/s, shared) under $work"
"$tierlab" up --dir "$work" "${tiers[@]}" --tier "pfs:${pfs_img}M:$pfs" > /dev/null
# pfs_dir I: where node I sees the PFS.
pfs_dir() { echo "$work/mnt/pfs"; }
if [ -n "$glusterfs" ]; then
  echo "== the PFS: GlusterFS volume, replica $gnodes_replica, bricks on its loop device, one FUSE mount per node"
  gnodes_up
  pfs_dir() { gnodes_mount "$1"; }
fi

# start_daemon CONFIG LOG: kvstreamd inside the capped cgroup.
start_daemon() { kvstreamd_start "$1" "$2" "$tierlab" run --dir "$work" --; }
sock=()
for i in $(seq "$nodes"); do
  sock[i]="$work/node$i.sock"
  cat > "$work/node$i.yaml" <<YAML
socket: {path: ${sock[i]}, mode: "0600"}
node: node$i
sessions: {max_arena: 2GiB}
staging: {limit: 512MiB, when_full: wait}  # kvbench counts every persist as written
logging: {level: warn}
tiers:
  - {name: nvme, path: $work/mnt/nvme$i/kvstream, capacity: $((nvme_img - 256))MiB}
  - {name: pfs, path: $(pfs_dir "$i")/kvstream, capacity: $((node_mib + reuse_mib + 128))MiB, shared: true, miss_ttl: 1s}
YAML
  start_daemon "$work/node$i.yaml" "$out/kvstreamd-node$i.log"
done

echo
echo "== 1. each node alone: $steps steps of 4 requests x 4 chunks x $chunk ($step_mib MiB), the other nodes idle"
for i in $(seq "$nodes"); do
  "$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "${sock[i]}" "${shape[@]}" --steps "$steps" \
    --key-prefix "node$i/" --policies completion,fastest,serial --settle 3 --json "$out/alone-node$i.json" \
    > "$out/alone-node$i.log" 2>&1 || { cat "$out/alone-node$i.log"; die "kvbench failed on node$i"; }
  grep -E '^(nvme|pfs) +alone' "$out/alone-node$i.log" | sed "s/^/node$i  /; s/together (completion)/both tiers (completion)/"
done

# The gaps (load L: solo step x (1/L - 1)) and phase 2's repeats of the steps per node, sized with
# kvsim's prediction of each node's step time so that every node reads for about --seconds.
"$python" - "$out" "$nodes" "$pfs" "$seconds" "$steps" "${load_list[@]}" <<'PY'
import json, subprocess, sys, os
out, n, pfs_mbps, seconds, steps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
loads = [float(x) for x in sys.argv[6:]]
runs = [{r["label"]: r for r in json.load(open(f"{out}/alone-node{i}.json"))["runs"]} for i in range(1, n + 1)]
plan = []
for i, r in enumerate(runs):
    load = loads[i % len(loads)]
    solo = r["completion"]["total_seconds"] / steps
    plan.append({"node": f"node{i + 1}", "load": load, "gap_s": solo * (1 / load - 1), "solo_s": solo,
                 "nvme_bps": r["only:nvme"]["throughput_bps"], "pfs_bps": r["only:pfs"]["throughput_bps"],
                 "step_bytes": r["completion"]["bytes"] / steps})
pfs_bps = sum(p["pfs_bps"] for p in plan) / n
kvsim = os.environ["KVSIM"]
subprocess.run([kvsim, "--nodes", str(n), "--nvme-bw", ",".join(str(p["nvme_bps"]) for p in plan),
                "--pfs-bw", str(pfs_bps), "--step-bytes", ",".join(str(p["step_bytes"]) for p in plan),
                "--node-gap", ",".join(str(p["gap_s"]) for p in plan), "--gaps", "fixed",
                "--json", f"{out}/predicted.json"], check=True, stdout=subprocess.DEVNULL)
predicted = json.load(open(f"{out}/predicted.json"))["nodes"]
with open(f"{out}/plan.txt", "w") as f:
    for p, pred in zip(plan, predicted):
        cycle = steps * (pred["step_s"] + p["gap_s"])
        repeats = max(2, round(seconds / cycle + 0.5))
        f.write(f'{p["node"]} {p["gap_s"]:.4f} {repeats} {p["load"]}\n')
        print(f'{p["node"]}  load {p["load"]:.2f}: gap {p["gap_s"]:.3f} s (solo step {p["solo_s"]:.3f} s), '
              f'{repeats} x {steps} steps (kvsim: {pred["step_s"]:.3f} s per step)')
PY

echo
echo "== 2. all nodes at once ($nodes), completion routing, about ${seconds} s"
for i in $(seq "$nodes"); do ctl "${sock[i]}" tiers > "$out/tiers-before-node$i.json"; done
[ -z "$glusterfs" ] || dev0=$(gnodes_device_read)
t0=$(date +%s%N)
for i in $(seq "$nodes"); do
  read -r _ gap repeats _ < <(sed -n "${i}p" "$out/plan.txt")
  policies=$(printf 'completion%.0s,' $(seq "$repeats"))
  "$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "${sock[i]}" "${shape[@]}" --steps "$steps" \
    --key-prefix "node$i/" --no-populate --no-alone --policies "${policies%,}" --step-gap "$gap" --settle 1 \
    --json "$out/together-node$i.json" > "$out/together-node$i.log" 2>&1 &
  benches+=($!)
done
failed=0
for i in $(seq "$nodes"); do
  wait "${benches[i - 1]}" || { failed=1; echo "bench-nodes: kvbench failed on node$i:" >&2; tail -3 "$out/together-node$i.log" >&2; }
done
benches=()
[ "$failed" = 0 ] || exit 1
[ -z "$glusterfs" ] || echo "$dev0 $(gnodes_device_read) $t0 $(date +%s%N)" > "$out/pfs-device.txt"
for i in $(seq "$nodes"); do
  ctl "${sock[i]}" steps -n 1024 > "$out/steps-node$i.json"
  ctl "${sock[i]}" tiers > "$out/tiers-node$i.json"
done

"$python" - "$out" "$nodes" "$pfs" "$steps" "$t0" <<'PY'
import json, subprocess, sys, os
out, n, pfs_cap, steps, t0 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) * 1e6, int(sys.argv[4]), int(sys.argv[5])
mb = 1e6
nodes = []
for i in range(1, n + 1):
    alone = {r["label"]: r for r in json.load(open(f"{out}/alone-node{i}.json"))["runs"]}
    together = json.load(open(f"{out}/together-node{i}.json"))
    client = [s["seconds"] for r in together["runs"] for s in r["steps"]]
    recs = [r for r in json.load(open(f"{out}/steps-node{i}.json")) if r["start_unix_ns"] >= t0]
    after = {t["name"]: t for t in json.load(open(f"{out}/tiers-node{i}.json"))}
    before = {t["name"]: t for t in json.load(open(f"{out}/tiers-before-node{i}.json"))}
    tiers = list(after)
    # Reads abandoned on a tier and served by the other one: on the PFS, the NVMe took them over.
    hedged = {t: after[t]["hedged_reads"] - before[t]["hedged_reads"] for t in tiers}
    if len(recs) != len(client):
        print(f"bench-nodes: node{i}: {len(recs)} daemon step records for {len(client)} kvbench steps; "
              "step times are the daemon's", file=sys.stderr)
        client = [r["wall_seconds"] for r in recs]
    for r, c in zip(recs, client):
        r["start"] = r["start_unix_ns"] / 1e9
        r["end"] = r["start"] + r["wall_seconds"]
        r["client_s"] = c
    _, gap, _, load = open(f"{out}/plan.txt").read().split("\n")[i - 1].split()
    nodes.append({"name": f"node{i}", "alone": alone, "recs": recs, "tiers": tiers, "gap_cfg": float(gap), "hedged": hedged,
                  "load": float(load)})
# The window: from the latest first step to the earliest last step end; every node reads throughout.
w0 = max(nd["recs"][0]["start"] for nd in nodes)
w1 = min(nd["recs"][-1]["end"] for nd in nodes)
print(f"window: {w1 - w0:.1f} s in which every node reads (steps wholly inside it are counted)")
agg = agg_serial = agg_fastest = pfs_total = 0
rows, model_nodes = [], []
for nd in nodes:
    a = nd["alone"]
    win = [r for r in nd["recs"] if r["start"] >= w0 and r["end"] <= w1]
    if len(win) < 3:
        print(f"bench-nodes: {nd['name']}: only {len(win)} steps in the window (raise --seconds)", file=sys.stderr)
        win = nd["recs"]
    k = len(win)
    by_tier = {t: sum(tt["bytes"] for r in win for tt in r["tiers"] if tt["tier"] == t) for t in nd["tiers"]}
    busy = {t: sum(tt["busy_seconds"] for r in win for tt in r["tiers"] if tt["tier"] == t) for t in nd["tiers"]}
    total = sum(by_tier.values())
    D = sum(r["bytes"] for r in win) / k
    step = sum(r["client_s"] for r in win) / k
    daemon_bound = sum(r["bound_seconds"] for r in win) / k
    nvme_idle = sum(r["wall_seconds"] - tt["busy_seconds"] for r in win for tt in r["tiers"] if tt["tier"] == "nvme") / k
    starts = [r["start"] for r in win]
    cycle = (starts[-1] - starts[0]) / (k - 1) if k > 1 else step + nd["gap_cfg"]
    gap_eff = max(0.0, cycle - step)  # the idle gap plus kvbench's own time between steps
    b = a["only:nvme"]["throughput_bps"]
    p = by_tier["pfs"] / busy["pfs"] if busy["pfs"] > 0 else 0
    bound = D / (b + p)
    solo = a["completion"]["total_seconds"] / steps
    solo_bound = a["completion"]["bound_seconds"] / steps
    fastest = a["fastest"]["total_seconds"] / steps
    serial = a["serial"]["total_seconds"] / steps
    agg += D / cycle
    agg_serial += D / (serial + gap_eff)
    agg_fastest += D / (fastest + gap_eff)
    pfs_total += by_tier["pfs"]
    rows.append(dict(name=nd["name"], load=nd["load"], k=k, D=D, nvme=by_tier["nvme"], pfs=by_tier["pfs"],
                     share=by_tier["pfs"] / total, p=p, step=step, bound=bound, daemon_bound=daemon_bound, solo=solo,
                     solo_share=a["completion"]["tier_share"][1], solo_bound=solo_bound, fastest=fastest,
                     serial=serial, gap_eff=gap_eff, b=b, B=a["only:pfs"]["throughput_bps"], nvme_idle=nvme_idle,
                     tko=nd["hedged"]["pfs"] / len(nd["recs"]), tko_back=nd["hedged"]["nvme"] / len(nd["recs"])))
    model_nodes.append({"node": nd["name"], "nvme_bps": b, "step_bytes": D, "gap_s": gap_eff,
                        "pfs_share": by_tier["pfs"] / total, "step_s": step})
print("\nbytes per tier in the window (from each daemon's step records); alone: the node with the PFS to itself")
print(f"{'node':6} {'load':>5} {'gap_s':>6} {'steps':>5} {'step_MiB':>8} {'nvme_MB':>8} {'pfs_MB':>8} {'pfs%':>6} "
      f"{'alone_pfs%':>10} {'pfs_MB/s':>8}")
for r in rows:
    print(f"{r['name']:6} {r['load']:5.2f} {r['gap_eff']:6.3f} {r['k']:5d} {r['D'] / 2**20:8.1f} {r['nvme'] / mb:8.0f} {r['pfs'] / mb:8.0f} "
          f"{100 * r['share']:5.1f}% {100 * r['solo_share']:9.1f}% {r['p'] / mb:8.1f}")
print("(gap_s: measured idle between steps; pfs_MB/s: its PFS bytes over the time it had PFS reads in flight)")
print("\nmean step time against its bound and NVMe-only; alone = the node with the PFS to itself (phase 1)")
print(f"{'node':6} {'step_s':>7} {'bound_s':>7} {'to_bnd':>7} {'dmn_bnd':>7} {'alone_s':>7} {'alone_bd':>8} "
      f"{'fastest':>7} {'serial':>7} {'vs_serial':>9} {'nv_idle':>7} {'tko/step':>8}")
for r in rows:
    print(f"{r['name']:6} {r['step']:7.3f} {r['bound']:7.3f} {100 * (r['step'] / r['bound'] - 1):+6.1f}% "
          f"{r['daemon_bound']:7.3f} {r['solo']:7.3f} {r['solo_bound']:8.3f} {r['fastest']:7.3f} {r['serial']:7.3f} "
          f"{r['serial'] / r['step']:8.2f}x {1000 * r['nvme_idle']:5.0f}ms {r['tko']:4.2f}/{r['tko_back']:.2f}")
print("(bound_s: D / (b + p): b its NVMe alone (only:nvme), p its pfs_MB/s above; dmn_bnd: the daemon's own per-step\n"
      " bound, D / the tiers' bandwidths in that step; alone_bd: kvbench's D / (only:nvme + only:pfs); fastest and\n"
      " serial: NVMe only, step batching and chunk after chunk (single-tier offloading); nv_idle: time per step the NVMe\n"
      " had no read in flight (waiting for the last PFS blocks); tko/step: PFS reads the NVMe took over / NVMe reads\n"
      " the PFS took over, per step (the daemon's hedged_reads))")
print(f"\naggregate: {agg / mb:.1f} MB/s read by all nodes (D / measured cycle, summed); every node serial NVMe-only "
      f"with the same gaps: {agg_serial / mb:.1f} MB/s ({agg / agg_serial:.3f}x); NVMe-only step batching (fastest): "
      f"{agg_fastest / mb:.1f} MB/s ({agg / agg_fastest:.3f}x); PFS delivered about {pfs_total / (w1 - w0) / mb:.1f} "
      f"MB/s of its {pfs_cap / mb:.0f} MB/s cap")
pfs_all = sum(tt["bytes"] for nd in nodes for r in nd["recs"] for tt in r["tiers"] if tt["tier"] == "pfs")
json.dump({"aggregate_bps": agg, "pfs_bps": pfs_total / (w1 - w0), "pfs_all_bytes": pfs_all}, open(f"{out}/aggregate.json", "w"))
B = sum(r["B"] for r in rows) / len(rows)
queue_depth = next(t["queue_depth"] for t in json.load(open(f"{out}/tiers-node1.json")) if t["name"] == "pfs")
json.dump({"pfs_bps": B, "block_bytes": 1048576, "queue_depth": queue_depth, "gaps": "fixed", "takeover": True,
           "nodes": model_nodes}, open(f"{out}/nodes.json", "w"), indent=2)
print(f"\n== 3. kvsim --validate-nodes {out}/nodes.json (B = {B / mb:.1f} MB/s: the PFS read alone, phase 1)")
sys.stdout.flush()
r = subprocess.run([os.environ["KVSIM"], "--validate-nodes", f"{out}/nodes.json"])
if r.returncode not in (0, 1):
    sys.exit(r.returncode)
PY

if [ "$nodes" -ge 2 ]; then
  echo
  keys=()
  for s in $(seq 0 $((reuse_steps - 1))); do
    for r in 0 1 2 3; do for c in 0 1 2 3; do keys+=("reuse/syn/s$s/r$r/c$c@0"); done; done
  done
  echo "== 4. cross-node reuse: node1 persists ${#keys[@]} chunks ($reuse_mib MiB, keys reuse/...); node2 reads them"
  reuse=("${shape[@]}" --steps "$reuse_steps" --key-prefix reuse/ --no-alone --settle 0)
  "$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "${sock[1]}" "${reuse[@]}" --policies "" \
    > "$out/reuse-node1.log" 2>&1 || { cat "$out/reuse-node1.log"; exit 1; }
  # reuse_read NAME SOCKET POLICIES: node2 reads the keys (no populate), its counters before and after.
  reuse_read() {
    local name=$1 s=$2 policies=$3 rc=0
    ctl "$s" stats > "$out/reuse-$name-before-stats.json"
    ctl "$s" tiers > "$out/reuse-$name-before-tiers.json"
    "$tierlab" run --dir "$work" -- "$build/tools/kvbench" --socket "$s" "${reuse[@]}" --no-populate \
      --policies "$policies" --json "$out/reuse-$name.json" > "$out/reuse-$name.log" 2>&1 || rc=$?
    [ "$rc" = 0 ] || { rm -f "$out/reuse-$name.json"; tail -1 "$out/reuse-$name.log" > "$out/reuse-$name.err"; }
    ctl "$s" stats > "$out/reuse-$name-after-stats.json"
    ctl "$s" tiers > "$out/reuse-$name-after-tiers.json"
  }
  reuse_read first "${sock[2]}" completion
  # The copies to node2's NVMe are written while it reads nothing: wait until none is staged.
  for _ in $(seq 300); do
    ctl "${sock[2]}" stats | "$python" -c 'import json, sys; sys.exit(json.load(sys.stdin)["staged_chunks"] != 0)' && break
    sleep 0.1
  done
  reuse_read second "${sock[2]}" completion,fastest
  # The baseline: node2 without a shared tier (its own NVMe directory and a private PFS directory).
  cat > "$work/node2-private.yaml" <<YAML
socket: {path: $work/node2-private.sock, mode: "0600"}
sessions: {max_arena: 2GiB}
logging: {level: warn}
tiers:
  - {name: nvme, path: $work/mnt/nvme2/kvstream-private, capacity: $((reuse_mib + 128))MiB}
  - {name: pfs, path: $(pfs_dir 2)/private-node2, capacity: $((reuse_mib + 128))MiB}
YAML
  start_daemon "$work/node2-private.yaml" "$out/kvstreamd-node2-private.log"
  ctl "$work/node2-private.sock" lookup "${keys[@]}" > "$out/reuse-private-lookup.json"
  reuse_read private "$work/node2-private.sock" completion
  "$python" - "$out" "${#keys[@]}" <<'PY'
import json, os, sys
out, n = sys.argv[1], int(sys.argv[2])
print(f"{'node2 reads the keys':40} {'hits':>7} {'time_s':>7} {'MB/s':>7} {'nvme%':>6} {'pfs%':>6}  node2's counters after")
for name, what in (("first", "1st read (node1's files)"), ("second", "2nd read (own NVMe copies)"),
                   ("private", "without a shared tier")):
    c = {w: json.load(open(f"{out}/reuse-{name}-{w}.json")) for w in ("before-stats", "after-stats", "before-tiers", "after-tiers")}
    hits = c["after-stats"]["retrieve_hits"] - c["before-stats"]["retrieve_hits"]
    misses = c["after-stats"]["retrieve_misses"] - c["before-stats"]["retrieve_misses"]
    pfs = next(t for t in c["after-tiers"] if t["name"] == "pfs")
    pfs0 = next(t for t in c["before-tiers"] if t["name"] == "pfs")
    st = c["after-stats"]
    extra = (f"pfs discovered +{pfs['discovered'] - pfs0['discovered']}, foreign_chunks {pfs['foreign_chunks']}, "
             f"shared_copies {st['shared_copies']} (skipped {st['shared_copies_skipped']})" if pfs["shared"] else
             f"retrieve misses {misses}")
    path = f"{out}/reuse-{name}.json"
    if os.path.exists(path):
        runs = json.load(open(path))["runs"]
        for r in runs:
            label = f"{what}, {r['label']}"
            print(f"{label:40} {hits // len(runs):3d}/{(hits + misses) // len(runs):<3d} {r['total_seconds']:7.3f} "
                  f"{r['throughput_bps'] / 1e6:7.1f} {100 * r['tier_share'][0]:5.1f}% {100 * r['tier_share'][1]:5.1f}%  {extra}")
    else:
        err = open(f"{out}/reuse-{name}.err").read().strip().removeprefix("kvbench: ")
        print(f"{what:40} {hits:3d}/{hits + misses:<3d} {'-':>7} {'-':>7} {'-':>6} {'-':>6}  {extra}")
        print(f"{'':40} kvbench stops at the first step that misses: {err[:100]}")
lookup = json.load(open(f"{out}/reuse-private-lookup.json"))
print(f"(hits: chunks of the run served / asked for; without a shared tier a lookup finds "
      f"{sum(k['present'] for k in lookup['keys'])} of the {n} keys: every chunk is recomputed)")
PY
else
  echo
  echo "== 4. cross-node reuse: needs --nodes 2 or more (skipped)"
fi

if [ -n "$glusterfs" ]; then
  echo
  echo "== 5. fio on the same mounts (O_DIRECT, 1 MiB reads, depth 4 per file, 10 s; inside the cgroup)"
  gnodes_fio
fi

echo
for log in "$out"/kvstreamd-*.log; do
  if [ -s "$log" ]; then
    echo "daemon log $(basename "$log"): $(wc -l < "$log") lines (warn and above); the first 5:"
    head -5 "$log" | sed 's/^/  /'
  fi
done
echo "bench-nodes: results in $out (alone-*, together-*, steps-*, nodes.json, predicted.json, reuse-*, daemon logs)"
