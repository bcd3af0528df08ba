# shellcheck shell=bash disable=SC2154  # work, out, tierlab, nodes, python: tools/bench-nodes.sh
# tools/bench-nodes.sh --glusterfs: the shared PFS tier on a GlusterFS volume (tools/lib/
# glusterfs.sh), each node on its own FUSE mount of it, and fio on the same mounts. Source it after
# tools/lib/glusterfs.sh.
#   gnodes_up          replica-2 volume with both bricks on tierlab's "pfs" loop device (ext4 at
#                      DIR/mnt/pfs), mounted once per node; the bricks open every file O_DIRECT
#                      (o-direct) and their processes (glusterfsd) are moved into tierlab's blkio
#                      cgroup, so the PFS read cap applies to the volume: the clients only talk TCP
#                      to the bricks, the bricks read the device
#   gnodes_mount I     node I's mount of the volume (its shared tier lives under it)
#   gnodes_fio         fio, O_DIRECT, on the same mounts: the N GlusterFS mounts at once, then every
#                      node's NVMe and GlusterFS mounts at once (all 2N); MB/s in OUT/fio-*.json
#   gnodes_device_read bytes read so far from the PFS loop device (every brick's reads; phase 2
#                      records it before and after, phase 5 sets it against the daemons' PFS bytes)
#   gnodes_down        the volume, mounts and glusterd (when started here) gone (for the EXIT trap)
# With performance.strict-o-direct on (glusterfs.sh) the client passes O_DIRECT on to the bricks,
# which read the device directly: no page cache on either side, so the cap holds for re-reads.

gnodes_replica=2
gnodes_fio_mib=256  # per fio file: one on every mount

gnodes_mount() { echo "$work/mnt/pfs/gluster/mnt/node$1"; }

gnodes_up() {
  local why cg b pid m
  why=$(glusterfs_missing)
  [ -z "$why" ] || die "--glusterfs: $why"
  glusterfs_up "$work/mnt/pfs/gluster" "kvs-bench-nodes-$$" "$gnodes_replica" "$nodes"
  # Every brick fd O_DIRECT (the posix xlator's o-direct, which `gluster volume set` does not
  # offer: written into the bricks' volfiles, the bricks restarted on them). Without it the
  # daemons' chunk reads reached the bricks buffered and came from the bricks' page cache: the
  # device read 0 MB while the daemons counted 22 GB from the PFS (fio's O_DIRECT reads did reach
  # it). A later `volume set` would rewrite the volfiles: none follows.
  for b in $(seq "$gnodes_replica"); do
    pid=$(glusterfs_brick_pid "$b")
    [ -z "$pid" ] || kill "$pid"
    for _ in $(seq 50); do glusterfs_alive "$pid" || break; sleep 0.1; done
  done
  sed -i 's|^\(    option directory .*\)$|\1\n    option o-direct on|' \
    "/var/lib/glusterd/vols/$glusterfs_vol/$glusterfs_vol.$glusterfs_host."*"-bricks-b"[0-9]*.vol
  glusterfs_volume start-force
  # The clients find the bricks' new ports in a few seconds; until then a mkdir fails (ENOTCONN).
  for m in "${glusterfs_mounts[@]}"; do
    for _ in $(seq 300); do mkdir "$m/.up" 2> /dev/null && break; sleep 0.1; done
    rmdir "$m/.up" 2> /dev/null || die "--glusterfs: $m is not writable after the bricks' restart"
  done
  cg=$("$tierlab" status --dir "$work" | awk '$1 == "cgroup" { print $2 }')
  for b in $(seq "$gnodes_replica"); do
    pid=$(glusterfs_brick_pid "$b")
    [ -n "$pid" ] || die "--glusterfs: brick $b has no process"
    echo "$pid" > "$cg/cgroup.procs"  # every thread of it: the reads it issues are capped
  done
}

gnodes_down() { glusterfs_down; }

gnodes_device_read() {
  local dev
  dev=$("$tierlab" status --dir "$work" | awk '$1 == "tier" && $2 == "pfs" { print $3 }')
  awk '{ printf "%.0f\n", $3 * 512 }' "/sys/block/${dev#/dev/}/stat"
}

# gnodes_fio_run NAME FILE...: fio, one job per FILE (1 MiB O_DIRECT reads, libaio depth 4, 10 s),
# inside the cgroup; prints the MB/s of each job and their sum, and writes OUT/fio-NAME.json.
gnodes_fio_run() {
  local name=$1 f args=()
  shift
  for f in "$@"; do args+=(--name="$f" --filename="$f"); done
  "$tierlab" run --dir "$work" -- fio --rw=read --bs=1M --direct=1 --ioengine=libaio --iodepth=4 \
    --time_based --runtime=10 --output-format=json --output="$out/fio-$name.json" "${args[@]}" > /dev/null ||
    die "fio ($name) failed"
  "$python" - "$out/fio-$name.json" <<'PY'
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
mbs = [j["read"]["bw_bytes"] / 1e6 for j in jobs]
print(" + ".join(f"{m:.1f}" for m in mbs) + f" = {sum(mbs):.1f} MB/s")
PY
}

gnodes_fio() {
  local i gl=() nv=()
  for i in $(seq "$nodes"); do
    gl+=("$(gnodes_mount "$i")/fio-node$i")
    nv+=("$work/mnt/nvme$i/fio-node$i")
  done
  for f in "${gl[@]}" "${nv[@]}"; do
    dd if=/dev/zero of="$f" bs=1M count="$gnodes_fio_mib" oflag=direct status=none || die "cannot write $f"
  done
  printf '%-44s ' "fio, the $nodes GlusterFS mounts at once:"
  gnodes_fio_run pfs "${gl[@]}"
  printf '%-44s ' "fio, every NVMe and GlusterFS mount at once:"
  gnodes_fio_run all "${nv[@]}" "${gl[@]}"
  rm -f "${gl[@]}" "${nv[@]}"
  "$python" - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def total(name):
    return sum(j["read"]["bw_bytes"] for j in json.load(open(f"{out}/fio-{name}.json"))["jobs"]) / 1e6
agg = json.load(open(f"{out}/aggregate.json"))
dev = [int(float(x)) for x in open(f"{out}/pfs-device.txt").read().split()]  # bytes before, after; ns
print(f"phase 2: the PFS device read {(dev[1] - dev[0]) / 1e6:.0f} MB in {(dev[3] - dev[2]) / 1e9:.1f} s "
      f"({(dev[1] - dev[0]) / (dev[3] - dev[2]) * 1e3:.1f} MB/s); the daemons' step records count "
      f"{agg['pfs_all_bytes'] / 1e6:.0f} MB read from the PFS in it")
print(f"aggregate (phase 2): {agg['aggregate_bps'] / 1e6:.1f} MB/s = {agg['aggregate_bps'] / 1e6 / total('all'):.3f} "
      f"of fio on all mounts ({total('all'):.1f}); PFS: {agg['pfs_bps'] / 1e6:.1f} MB/s = "
      f"{agg['pfs_bps'] / 1e6 / total('pfs'):.3f} of fio on the GlusterFS mounts ({total('pfs'):.1f})")
PY
}
