#!/usr/bin/env python3
"""bench_py_overhead: the per-step cost of the pure-Python client against the C++ client, side by side.

Starts kvstreamd on two tier directories on fast storage (default /dev/shm, so that I/O does not
hide the control plane), stores C chunks, and times the same retrieve step (C chunks into the
session arena) through:
  C++ client       kvoverhead (tools/bench/kvoverhead.cc: the core alone and through kvstreamd)
  Python client    kvstream.Client.retrieve
  Python + copy    the same, copying each chunk out of the arena as it lands (what the LMCache
                   plugin does into its MemoryObjs)
  LMCache plugin   KVStreamBackend.batched_get_blocking (if LMCache is installed)
Prints the median per step and per chunk. Usage (from the repository root, after a build):
  python tools/bench/bench_py_overhead.py [--build build] [--dir /dev/shm/kvs-overhead] [--steps 200]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import kvstream


def median_us(times: list) -> float:
    return statistics.median(times) * 1e6


def start_daemon(kvstreamd: Path, work: Path) -> subprocess.Popen:
    sock = work / "kvstreamd.sock"
    (work / "kvstreamd.yaml").write_text(
        f'socket: {{path: {sock}, mode: "0600"}}\nblock_size: 256KiB\nlogging: {{level: warn}}\ntiers:\n'
        f"  - {{name: t0, path: {work}/t0, capacity: 1GiB}}\n  - {{name: t1, path: {work}/t1, capacity: 1GiB}}\n")
    proc = subprocess.Popen([str(kvstreamd), "--config", str(work / "kvstreamd.yaml")])
    for _ in range(500):
        if sock.exists():
            try:
                kvstream.Client.connect(str(sock), timeout=0.2).close()
                return proc
            except kvstream.Unavailable:
                pass
        time.sleep(0.01)
    proc.kill()
    raise RuntimeError("kvstreamd did not start")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build", help="the CMake build directory")
    p.add_argument("--dir", default="/dev/shm/kvs-overhead", help="work directory on fast storage")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--chunks", type=int, default=16)
    p.add_argument("--chunk-kib", type=int, default=256)
    args = p.parse_args()
    build, work = Path(args.build), Path(args.dir)
    size = args.chunk_kib << 10

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    kvo = subprocess.run([str(build / "tools" / "kvoverhead"), "--kvstreamd", str(build / "daemon" / "kvstreamd"),
                          "--dir", str(work / "cc"), "--steps", str(args.steps), "--chunks", str(args.chunks),
                          "--chunk-size", f"{args.chunk_kib}KiB"], capture_output=True, text=True, check=True)
    core_us = float(re.search(r"core alone\s+([\d.]+)", kvo.stdout).group(1))
    cc_us = float(re.search(r"via kvstreamd\s+([\d.]+)", kvo.stdout).group(1))

    daemon = start_daemon(build / "daemon" / "kvstreamd", work)
    rows = []
    try:
        sock = str(work / "kvstreamd.sock")
        with kvstream.Client.attach(sock, model="ovh", arena_bytes=size * args.chunks * 2) as c:
            c.arena[0:size] = b"\x5a" * size
            c.persist([(f"o/{i}", 0, size) for i in range(args.chunks)])
            chunks = [(f"o/{i}", i * size, size) for i in range(args.chunks)]
            copy_to = bytearray(size)
            for label, on_chunk in (
                ("Python client", None),
                ("Python + copy", lambda r: copy_to.__setitem__(slice(0, r.size),
                                                                c.arena[chunks[r.index][1]:chunks[r.index][1] + r.size])),
            ):
                times = []
                for _ in range(args.steps):
                    t0 = time.perf_counter()
                    results, _ = c.retrieve(chunks, on_chunk=on_chunk)
                    times.append(time.perf_counter() - t0)
                    assert all(r.ok for r in results)
                rows.append((label, median_us(times)))
        rows.append(("LMCache plugin", plugin_step_us(sock, args)))
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait()
        shutil.rmtree(work, ignore_errors=True)

    print(f"{args.steps} steps of {args.chunks} x {args.chunk_kib} KiB on {args.dir}, median per step:")
    print(f"  {'core alone (no daemon)':24s} {core_us:9.1f} us")
    print(f"  {'C++ client':24s} {cc_us:9.1f} us")
    for label, us in rows:
        if us is None:
            print(f"  {label:24s}   (LMCache not installed)")
            continue
        print(f"  {label:24s} {us:9.1f} us   {us - cc_us:+8.1f} us per step over C++, "
              f"{(us - cc_us) / args.chunks:+6.1f} us per chunk")
    return 0


def plugin_step_us(sock: str, args: argparse.Namespace):
    """Median step of KVStreamBackend.batched_get_blocking (retrieve + copy into MemoryObjs)."""
    try:
        import torch
        from lmcache.utils import CacheEngineKey
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.event_manager import EventManager
        from lmcache.v1.metadata import LMCacheMetadata
        from lmcache.v1.storage_backend.storage_manager import StorageManager

        from kvstream.lmcache import extra_config
    except ImportError:
        return None
    config = LMCacheEngineConfig.from_defaults(chunk_size=256, local_cpu=False, max_local_cpu_size=0.5,
                                               lmcache_instance_id="bench-overhead")
    config.storage_plugins = ["kvstream"]
    config.extra_config = extra_config(sock, arena_bytes=64 << 20)
    meta = LMCacheMetadata(model_name="ovh", world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
                           kv_dtype=torch.bfloat16, kv_shape=(4, 2, 256, 8, 128))
    sm = StorageManager(config=config, metadata=meta, event_manager=EventManager())
    try:
        backend = sm.storage_backends["kvstream"]
        shape = torch.Size((2, 4, 256, args.chunk_kib * 1024 // (2 * 4 * 256 * 2)))
        keys = [CacheEngineKey("ovh", 1, 0, i + 1, torch.bfloat16) for i in range(args.chunks)]
        objs = [sm.allocate(shape, torch.bfloat16) for _ in keys]
        backend.batched_submit_put_task(keys, objs)
        backend.flush()
        for o in objs:
            o.ref_count_down()
        backend.batched_contains(keys)  # sizes known, as after LMCache's lookup
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            got = backend.batched_get_blocking(keys)
            times.append(time.perf_counter() - t0)
            assert all(g is not None for g in got)
            for g in got:
                g.ref_count_down()
        return median_us(times)
    finally:
        sm.close()


if __name__ == "__main__":
    sys.exit(main())
