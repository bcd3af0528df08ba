#!/usr/bin/env python3
"""bench_vllm: vLLM's own multi-tier offloading (TieringOffloadingManager, vLLM 0.33) driven as its
scheduler drives it, on CPU, with one secondary tier at a time and the same requests for each:

  fs:t0     vLLM's `fs` tier (16 read + 16 write threads, O_DIRECT) on the fast tier
  fs:t1     the same on the slow tier
  kvstream  kvstream.vllm_tier.KVStreamTier: kvstreamd over both tiers (vLLM's CPU tier handed
            to the daemon; one retrieve per scheduler step)

Every backend first stores S steps x R requests x C chunks (the chunks written to vLLM's CPU
tier as its GPU workers would, then cascaded to the secondary tier), then the CPU tier is emptied
and each step's R requests look their chunks up together, step after step of the scheduler loop
(lookup, on_schedule_end, poll) until every chunk is promoted (a HIT): the time from the step's
first lookup to its last HIT is the step's read time. Reported per backend (median of --passes
passes, backends alternated): MB/s, the process's CPU seconds per GB read (the fs tier's threads
are this process's; kvstreamd's own CPU is printed beside), and for kvstream the bytes copied in
Python (0 when vLLM's CPU tier is handed over). With --kvbench JSON (kvbench on the same daemon,
tiers and step shape) it prints the tier's ratio to kvbench's completion run.
Run it inside the tiers' blkio cgroup (tools/bench-vllm.sh does). Needs vLLM (deploy/python-env.sh).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from typing import Any, Dict, List

import numpy as np
from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext, make_offload_key
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

import kvstream
from kvbench_runs import kvbench_runs

_engines = itertools.count()


def make_manager(row: int, rows: int, tier: Dict[str, Any], tokens_per_chunk: int = 16) -> Any:
    """vLLM's TieringOffloadingManager (scheduler side) with a CPU tier of `rows` chunks of `row`
    bytes (one block of `tokens_per_chunk` tokens each) and `tier` as its one secondary tier."""
    config = OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=tokens_per_chunk, layer_names=("l0",), group_id=0),),
        worker_kv_bytes_per_block=row,
        enable_kv_cache_events=False,
        extra_config={"cpu_bytes_to_use": rows * row, "secondary_tiers": [tier]},
        engine_id=f"bench{os.getpid()}x{next(_engines)}",
        model=OffloadingModelConfig(name="bench/model", dtype="bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=tokens_per_chunk, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
                                          data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
                                          is_parallelism_agnostic=False))
    return TieringOffloadingSpec(config).get_manager()


def step_keys(args: argparse.Namespace) -> List[List[List[bytes]]]:
    """keys[step][request][chunk]: distinct 32-byte hashes, the same for every backend."""
    return [[[make_offload_key(hashlib.sha256(f"{s}/{r}/{c}".encode()).digest(), 0) for c in range(args.chunks)]
             for r in range(args.requests)] for s in range(args.steps)]


def end_step(manager: Any) -> None:
    with manager.lock:
        manager.on_schedule_end(ScheduleEndContext((), ()))


def settle(manager: Any) -> None:
    while True:
        end_step(manager)
        with manager.lock:
            if not manager.has_pending_work():
                return
        time.sleep(0.001)


def store_all(manager: Any, rows: np.ndarray, steps: List[List[List[bytes]]]) -> None:
    """Each request's chunks written to the CPU tier (a stamp per chunk) and cascaded."""
    for s, step in enumerate(steps):
        for r, keys in enumerate(step):
            ctx = ReqContext(req_id=f"store-{s}-{r}")
            with manager.lock:
                manager.on_new_request(ctx)
                out = manager.prepare_store(keys, ctx)
                for key, c in zip(keys, out.store_spec.chunk_ids):
                    rows[c, :64] = np.frombuffer(hashlib.sha512(key).digest(), dtype=np.uint8)
                manager.complete_store(keys, ctx)
                manager.on_request_finished(ctx)
            settle(manager)


def forget_primary(manager: Any) -> None:
    with manager.lock:
        manager.reset_cache()
        manager.on_reset_flushed()


def read_step(manager: Any, rows: np.ndarray, step: List[List[bytes]], tag: str) -> float:
    """The step's requests look up their chunks each scheduler iteration until all are HIT; loads
    them; returns the seconds from the first lookup to the last HIT. Checks each chunk's stamp."""
    ctxs = [ReqContext(req_id=f"{tag}-{r}") for r in range(len(step))]
    with manager.lock:
        for ctx in ctxs:
            manager.on_new_request(ctx)
    start = time.perf_counter()
    while True:
        with manager.lock:
            results = [[manager.lookup(k, ctx) for k in keys] for keys, ctx in zip(step, ctxs)]
        if all(r is LookupResult.HIT for rs in results for r in rs):
            break
        if any(r is LookupResult.MISS for rs in results for r in rs):
            raise RuntimeError(f"{tag}: a stored chunk is a miss")
        end_step(manager)
        time.sleep(0.0005)
    took = time.perf_counter() - start
    with manager.lock:
        for keys, ctx in zip(step, ctxs):
            spec = manager.prepare_load(keys, ctx)
            for key, c in zip(keys, spec.chunk_ids):
                if bytes(rows[c, :64]) != hashlib.sha512(key).digest():
                    raise RuntimeError(f"{tag}: chunk {key.hex()} came back with other bytes")
            manager.complete_load(keys, ctx)
            manager.on_request_finished(ctx)
    end_step(manager)
    return took


