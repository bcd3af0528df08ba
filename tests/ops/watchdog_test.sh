#!/usr/bin/env bash
# kvstreamd under systemd's notify protocol: READY=1 once serving, then WATCHDOG=1 every half
# WatchdogSec while its I/O loop goes round (a stand-in for systemd listens on NOTIFY_SOCKET).
# Usage: watchdog_test.sh KVSTREAMD
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
daemon=$1
work=$(test_work_dir kvstream-watchdog)
trap 'rm -rf "$work"' EXIT
cat > "$work/kvstreamd.yaml" <<YAML
socket: {path: $work/kvstreamd.sock, mode: "0600"}
logging: {level: warn}
tiers:
  - {name: t0, path: $work/t0, capacity: 1GiB}
YAML
python3 - "$work" "$daemon" <<'PY'
import os, socket, subprocess, sys, time
work, daemon = sys.argv[1], sys.argv[2]
path = f"{work}/notify.sock"
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(5)
env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
p = subprocess.Popen([daemon, "--config", f"{work}/kvstreamd.yaml"], env=env, stderr=subprocess.DEVNULL)
try:
    got, start = [], time.monotonic()
    while time.monotonic() - start < 3:
        got += s.recv(4096).decode().split("\n")
    assert "READY=1" in got, got
    pings = got.count("WATCHDOG=1")
    assert pings >= 5, f"{pings} watchdog pings in 3 s at WatchdogSec=0.4s: {got}"
    print(f"watchdog: READY=1, then {pings} WATCHDOG=1 pings in 3 s (every 0.2 s)")
finally:
    p.terminate()
    p.wait()
PY
