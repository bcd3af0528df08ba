#!/usr/bin/env bash
# LMCache's own S3 L2 adapter against the kvstream L2 adapter over kvstreamd's s3 tier, side by side
# on one S3 server (moto_server on 127.0.0.1, tools/lib/s3.sh) and one bucket, with the same keys,
# chunks and load batches (tools/bench/bench_s3_lmcache.py, through LMCache's multi-process
# L2AdapterInterface, as tools/bench-lmcache.sh's L2 passes). Each run stores C fresh chunks of
# M MiB on each side (LMCache's S3L2Adapter: awscrt, one GET/PUT per chunk; kvstreamd: one tier,
# type s3, objects <prefix><stem>.kvc read by ranged GETs), loads them back (tasks of B chunks, P
# at once) and prints both sides' load (retrieve) and store GB/s and the ratio kvstream/lmcache of
# load GB/s; with --runs R > 1 also the medians. Then how many GETs moto served per chunk loaded.
# LMCache's adapter addresses a bucket only virtual-hosted (s3_endpoint <bucket>.<host>:<port>), so
# the driver runs in a private mount namespace whose /etc/hosts maps <bucket>.localhost to
# 127.0.0.1 (unshare -m as root, else unshare -rm: user namespaces); the daemon's tier is
# path-style on http://127.0.0.1:PORT. moto serves from one Python process and reads a whole
# object for every ranged GET: its numbers rank the two clients' request paths on a CPU-bound
# server, not what either reads from a real object store.
# Needs a build whose kvstreamd has the s3 tier (its --config-keys lists tiers[].endpoint;
# --lmcache-only runs LMCache's side alone without one), the Python environment (PYTHON, default
# deploy/python-env.sh) and moto_server (KVSTREAM_MOTO_SERVER, else moto_server on PATH, else
# deploy/python-env.sh --s3's). About 1 minute with the defaults (3 x 2 x 512 MiB).
# Usage: tools/bench-s3-lmcache.sh [--chunks C] [--chunk-mib M] [--batch B] [--concurrent P]
#          [--runs R] [--s3-io-threads T] [--lmcache-only] [--out DIR]
# (defaults 64 chunks of 8 MiB, tasks of 8, 4 at once, 3 runs; T: LMCache's s3_num_io_threads,
# its default 64; DIR: kvstreamd's and moto's logs and s3-lmcache-CxM.json, default
# /var/tmp/kvstream-bench-results)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
chunks=64 chunk_mib=8 batch=8 concurrent=4 runs=3 io_threads=64 lmcache_only="" out=/var/tmp/kvstream-bench-results
parse_options '
  --chunks         chunks
  --chunk-mib      chunk_mib
  --batch          batch
  --concurrent     concurrent
  --runs           runs
  --s3-io-threads  io_threads
  --lmcache-only   lmcache_only=1
  --out            out
' "$@"
for n in "$chunks" "$chunk_mib" "$batch" "$concurrent" "$runs" "$io_threads"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || usage_error "'$n' is not a positive count (--help)"
done
bucket=kvstream-bench prefix=kvstream/
kvstreamd=${kvstreamd:-$build/daemon/kvstreamd}
if [ -z "$lmcache_only" ]; then
  need_built "$kvstreamd"
  "$kvstreamd" --config-keys | grep -q '^tiers\[\]\.endpoint' ||
    die "$kvstreamd has no s3 tier (its --config-keys lacks tiers[].endpoint): rebuild, or --lmcache-only"
fi
if [ "$(id -u)" -eq 0 ]; then ns=(unshare --mount); else ns=(unshare --map-root-user --mount); fi
"${ns[@]}" true 2> /dev/null || die "'${ns[*]}' fails here: LMCache's side needs a private /etc/hosts (run as root)"

if [ -z "${KVSTREAM_MOTO_SERVER:-}" ] && ! command -v moto_server > /dev/null; then
  s3_python=$("$root/deploy/python-env.sh" --s3) ||
    die "no moto_server: set KVSTREAM_MOTO_SERVER=<venv>/bin/moto_server (a venv with moto[server])"
  export KVSTREAM_MOTO_SERVER="${s3_python%/*}/moto_server"
