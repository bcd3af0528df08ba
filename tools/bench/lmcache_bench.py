#!/usr/bin/env python3
"""lmcache_bench: retrieval through LMCache's StorageManager, LMCache's LocalDiskBackend on one tier
versus the kvstream plugin on kvstreamd's tiers, same keys, same chunk sizes, same steps.

Each step retrieves R requests x C chunks. LMCache retrieves request after request; the modes:
  localdisk        LocalDiskBackend (O_DIRECT, its read thread pool) on --disk-dir (the fast tier)
  kvstream         KVStreamBackend, request after request (one daemon retrieve per request)
  kvstream+step    KVStreamBackend with step batching: one daemon retrieve for all requests of the
                   step (what kvstream.lmcache.vllm_connector does), then the per-request gets
  .../in-place     the same two with LMCache's CPU pool in shared memory (extra_config shm_name):
                   chunks land in LMCache's MemoryObjs by O_DIRECT, no copy in Python (the rows
                   above copy each chunk once from the session arena)
With --kvbench JSON (kvbench on the same daemon and tiers, same step shape) it also prints the
bound ratio (b0 + b1) / b0 from the tiers' alone bandwidths and the plugin's overhead over kvbench.
Run it inside the tiers' blkio cgroup (tools/bench-lmcache.sh does), so LocalDiskBackend's reads
are capped like the daemon's. Needs LMCache (deploy/python-env.sh).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import shutil
import sys
import time
from typing import Dict, List

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.event_manager import EventManager
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.storage_manager import StorageManager

import kvstream
from kvstream.lmcache import KVStreamBackend, extra_config
from kvbench_runs import kvbench_runs

MODEL = "bench/model"


def metadata() -> LMCacheMetadata:
    return LMCacheMetadata(model_name=MODEL, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
                           kv_dtype=torch.bfloat16, kv_shape=(32, 2, 256, 8, 128))


MODES = ("localdisk", "kvstream", "kvstream+step", "kvstream/in-place", "kvstream+step/in-place")


def manager(args: argparse.Namespace, mode: str) -> StorageManager:
    cpu_gib = 2 * args.requests * args.chunks * args.chunk_mib / 1024 + 0.5  # one step's chunks, twice over
    config = LMCacheEngineConfig.from_defaults(chunk_size=256, local_cpu=False, max_local_cpu_size=cpu_gib,
                                               lmcache_instance_id=f"lmcache-bench-{mode}")
    if mode == "localdisk":
        config.local_disk = args.disk_dir
        config.max_local_disk_size = args.steps * args.requests * args.chunks * args.chunk_mib / 1024 + 1
        config.extra_config = {"use_odirect": True}
    else:
        config.storage_plugins = ["kvstream"]
        config.extra_config = extra_config(args.socket,
                                           arena_bytes=(args.requests * args.chunks * args.chunk_mib + 64) << 20)
        if mode.endswith("/in-place"):
            config.extra_config["shm_name"] = f"kvstream_lmcache_bench_{os.getpid()}"
    return StorageManager(config=config, metadata=metadata(), event_manager=EventManager())


def chunk_shape(chunk_mib: int) -> torch.Size:
    # KV_2LTD of a 32-layer model, 256 tokens per chunk: 2 x 32 x 256 x D bf16 = chunk_mib MiB.
    return torch.Size((2, 32, 256, chunk_mib * 1024 * 1024 // (2 * 32 * 256 * 2)))


def step_keys(args: argparse.Namespace) -> List[List[List[CacheEngineKey]]]:
    """keys[step][request] = that request's chunk keys (all distinct)."""
    n = 0
    steps = []
    for _ in range(args.steps):
        requests = []
        for _ in range(args.requests):
            requests.append([CacheEngineKey(MODEL, 1, 0, 0x5EED0000 + (n := n + 1), torch.bfloat16)
                             for _ in range(args.chunks)])
        steps.append(requests)
    return steps


def populate(sm: StorageManager, keys: List[CacheEngineKey], shape: torch.Size, backend_name: str) -> None:
    for start in range(0, len(keys), 8):
        batch = keys[start:start + 8]
        objs = [sm.allocate(shape, torch.bfloat16) for _ in batch]
        for i, obj in enumerate(objs):
            obj.tensor.fill_(float((start + i) % 97))
        sm.batched_put(batch, objs)
        backend = sm.storage_backends[backend_name]
        if isinstance(backend, KVStreamBackend):
            backend.flush()
        deadline = time.monotonic() + 120
        while backend.batched_contains(batch) < len(batch):  # LocalDiskBackend writes asynchronously
            if time.monotonic() > deadline:
                raise RuntimeError(f"{backend_name} did not store the chunks")
            time.sleep(0.01)


def drop_page_cache() -> None:
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        print("lmcache_bench: cannot drop the page cache (not root); O_DIRECT reads bypass it anyway", file=sys.stderr)


