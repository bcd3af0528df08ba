# shellcheck shell=bash
# A GlusterFS replica volume on local brick directories, and FUSE mounts of it (one per emulated
# node), for tests and benches: a real distributed file system on one machine. Each mount is its
# own glusterfs client process and its own FUSE connection, so each has its own client caches
# (the kernel's dentries, attributes and pages per superblock; the client's md-cache, open-behind,
# write-behind), as separate nodes would. Source it after tools/lib/common.sh. Needs root.
#   glusterfs_missing                    prints why GlusterFS cannot run here ("" when it can)
#   glusterfs_up DIR VOL REPLICA NODES   glusterd (started if not running), volume VOL of REPLICA
#                                        bricks DIR/bricks/bI, started, mounted on DIR/mnt/nodeJ
#   glusterfs_down                       everything glusterfs_up made, undone (for an EXIT trap)
#   glusterfs_mount DIR / glusterfs_umount DIR    one mount of the volume, up / down (with the
#                                        options of $GLUSTERFS_MOUNT_OPTIONS, none by default)
#   glusterfs_client_pid DIR             the glusterfs client process serving mount DIR
#   glusterfs_brick_pid I                brick I's process (glusterfsd); "" when it is not running
#   glusterfs_volume stop|start|start-force   the volume (start force: restarts killed bricks)
#   glusterfs_wait_reachable DIR [SECONDS]    until DIR answers stat (a client reconnected)
# State (for the functions above): glusterfs_vol, glusterfs_dir, glusterfs_mounts.
#
# What a shared kvstream tier needs of the volume (docs/operations.md, "GlusterFS"):
# performance.strict-o-direct on, so that an O_DIRECT write is not held back in the client's
# write-behind: a chunk's bytes are on the bricks before its rename and link publish it. The
# mounts keep GlusterFS's default timeouts (attributes and entries 1 s, no negative entries).

glusterfs_vol="" glusterfs_dir="" glusterfs_started_glusterd="" glusterfs_host=""
# Options for every mount (mount -o), e.g. negative-timeout=5: GLUSTERFS_MOUNT_OPTIONS.
glusterfs_mount_options=${GLUSTERFS_MOUNT_OPTIONS:-}
glusterfs_mounts=()

glusterfs_missing() {
  local c
  [ "$(id -u)" -eq 0 ] || { echo "needs root (glusterd, FUSE mounts)"; return; }
  for c in glusterd gluster mount.glusterfs; do
    command -v "$c" > /dev/null || { echo "$c not installed (glusterfs-server, glusterfs-client)"; return; }
  done
  { [ -c /dev/fuse ] && grep -qw fuse /proc/filesystems; } || { echo "no FUSE (/dev/fuse, the fuse file system)"; return; }
  # Bricks need an address other than loopback's name: the host name, resolving to this machine.
  getent hosts "$(hostname)" > /dev/null || echo "the host name $(hostname) does not resolve (bricks need it)"
}

# gluster ARGS...: the CLI without prompts.
glusterfs_cli() { gluster --mode=script "$@"; }

glusterfs_up() {
  local dir=$1 vol=$2 replica=$3 nodes=$4 i bricks=()
  glusterfs_dir=$dir glusterfs_vol=$vol glusterfs_host=$(hostname)
  if ! glusterfs_cli volume list > /dev/null 2>&1; then
    mkdir -p "$dir"
    glusterd --pid-file="$dir/glusterd.pid" || die "glusterd did not start"
    glusterfs_started_glusterd=$dir/glusterd.pid
    for _ in $(seq 100); do glusterfs_cli volume list > /dev/null 2>&1 && break; sleep 0.1; done
    glusterfs_cli volume list > /dev/null 2>&1 || die "glusterd does not answer"
  fi
  for i in $(seq "$replica"); do
    mkdir -p "$dir/bricks/b$i"
    bricks+=("$glusterfs_host:$dir/bricks/b$i")
  done
  # force: bricks on the root file system and on one host (no real replica placement).
  glusterfs_cli volume create "$vol" replica "$replica" "${bricks[@]}" force > /dev/null ||
    die "gluster volume create $vol failed"
  glusterfs_cli volume set "$vol" performance.strict-o-direct on > /dev/null
  glusterfs_volume start
  for i in $(seq "$nodes"); do glusterfs_mount "$dir/mnt/node$i"; done
}

