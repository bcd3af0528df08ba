"""The runs of a kvbench JSON file (kvbench --json), by label: what the Python benchmark drivers
compare against (the tiers alone, `only:t0` / `only:t1`, and the `completion` run)."""

from __future__ import annotations

import json
from typing import Any, Dict


def kvbench_runs(path: str) -> Dict[str, Dict[str, Any]]:
    """{label: run} of kvbench's JSON at `path`; each run has `throughput_bps`."""
    with open(path) as f:
        return {r["label"]: r for r in json.load(f)["runs"]}
