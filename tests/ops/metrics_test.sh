#!/usr/bin/env bash
# kvstreamd's /metrics and /health, scraped by a real Prometheus while kvbench runs:
#  - every metric family the dashboard and operators rely on is exposed, and the counters equal
#    what `kvstreamctl stats` / `tiers` report;
#  - every PromQL expression of deploy/grafana/kvstream.json returns data through Prometheus's API;
#  - Prometheus loads deploy/kvstream-alerts.yml: no alert before the fault, KVStreamTierUnusable after;
#  - a tier made unusable (its directory moved away) turns /health and `kvstreamctl health` non-OK
#    within a few seconds while the other tier keeps serving.
# Usage: metrics_test.sh KVSTREAMD KVSTREAMCTL KVBENCH   (exit 77: skipped without prometheus)
set -euo pipefail
daemon=$1 ctl=$2 kvbench=$3
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
command -v prometheus > /dev/null || skip "prometheus is not installed (deploy/install-deps.sh)"
work=$(test_work_dir kvstream-metrics)
pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*"; tail -5 "$work/kvstreamd.log"; exit 1; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mport=$(free_port) pport=$(free_port)
sock="$work/kvstreamd.sock"
cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $sock, mode: "0600"}
sessions: {max_arena: 256MiB}
metrics: {listen: "127.0.0.1:$mport"}
logging: {level: warn}
tiers:
  - {name: t0, path: $work/t0, capacity: 2GiB}
  - {name: t1, path: $work/t1, capacity: 2GiB}
YAML
"$daemon" --config "$work/kvstreamd.yaml" 2> "$work/kvstreamd.log" & pids+=($!)
wait_socket "$sock" || true  # if not, the first request below fails and says so
sed "s/127.0.0.1:9464/127.0.0.1:$mport/; s/_interval: 5s/_interval: 1s/" "$root/deploy/prometheus.yml" > "$work/prometheus.yml"
cp "$root/deploy/kvstream-alerts.yml" "$work/"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$pport" --log.level=warn 2> "$work/prometheus.log" & pids+=($!)
for _ in $(seq 100); do curl -sf "127.0.0.1:$pport/-/ready" > /dev/null && break; sleep 0.2; done
curl -sf "127.0.0.1:$pport/-/ready" > /dev/null || fail "prometheus did not start: $(tail -3 "$work/prometheus.log")"

# Load: every policy path that moves the counters (reads on both tiers, writes, steps).
"$kvbench" --socket "$sock" --ranks 2 --steps 6 --requests 2 --chunks 4 --hit-ratio 0.75 --chunk-size 1MiB \
  --policies completion --write-policies deferred --settle 0 --warm-up > "$work/kvbench.log" 2>&1 || fail "kvbench: $(tail -3 "$work/kvbench.log")"
sleep 4  # a few scrapes after the load

curl -sf "127.0.0.1:$mport/metrics" > "$work/metrics.txt" || fail "no /metrics"
"$ctl" --socket "$sock" --json stats > "$work/stats.json"
"$ctl" --socket "$sock" --json tiers > "$work/tiers.json"
python3 - "$work" <<'PY' || fail "metrics do not match kvstreamctl"
import json, re, sys
work = sys.argv[1]
text = open(f"{work}/metrics.txt").read()
samples = {}
for line in text.splitlines():
    if line and not line.startswith("#"):
        name, value = line.rsplit(" ", 1)
        samples[name] = float(value)
families = {l.split()[2] for l in text.splitlines() if l.startswith("# TYPE")}
required = """kvstream_build_info kvstream_healthy process_resident_memory_bytes process_start_time_seconds process_open_fds kvstream_tier_read_bytes_total kvstream_tier_read_blocks_total
kvstream_tier_written_bytes_total kvstream_tier_replicas_written_total kvstream_tier_io_seconds
kvstream_tier_errors_total kvstream_tier_errors_by_kind_total kvstream_tier_checksum_failures_total
kvstream_tier_dropped_replicas_total kvstream_tier_evictions_total kvstream_tier_capacity_bytes
kvstream_tier_used_bytes kvstream_tier_queue_depth kvstream_tier_info kvstream_tier_direct_io kvstream_tier_stalled kvstream_tier_usable kvstream_steps_total
kvstream_step_seconds kvstream_step_bound_seconds kvstream_step_gap_ratio kvstream_retrieved_chunks_total
kvstream_persists_total kvstream_staged_bytes kvstream_write_stall_seconds_total kvstream_sessions
kvstream_arena_bytes kvstream_staging_kept_bytes""".split()
missing = [f for f in required if f not in families]
assert not missing, f"missing families: {missing}"
stats = json.load(open(f"{work}/stats.json"))
tiers = json.load(open(f"{work}/tiers.json"))
def check(metric, want):
    got = samples.get(metric)
    assert got == want, f"{metric} = {got}, kvstreamctl says {want}"
