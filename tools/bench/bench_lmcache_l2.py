#!/usr/bin/env python3
"""LMCache multi-process L2: LMCache's fs adapter against the kvstream adapter, same keys and batches.

Both adapters are built by LMCache's own --l2-adapter parsing and factory, on one LMCache L1 pool
(POSIX shm, as `lmcache server --shm-name` makes it; --anonymous-l1 for an anonymous pool, which
puts the kvstream adapter on its copy path). N chunks are stored, then loaded in batches (one load
task per batch); the page cache is dropped before each timed fs pass (root), as for HiCacheFile in
bench-sglang.sh. Prints MB/s of each, the ratio, and the Python CPU seconds per GB loaded.

    sudo python tools/bench/bench_lmcache_l2.py --fs-dir /mnt/nvme/fs --daemon-socket /run/kvstream/kvstreamd.sock

Without --daemon-socket a kvstreamd (KVSTREAMD or build/daemon/kvstreamd) is started with one tier
under --kv-dir.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def parse_spec(spec: dict):
    from lmcache.v1.distributed.l2_adapters.config import add_l2_adapters_args, parse_args_to_l2_adapters_config

    parser = argparse.ArgumentParser()
    add_l2_adapters_args(parser)
    return parse_args_to_l2_adapters_config(parser.parse_args(["--l2-adapter", json.dumps(spec)])).adapters[0]


def wait(fd: int, query, timeout: float = 600.0):
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = query()  # first: another task's wait may have drained the eventfd for this one
        if result is not None and result != {}:
            return result
        poller.poll(50)
        try:
            os.eventfd_read(fd)
        except BlockingIOError:
            pass
    raise TimeoutError


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def start_daemon(kv_dir: Path, cap_gb: int) -> tuple[subprocess.Popen, str]:
    binary = os.environ.get("KVSTREAMD", str(REPO / "build" / "daemon" / "kvstreamd"))
    state = Path(tempfile.mkdtemp(prefix="kvs-l2b-", dir="/tmp"))
    sock = str(state / "kvstreamd.sock")
    config = state / "kvstreamd.yaml"
    config.write_text(f'socket: {{path: {sock}, mode: "0600"}}\nsessions: {{max_arena: 1GiB}}\n'
                      f"logging: {{level: warn}}\ntiers:\n  - {{name: t0, path: {kv_dir}, capacity: {cap_gb}GiB}}\n")
    proc = subprocess.Popen([binary, "--config", str(config)], stderr=open(state / "kvstreamd.log", "ab"))
    for _ in range(500):
        if os.path.exists(sock):
            break
        time.sleep(0.02)
    time.sleep(0.2)
    return proc, sock


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--chunk-mib", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8, help="chunks per load task")
    ap.add_argument("--concurrent", type=int, default=1, help="load tasks submitted at once (requests prefetched together)")
    ap.add_argument("--passes", type=int, default=3, help="timed load passes (best is reported)")
    ap.add_argument("--fs-dir", default="/var/tmp/kvs-l2bench/fs")
    ap.add_argument("--kv-dir", default="/var/tmp/kvs-l2bench/kv")
    ap.add_argument("--daemon-socket", default="")
    ap.add_argument("--anonymous-l1", action="store_true")
    args = ap.parse_args()

    import torch
    from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey
    from lmcache.v1.distributed.config import L1MemoryManagerConfig
    from lmcache.v1.distributed.l2_adapters import create_l2_adapter
    from lmcache.v1.distributed.memory_manager.l1_memory_manager import L1MemoryManager

    from kvstream.lmcache.l2_adapter import l2_adapter_spec

    n, batch = args.chunks, args.batch
    chunk_bytes = args.chunk_mib << 20
    layout = MemoryLayoutDesc([torch.Size((chunk_bytes // 2,))], [torch.bfloat16])
    l1_bytes = (n + batch * args.concurrent + 4) * chunk_bytes
    l1 = L1MemoryManager(L1MemoryManagerConfig(size_in_bytes=l1_bytes, use_lazy=False,
                                               shm_name="" if args.anonymous_l1 else f"lmcache_l1_pool_bench{os.getpid()}"))
    err, src = l1.allocate(layout, n)
    assert src, err
    gen = torch.Generator().manual_seed(0)
    for obj in src:
        obj.raw_tensor[: chunk_bytes].copy_(torch.randint(0, 255, (chunk_bytes,), generator=gen, dtype=torch.uint8))
    err, dst = l1.allocate(layout, batch * args.concurrent)
    assert dst, err
    keys = [ObjectKey(chunk_hash=i.to_bytes(16, "big"), model_name="bench/model", kv_rank=0) for i in range(n)]

    daemon = None
    for d in (args.fs_dir, args.kv_dir):
        shutil.rmtree(d, ignore_errors=True)
        Path(d).mkdir(parents=True, exist_ok=True)
    sock = args.daemon_socket
    if not sock:
        daemon, sock = start_daemon(Path(args.kv_dir), max(2, 2 * n * args.chunk_mib >> 10))
    specs = {
        "fs": {"type": "fs", "base_path": args.fs_dir},
        "kvstream": l2_adapter_spec(sock, arena_bytes=min(1 << 30, (batch * args.concurrent + 1) * chunk_bytes)),
    }
    results = {}
    try:
        for name, spec in specs.items():
            adapter = create_l2_adapter(parse_spec(spec), l1.get_l1_memory_desc())
            t0 = time.perf_counter()
            for i in range(0, n, batch):
                adapter.submit_store_task(keys[i:i + batch], src[i:i + batch])
            done: dict = {}
            while len(done) < (n + batch - 1) // batch:
                done.update(wait(adapter.get_store_event_fd(), adapter.pop_completed_store_tasks))
            assert all(r.is_successful() for r in done.values()), done
            os.sync()
            store_s = time.perf_counter() - t0
            best = None
            for _ in range(args.passes):
                dropped = drop_caches()
                cpu0, t0 = time.process_time(), time.perf_counter()
                # The batches of `--concurrent` requests are submitted at once (as LMCache's prefetch
                # controller does for requests that arrive together), then awaited.
                for g in range(0, n, batch * args.concurrent):
                    group = [(i, adapter.submit_load_task(keys[i:i + batch], dst[i - g:i - g + len(keys[i:i + batch])]))
                             for i in range(g, min(n, g + batch * args.concurrent), batch)]
                    for i, tid in group:
                        bitmap = wait(adapter.get_load_event_fd(), lambda tid=tid: adapter.query_load_result(tid))
                        assert bitmap.popcount() == len(keys[i:i + batch]), f"{name}: miss in batch {i // batch}"
                wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
                if best is None or wall < best[0]:
                    best = (wall, cpu)
            # Check the last batch's bytes.
            group = batch * args.concurrent
            last = list(range((n - 1) // group * group, n))  # the last group's chunks, in dst from 0
            for j, i in enumerate(last):
                assert torch.equal(dst[j].raw_tensor[:chunk_bytes], src[i].raw_tensor[:chunk_bytes]), name
            status = adapter.report_status()
            adapter.close()
            gb = n * chunk_bytes / 1e9
            results[name] = (n * chunk_bytes / 1e6 / best[0], best[1] / gb, n * chunk_bytes / 1e6 / store_s)
            extra = f"  zero_copy={status.get('zero_copy')}" if name == "kvstream" else ""
            print(f"{name:9s} load {results[name][0]:8.1f} MB/s   python cpu {results[name][1]:6.3f} s/GB   "
                  f"store {results[name][2]:8.1f} MB/s   page cache dropped={dropped}{extra}", flush=True)
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(20)
        l1.free(src + dst)
        l1.close()
    print(f"{n} chunks x {args.chunk_mib} MiB, batches of {batch}, {args.concurrent} at once: kvstream/fs = "
          f"{results['kvstream'][0] / results['fs'][0]:.2f}x load bandwidth, "
          f"python cpu/GB fs {results['fs'][1]:.3f} s, kvstream {results['kvstream'][1]:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