def measure(sm: StorageManager, backend_name: str, steps, shape: torch.Size, step_batching: bool) -> List[float]:
    backend = sm.storage_backends[backend_name]
    times = []
    for requests in steps:
        t0 = time.perf_counter()
        if step_batching:
            backend.prefetch([k for r in requests for k in r])
        for keys in requests:  # LMCache: request after request
            hits, mapping = sm.batched_contains(keys)
            objs = sm.batched_get(keys, location=backend_name)
            if hits != len(keys) or any(o is None for o in objs):
                raise RuntimeError(f"{backend_name}: a stored chunk did not come back ({hits}/{len(keys)} hits)")
            for o in objs:
                o.ref_count_down()
        times.append(time.perf_counter() - t0)
        if step_batching:
            backend.release_prefetched()
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", required=True, help="kvstreamd's socket (its tiers: the fast one first)")
    p.add_argument("--disk-dir", required=True, help="LocalDiskBackend's directory, on the fast tier's file system")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--requests", type=int, default=4, help="requests per step")
    p.add_argument("--chunks", type=int, default=8, help="chunks per request")
    p.add_argument("--chunk-mib", type=int, default=8, help="MiB per chunk")
    p.add_argument("--kvbench", help="kvbench JSON of the same steps on the same daemon (bound and overhead)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--profile", help="cProfile each mode's timed reads into PROFILE.<mode> (slows them)")
    args = p.parse_args()

    shape = chunk_shape(args.chunk_mib)
    steps = step_keys(args)
    flat = [k for s in steps for r in s for k in r]
    step_bytes = args.requests * args.chunks * args.chunk_mib << 20
    results: Dict[str, Dict[str, float]] = {}
    shutil.rmtree(args.disk_dir, ignore_errors=True)
    os.makedirs(args.disk_dir)

    with kvstream.Client.connect(args.socket) as control:
        control.evict(all=True)
        control.set_policies(routing="completion", batching="step", writes="deferred")
    for mode in MODES:
        backend_name = "LocalDiskBackend" if mode == "localdisk" else "kvstream"
        sm = manager(args, mode)
        try:
            if mode in ("localdisk", "kvstream"):  # the kvstream modes share the daemon's copies
                populate(sm, flat, shape, backend_name)
            in_place = mode.endswith("/in-place")
            if mode != "localdisk" and sm.storage_backends[backend_name].zero_copy != in_place:
                raise RuntimeError(f"{mode}: the plugin's zero copy is {not in_place}, expected {in_place}")
            drop_page_cache()
            profile = cProfile.Profile() if args.profile else None
            cpu = time.process_time()
            if profile is not None:
                profile.enable()
            times = measure(sm, backend_name, steps, shape, step_batching="+step" in mode)
            if profile is not None:
                profile.disable()
                profile.dump_stats(f"{args.profile}.{mode.replace('/', '-')}")
            cpu = time.process_time() - cpu
        finally:
            sm.close()
        total = sum(times)
        results[mode] = {"seconds": total, "bps": step_bytes * len(times) / total,
                         "step_seconds_median": sorted(times)[len(times) // 2],
                         "python_cpu_s_per_gb": cpu / (step_bytes * len(times) / 1e9)}
        print(f"lmcache_bench: {mode:22s} {total:8.3f} s  {results[mode]['bps'] / 1e6:8.1f} MB/s", file=sys.stderr)
    shutil.rmtree(args.disk_dir, ignore_errors=True)

    base = results["localdisk"]["bps"]
    print(f"\n{args.steps} steps of {args.requests} requests x {args.chunks} chunks x {args.chunk_mib} MiB "
          f"through LMCache's StorageManager (request after request)")
    print(f"{'mode':24s} {'total_s':>8s} {'MB/s':>8s} {'vs localdisk':>13s} {'python cpu s/GB':>16s}")
    for mode, r in results.items():
        print(f"{mode:24s} {r['seconds']:8.3f} {r['bps'] / 1e6:8.1f} {r['bps'] / base:12.2f}x "
              f"{r['python_cpu_s_per_gb']:16.3f}")
    print("(python cpu: user + system time of this process, all its threads, LMCache's disk I/O included)")
    summary: Dict[str, object] = {"args": vars(args), "results": results}
    if args.kvbench:
        runs = kvbench_runs(args.kvbench)
        b0, b1 = runs["only:t0"]["throughput_bps"], runs["only:t1"]["throughput_bps"]
        completion = runs["completion"]["throughput_bps"]
        target = 0.9 * (b0 + b1) / b0
        best = max(r["bps"] for mode, r in results.items() if mode != "localdisk")
        print(f"\ntiers alone (kvbench, same run): t0 {b0 / 1e6:.1f} MB/s, t1 {b1 / 1e6:.1f} MB/s; "
              f"(b0+b1)/b0 = {(b0 + b1) / b0:.2f}, target 0.9x = {target:.2f}")
        for mode in ("kvstream+step", "kvstream+step/in-place"):
            ratio = results[mode]["bps"] / base
            print(f"{mode} / localdisk = {ratio:.2f} ({'meets' if ratio >= target else 'MISSES'} the target), "
                  f"{results[mode]['bps'] / completion:.3f} x kvbench")
        print(f"kvbench completion {completion / 1e6:.1f} MB/s; plugin (best mode) at {best / completion:.3f} x kvbench "
              f"(overhead {100 * (completion / best - 1):+.1f}%)")
        summary.update({"b0_bps": b0, "b1_bps": b1, "target_ratio": target, "kvbench_completion_bps": completion})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