def wait_written(socket: str, tier: Any, keys: List[bytes]) -> None:
    names = [f"{tier.status()['namespace']}/{k.hex()}" for k in keys]
    with kvstream.Client.connect(socket) as c:
        while not all(e.tier_mask for e in c.lookup(names)[0]):
            time.sleep(0.05)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", required=True, help="kvstreamd's socket (its tiers are t0 and t1)")
    p.add_argument("--t0-dir", required=True, help="a directory on the fast tier for vLLM's fs tier")
    p.add_argument("--t1-dir", required=True, help="a directory on the slow tier for vLLM's fs tier")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--chunks", type=int, default=8, help="chunks per request")
    p.add_argument("--chunk-mib", type=int, default=8)
    p.add_argument("--passes", type=int, default=3, help="read passes per backend (backends alternated)")
    p.add_argument("--kvbench", help="kvbench JSON of the same step shape on the same daemon")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()

    steps = step_keys(args)
    flat = [k for s in steps for r in s for k in r]
    step_bytes = args.requests * args.chunks * args.chunk_mib << 20
    backends = {
        "fs:t0": {"type": "fs", "root_dir": args.t0_dir},
        "fs:t1": {"type": "fs", "root_dir": args.t1_dir},
        "kvstream": {"type": "KVStreamTier", "module_path": "kvstream.vllm_tier", "socket_path": args.socket},
    }
    for d in (args.t0_dir, args.t1_dir):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    managers: Dict[str, Any] = {}
    views: Dict[str, np.ndarray] = {}  # each manager's CPU tier, as the workers would write it
    for name, tier in backends.items():
        manager = make_manager(args.chunk_mib << 20, 2 * args.requests * args.chunks, tier)
        rows = np.frombuffer(manager.primary_tier.get_kv_memoryview(), dtype=np.uint8).reshape(
            -1, args.chunk_mib << 20)
        start = time.perf_counter()
        store_all(manager, rows, steps)
        if name == "kvstream":
            wait_written(args.socket, manager.secondary_tiers[0], flat)
        print(f"{name:9s} stored {len(flat)} chunks in {time.perf_counter() - start:.1f} s", flush=True)
        managers[name], views[name] = manager, rows

    times: Dict[str, List[float]] = {n: [] for n in backends}
    cpu: Dict[str, List[float]] = {n: [] for n in backends}
    daemon_cpu: List[float] = []
    with kvstream.Client.connect(args.socket) as control:
        for n in range(args.passes):
            order = list(backends) if n % 2 == 0 else list(reversed(backends))
            for name in order:
                manager, rows = managers[name], views[name]
                forget_primary(manager)
                rows[:] = 0
                before = control.stats().process_cpu_seconds
                cpu0, took = time.process_time(), 0.0
                for s, step in enumerate(steps):
                    took += read_step(manager, rows, step, f"{name}-{n}-{s}")
                cpu[name].append(time.process_time() - cpu0)
                times[name].append(took)
                if name == "kvstream":
                    daemon_cpu.append(control.stats().process_cpu_seconds - before)

    gb = args.steps * step_bytes / 1e9
    results: Dict[str, Dict[str, float]] = {}
    print(f"\n{args.steps} steps x {args.requests} requests x {args.chunks} chunks x {args.chunk_mib} MiB, "
          f"medians of {args.passes} passes")
    for name in backends:
        seconds = statistics.median(times[name])
        results[name] = {"mbps": gb * 1e3 / seconds, "cpu_s_per_gb": statistics.median(cpu[name]) / gb,
                         "runs_mbps": [gb * 1e3 / t for t in times[name]]}
        print(f"{name:9s} {results[name]['mbps']:8.1f} MB/s  Python CPU {results[name]['cpu_s_per_gb']:.3f} s/GB  "
              f"(runs {', '.join(f'{x:.0f}' for x in results[name]['runs_mbps'])})")
    tier = managers["kvstream"].secondary_tiers[0]
    status = tier.status()
    results["kvstream"]["daemon_cpu_s_per_gb"] = statistics.median(daemon_cpu) / gb
    results["kvstream"]["copied_bytes"] = status["copied_bytes"]
    best_fs = max(("fs:t0", "fs:t1"), key=lambda n: results[n]["mbps"])
    ratio = results["kvstream"]["mbps"] / results[best_fs]["mbps"]
    print(f"kvstream / {best_fs} (the better fs) = {ratio:.2f}; kvstreamd CPU "
          f"{results['kvstream']['daemon_cpu_s_per_gb']:.3f} s/GB; bytes copied in Python {status['copied_bytes']} "
          f"(zero copy {'on' if status['zero_copy'] else 'OFF'}), retrieves {status['retrieves']}")
    summary: Dict[str, Any] = {"results": results, "ratio_to_best_fs": ratio, "best_fs": best_fs}
    if args.kvbench:
        completion = kvbench_runs(args.kvbench)["completion"]["throughput_bps"] / 1e6
        print(f"kvbench completion {completion:.1f} MB/s on the same tiers; the vLLM tier at "
              f"{results['kvstream']['mbps'] / completion:.3f} x kvbench")
        summary["kvbench_completion_mbps"] = completion
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    del rows, tier
    views.clear()  # no view of a CPU tier may outlive it: vLLM would keep it mapped
    gc.collect()
    for manager in managers.values():
        manager.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