check("kvstream_steps_total", stats["steps"])
import time
assert time.time() - 600 < samples["process_start_time_seconds"] <= time.time(), samples["process_start_time_seconds"]
assert samples["process_resident_memory_bytes"] > 4 << 20 and samples["process_open_fds"] > 3, samples
check("kvstream_staging_kept_bytes", stats["staging_kept_bytes"])
# kvbench --warm-up: every run (one "kvbench: LABEL SECONDS s" line each) reads its 6 steps twice,
# once untimed, each step one retrieve per rank (2).
runs = len(re.findall(r"^kvbench: \S+ +[0-9.]+ s$", open(f"{work}/kvbench.log").read(), re.M))
assert runs >= 3 and stats["steps"] == runs * 6 * 2 * 2, f"{stats['steps']} steps for {runs} runs"
check('kvstream_retrieved_chunks_total{result="hit"}', stats["retrieve_hits"])
check('kvstream_persists_total{result="ok"}', stats["persists"] - stats["persist_failures"])
for t in tiers:
    tier = t["name"]
    check(f'kvstream_tier_read_bytes_total{{tier="{tier}"}}', t["bytes_read"])
    check(f'kvstream_tier_written_bytes_total{{tier="{tier}"}}', t["bytes_written"])
    check(f'kvstream_tier_used_bytes{{tier="{tier}"}}', t["used_bytes"])
    check(f'kvstream_tier_queue_depth{{tier="{tier}"}}', t["queue_depth"])
assert samples['kvstream_tier_read_bytes_total{tier="t0"}'] > 0 and samples['kvstream_tier_read_bytes_total{tier="t1"}'] > 0
print(f"metrics: {len(families)} families; counters equal to kvstreamctl's")
PY
python3 - "$root/deploy/grafana/kvstream.json" "$pport" <<'PY' || fail "a dashboard query returned no data"
import json, sys, urllib.parse, urllib.request
dashboard, port = sys.argv[1], sys.argv[2]
board = json.load(open(dashboard))
assert [v["name"] for v in board["templating"]["list"]] == ["instance"], "the dashboard's node variable"
# Every query is filtered by the node variable; here it is "All".
exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
assert all('instance=~"$instance"' in e for e in exprs), [e for e in exprs if "$instance" not in e]
exprs = [e.replace("$instance", ".*") for e in exprs]
empty = []
for e in exprs:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": e})
    reply = json.load(urllib.request.urlopen(url))
    if reply["status"] != "success" or not reply["data"]["result"]:
        empty.append(e)
assert not empty, f"no data for: {empty}"
print(f"dashboard: all {len(exprs)} queries return data from Prometheus")
PY

code=$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$mport/health")
[ "$code" = 200 ] || fail "/health is $code before the fault"
alerts() {  # the alerts pending or firing in Prometheus, one "NAME TIER STATE" per line
  curl -sf "127.0.0.1:$pport/api/v1/alerts" | python3 -c '
import json, sys
for a in json.load(sys.stdin)["data"]["alerts"]:
    print(a["labels"]["alertname"], a["labels"].get("tier", "-"), a["state"])'
}
curl -sf "127.0.0.1:$pport/api/v1/rules" | grep -q KVStreamTierUnusable || fail "prometheus did not load deploy/kvstream-alerts.yml"
[ -z "$(alerts)" ] || fail "alerts before the fault: $(alerts)"
"$ctl" --socket "$sock" health > /dev/null || fail "kvstreamctl health not OK before the fault"
head -c 500000 /dev/urandom > "$work/x.bin"
"$ctl" --socket "$sock" put x "$work/x.bin" > /dev/null
mv "$work/t1" "$work/t1.moved"  # t1 no longer at its path
for _ in $(seq 50); do
  code=$(curl -s -o "$work/health.txt" -w '%{http_code}' "127.0.0.1:$mport/health")
  [ "$code" = 503 ] && break
  sleep 0.1
done
[ "$code" = 503 ] || fail "/health stays $code after t1 moved away"
grep -q "tier t1" "$work/health.txt" || fail "/health does not name t1: $(cat "$work/health.txt")"
"$ctl" --socket "$sock" health > "$work/ctl-health.txt" && fail "kvstreamctl health says OK with t1 gone"
grep -q "tier t1" "$work/ctl-health.txt" || fail "kvstreamctl health does not name t1"
"$ctl" --socket "$sock" get x "$work/x.out" > /dev/null && cmp -s "$work/x.bin" "$work/x.out" || fail "t0 no longer serves"
# Into a file first: `curl | grep -q` under pipefail fails when grep exits at the match (SIGPIPE).
curl -s -o "$work/metrics-after.txt" "127.0.0.1:$mport/metrics"
grep -q '^kvstream_tier_usable{tier="t1"} 0' "$work/metrics-after.txt" || fail "kvstream_tier_usable{t1} not 0"
for _ in $(seq 50); do alerts | grep -q "^KVStreamTierUnusable t1 " && break; sleep 0.2; done
alerts | grep -q "^KVStreamTierUnusable t1 " || fail "no KVStreamTierUnusable alert for t1: $(alerts)"
echo "alerts: KVStreamTierUnusable for t1 $(alerts | awk '$1 == "KVStreamTierUnusable" {print $3}') in Prometheus"
echo "health: t1 unusable reported by /health (503) and kvstreamctl health; t0 serves"
