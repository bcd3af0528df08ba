#!/usr/bin/env bash
# device-check: how reads scale on a machine with many cores (issue 31's check; about 4 minutes,
# no network, no build there: it runs binaries built here).
#
#   tools/device-check.sh --bundle DIR   (here) stripped kvstreamd, kvbench and the shared libraries
#                                        they need (not glibc's) into DIR, to carry to the machine
#   tools/device-check.sh [--bin DIR]    (there) the check, with the binaries of DIR (default: the
#                                        bundle at .device-bundle, else the build directory)
#
# The check: kvstreamd on 1, 2 and 4 tiers in tmpfs directories (reads that are CPU copies), each
# with CPU-copy reads on the loop's thread (KVSTREAM_COPY_THREADS=0) and on copy threads (=1), and
# on 1 tier in a directory on the machine's own disk; kvbench's completion run on each, and fio
# reading all the tiers' files at once where fio is installed. Prints GB/s, N tiers over 1 tier and
# completion over fio. The daemon's `auto` choice takes copy threads from 8 cores on.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

bundle() {
  local dir=$1 lib
  need_built "$build/daemon/kvstreamd" "$build/tools/kvbench"
  rm -rf "$dir" && mkdir -p "$dir/lib"
  for b in "$build/daemon/kvstreamd" "$build/tools/kvbench"; do
    strip -o "$dir/$(basename "$b")" "$b"
    ldd "$b" | awk '/=> \// {print $3}' | while read -r lib; do
      case $(basename "$lib") in libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;;
        *) [ -e "$dir/lib/$(basename "$lib")" ] || cp -L "$lib" "$dir/lib/" ;;
      esac
    done
  done
  du -sh "$dir"
}

bin=""
unset bundle_dir  # set (maybe empty) once --bundle is given
parse_options '
  --bundle  bundle_dir
  --bin     bin
' "$@"
if [ -n "${bundle_dir+set}" ]; then
  [ -n "$bundle_dir" ] || usage_error "--bundle takes a directory"
  [ -z "$bin" ] || usage_error "--bundle and --bin do not go together"
  bundle "$bundle_dir"
  exit 0
fi
if [ -z "$bin" ]; then
  if [ -x "$root/.device-bundle/kvstreamd" ]; then bin="$root/.device-bundle"; else bin=""; fi
fi
if [ -n "$bin" ]; then
  kvstreamd="$bin/kvstreamd" kvbench="$bin/kvbench"
  export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  kvstreamd="$build/daemon/kvstreamd" kvbench="$build/tools/kvbench"
fi
need_built "$kvstreamd" "$kvbench"
"$kvstreamd" --version > /dev/null || die "$kvstreamd does not run here (libraries: ldd $kvstreamd)"
fio_args=()
command -v fio > /dev/null || echo "device-check: no fio here: no fio reference"

shm=/dev/shm/kvstream-device-check
disk="${DISK_DIR:-$root/.device-check-disk}"
out="${OUT:-/tmp}/device-check"
mkdir -p "$out"
cleanup() {
  kvstreamd_stop_all
  rm -rf "$shm" "$disk"
}
trap cleanup EXIT

# run NAME COPY_THREADS DIR...: kvstreamd on one tier per DIR, kvbench's completion run; prints
# "GB/s fio-GB/s" (fio 0 when absent) on stdout, kvbench's report in $out/NAME.txt.
run() {
  local name=$1 copy=$2; shift 2
  local sock="$shm/$name.sock" yaml="$shm/$name.yaml" i=0 dirs=""
  mkdir -p "$shm"
  { echo "socket: {path: $sock, mode: \"0600\"}"; echo "sessions: {max_arena: 4GiB}"; echo "logging: {level: warn}"
    echo "tiers:"; } > "$yaml"
  for d in "$@"; do
    mkdir -p "$d"
    echo "  - {name: t$i, path: $d, capacity: 8GiB, queue_depth: 8}" >> "$yaml"
    dirs="${dirs:+$dirs,}$d"; i=$((i + 1))
  done
  KVSTREAM_COPY_THREADS=$copy kvstreamd_start "$yaml" "$out/$name.log"
  fio_args=()
  command -v fio > /dev/null && fio_args=(--fio-all "$dirs")
  "$kvbench" --socket "$sock" --ranks 2 --steps 4 --requests 4 --chunks 4 --hit-ratio 1 --chunk-size 16MiB \
    --write-policies "" --policies completion --no-alone --drain-probe 0 --warm-up --allow-buffered \
    "${fio_args[@]}" --json "$out/$name.json" > "$out/$name.txt" 2>&1 || die "kvbench failed: $(tail -5 "$out/$name.txt")"
  kvstreamd_stop
  rm -rf "$@"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))
r=[r for r in j["runs"] if r["label"]=="completion"][0]
print("%.2f %.2f" % (r["throughput_bps"]/1e9, j.get("fio_all_bps", 0)/1e9))' "$out/$name.json"
}

echo "device-check: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r)"
for copy in 0 1; do
  echo
  echo "== tmpfs tiers, CPU-copy reads $([ $copy = 1 ] && echo "on copy threads" || echo "on the loop's thread")"
  one=""
  for n in 1 2 4; do
    dirs=()
    for ((t = 0; t < n; t++)); do dirs+=("$shm/c$copy-n$n-t$t"); done
    read -r gbs fio <<< "$(run "tmpfs-c$copy-n$n" "$copy" "${dirs[@]}")"
    [ -n "$one" ] || one=$gbs
    python3 -c 'import sys; g,f,o,n=map(float,sys.argv[1:5]); print("%d tier%s: completion %6.2f GB/s  = %.2fx one tier%s" % (n, "s" if n>1 else " ", g, g/o, ("   fio on all at once %6.2f GB/s, completion = %.2fx fio" % (f, g/f)) if f>0 else ""))' \
      "$gbs" "$fio" "$one" "$n"
  done
done
echo
echo "== one tier on this machine's disk ($disk)"
read -r gbs fio <<< "$(run disk 0 "$disk/t0")"
python3 -c 'import sys; g,f=map(float,sys.argv[1:3]); print("completion %6.2f GB/s%s" % (g, ("   fio %6.2f GB/s, completion = %.2fx fio" % (f, g/f)) if f>0 else ""))' "$gbs" "$fio"
echo
echo "device-check: reports in $out"