glusterfs_volume() {
  case $1 in
    stop) glusterfs_cli volume stop "$glusterfs_vol" force > /dev/null ;;
    start) glusterfs_cli volume start "$glusterfs_vol" > /dev/null ;;
    start-force) glusterfs_cli volume start "$glusterfs_vol" force > /dev/null ;;
  esac
}

glusterfs_mount() {
  mkdir -p "$1"
  mount -t glusterfs ${glusterfs_mount_options:+-o "$glusterfs_mount_options"} "localhost:/$glusterfs_vol" "$1" ||
    die "mount of $glusterfs_vol on $1 failed"
  glusterfs_mounts+=("$1")
  glusterfs_wait_reachable "$1" 10 || die "$1 does not answer after its mount"
}

# Unmounts DIR (lazily where a process still uses it) and ends its client process.
glusterfs_umount() {
  local pid
  pid=$(glusterfs_client_pid "$1")
  umount "$1" 2> /dev/null || umount -l "$1" 2> /dev/null || true
  [ -z "$pid" ] || kill "$pid" 2> /dev/null || true
}

glusterfs_client_pid() {
  pgrep -f -x "/usr/sbin/glusterfs --process-name fuse --volfile-server=localhost --volfile-id=/$glusterfs_vol $1" || true
}

glusterfs_brick_pid() {
  local pid
  pid=$(cat "/var/run/gluster/vols/$glusterfs_vol/$glusterfs_host${glusterfs_dir//\//-}-bricks-b$1.pid" 2> /dev/null) || true
  pid=${pid//[!0-9]/}
  glusterfs_alive "$pid" && echo "$pid"
  return 0
}

# glusterfs_alive PID: the process runs (a zombie does not: killed, not yet reaped by its parent).
glusterfs_alive() {
  [ -n "$1" ] && [ -r "/proc/$1/stat" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2> /dev/null)" != Z ]
}

glusterfs_wait_reachable() {
  local _
  for _ in $(seq $((${2:-10} * 10))); do
    stat "$1" > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

# The unix sockets (-S) of the volume's brick processes, and of the self-heal daemon when glusterd
# is ours: glusterd leaves them behind in /var/run/gluster.
glusterfs_sockets() {
  local pid pattern="--volfile-id $glusterfs_vol\."
  [ -z "$glusterfs_started_glusterd" ] || pattern="$pattern|--volfile-id shd/"
  for pid in $(pgrep -f -- "$pattern"); do
    tr '\0' '\n' < "/proc/$pid/cmdline" 2> /dev/null | grep -A1 -x -- -S | grep '^/var/run/gluster/[0-9a-f]*\.socket$'
  done
}

glusterfs_down() {
  local m sockets
  [ -n "$glusterfs_vol" ] || return 0
  mapfile -t sockets < <(glusterfs_sockets)
  for m in "${glusterfs_mounts[@]}"; do glusterfs_umount "$m"; done
  glusterfs_mounts=()
  glusterfs_cli volume stop "$glusterfs_vol" force > /dev/null 2>&1
  glusterfs_cli volume delete "$glusterfs_vol" > /dev/null 2>&1
  rm -f /var/run/gluster/vols/"$glusterfs_vol"/*.pid  # glusterd leaves its bricks' pid files
  rmdir /var/run/gluster/vols/"$glusterfs_vol" 2> /dev/null
  [ "${#sockets[@]}" = 0 ] || rm -f "${sockets[@]}"
  rm -rf "$glusterfs_dir/bricks"
  rmdir "$glusterfs_dir"/mnt/* "$glusterfs_dir/mnt" 2> /dev/null  # mount points only, never what is under one
  if [ -n "$glusterfs_started_glusterd" ]; then  # the volume's processes went with the volume
    local pid _
    pid=$(cat "$glusterfs_started_glusterd")
    for _ in $(seq 50); do  # its hook scripts (volume delete's) ask it things: let them finish
      pgrep -P "$pid" > /dev/null || break
      sleep 0.1
    done
    kill "$pid" 2> /dev/null
    rm -f "$glusterfs_started_glusterd"
    glusterfs_started_glusterd=""
  fi
  glusterfs_vol=""
}