fi
# shellcheck source-path=SCRIPTDIR source=lib/s3.sh
source "$root/tools/lib/s3.sh"

python=${PYTHON:-$("$root/deploy/python-env.sh")}
mkdir -p "$out"
work=$(mktemp -d /tmp/kvstream-bench-s3-XXXXXX)
cleanup() {
  local status=$?
  kvstreamd_stop_all || status=1
  s3_server_stop
  [ -f "$work/moto.log" ] && cp "$work/moto.log" "$out/moto-s3-lmcache.log"
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

s3_server_start "$work"
s3_make_bucket "$bucket" > /dev/null
s3_credentials_file "$work/s3.credentials"
printf '127.0.0.1 localhost\n127.0.0.1 %s.localhost\n' "$bucket" > "$work/hosts"
echo "== S3 server: moto_server at $S3_ENDPOINT, bucket $bucket"

driver=("$python" "$root/tools/bench/bench_s3_lmcache.py" --endpoint "$S3_ENDPOINT" --bucket "$bucket"
  --region "$S3_REGION" --credentials-file "$work/s3.credentials" --lmcache-host "$bucket.localhost"
  --s3-io-threads "$io_threads" --chunks "$chunks" --chunk-mib "$chunk_mib" --batch "$batch"
  --concurrent "$concurrent" --runs "$runs" --json "$out/s3-lmcache-${chunks}x${chunk_mib}.json")
if [ -z "$lmcache_only" ]; then
  cat > "$work/kvstreamd.yaml" << EOF
socket: {path: $work/kvstreamd.sock, mode: "0600"}
sessions: {max_arena: 1GiB}
logging: {level: warn}
tiers:
  - {name: s3, type: s3, endpoint: "$S3_ENDPOINT", bucket: $bucket, prefix: $prefix, region: $S3_REGION,
     capacity: 8GiB, credentials_file: $work/s3.credentials}
EOF
  kvstreamd_start "$work/kvstreamd.yaml" "$out/kvstreamd-s3-lmcache.log"
  driver+=(--daemon-socket "$work/kvstreamd.sock")
  echo "== kvstreamd: one s3 tier, $S3_ENDPOINT/$bucket/$prefix"
fi

echo "== LMCache MP L2: its S3 adapter vs the kvstream L2 adapter ($chunks chunks of $chunk_mib MiB," \
  "tasks of $batch, $concurrent loads at once, $runs runs)"
# A private /etc/hosts for LMCache's virtual-hosted bucket address; the rest of the mounts as they are.
# shellcheck disable=SC2016  # $1 and $@ are the inner shell's
PYTHONWARNINGS=ignore::FutureWarning LMCACHE_LOG_LEVEL=${LMCACHE_LOG_LEVEL:-WARNING} "${ns[@]}" \
  sh -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' sh "$work/hosts" "${driver[@]}"

# What the server saw: GETs per chunk loaded (LMCache's objects are <model>@..., the tier's
# /<bucket>/<prefix>...). moto reads the whole object for each one, ranged or not.
loaded=$((runs * chunks))
per_chunk() { awk -v g="$1" -v c="$loaded" 'BEGIN { printf "%.2f", g / c }'; }
theirs=$(grep -c 'GET /bench/model@' "$work/moto.log" || true)
line="moto served: lmcache $theirs GETs ($(per_chunk "$theirs") per chunk)"
if [ -z "$lmcache_only" ]; then
  ours=$(grep -c "GET /$bucket/$prefix" "$work/moto.log" || true)
  line+=", kvstream $ours GETs ($(per_chunk "$ours") per chunk)"
fi
echo "$line"
[ -n "$lmcache_only" ] || [ "$ours" -ge "$loaded" ] ||
  echo "$prog: warning: kvstreamd sent fewer GETs than chunks it loaded: not every load read the bucket" >&2
