#!/usr/bin/env bash
# deploy/kvstream-alerts.yml: valid rules (`promtool check rules`), and each alert fires on the
# series that should fire it and not on the healthy ones beside it (`promtool test rules
# deploy/kvstream-alerts.test.yml`, Prometheus's own rule unit tests). metrics_test.sh loads the
# same rules into a real Prometheus scraping a real daemon.
# Usage: alerts_test.sh   (exit 77: skipped without promtool)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../tools/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib/common.sh"
command -v promtool > /dev/null || skip "promtool is not installed (deploy/install-deps.sh: prometheus)"
cd "$root/deploy"
promtool check rules kvstream-alerts.yml
promtool test rules kvstream-alerts.test.yml
# Every alert of the rules is exercised by the unit tests.
python3 - <<'PY'
import re
rules = set(re.findall(r"^\s+- alert: (\w+)", open("kvstream-alerts.yml").read(), re.M))
tested = set(re.findall(r"alertname: (\w+)", open("kvstream-alerts.test.yml").read()))
assert rules and rules <= tested, f"alerts without a test: {sorted(rules - tested)}"
print(f"alerts: {len(rules)} rules, each tested")
PY
