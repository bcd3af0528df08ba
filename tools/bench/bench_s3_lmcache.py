#!/usr/bin/env python3
"""LMCache multi-process L2 on one S3 server: LMCache's own S3 adapter against the kvstream adapter.

Both adapters are built by LMCache's own --l2-adapter parsing and factory (as `lmcache server`
builds them) on one shared-memory L1 pool, and driven through the same L2AdapterInterface calls as
in bench_lmcache_l2.py: N chunks stored (tasks of --batch chunks, all submitted at once), then
loaded in tasks of --batch chunks, --concurrent tasks submitted at once. Both run on the same
S3 server (--endpoint) and bucket, with the same ObjectKeys:

- lmcache: LMCache's S3L2Adapter (type "s3", lmcache/v1/distributed/l2_adapters/s3_l2_adapter.py:
  awscrt's S3 client, one GET_OBJECT / PUT_OBJECT per chunk, objects
  "<model>@<kv_rank>@<group>@<hash>" at the bucket's root). It addresses the bucket virtual-hosted
  only (s3_endpoint "<bucket>.<host>:<port>", no path-style), so --lmcache-host (default
  <bucket>.localhost) must resolve to the server: tools/bench-s3-lmcache.sh runs this under a
  private /etc/hosts that maps it to 127.0.0.1.
- kvstream: the kvstream L2 adapter (kvstream.lmcache.l2_adapter) over the kvstreamd at
  --daemon-socket, whose one tier is an s3 tier on the same endpoint and bucket (objects
  "<prefix><stem>.kvc", ranged GETs). Without --daemon-socket only LMCache's side runs.

Each run stores fresh keys on both sides (their order alternates run to run), times one load pass
of each, checks the last group's bytes, then deletes its objects (untimed). Prints per run the
load and store GB/s (1e9 bytes/s) of each and the ratio kvstream/lmcache of load GB/s, and with
--runs > 1 the medians.

    python tools/bench/bench_s3_lmcache.py --endpoint http://127.0.0.1:9000 --bucket bench \\
        --credentials-file /tmp/s3.credentials --daemon-socket /tmp/kvs/kvstreamd.sock --runs 3
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = "bench/model"


def read_credentials(path: str, profile: str = "default") -> tuple[str, str]:
    """aws_access_key_id and aws_secret_access_key of PROFILE in an AWS shared-credentials file."""
    parser = configparser.ConfigParser()
    if not parser.read(path):
        raise SystemExit(f"bench_s3_lmcache: cannot read {path}")
    section = parser[profile]
    return section["aws_access_key_id"], section["aws_secret_access_key"]


def lmcache_s3_spec(args: argparse.Namespace, key_id: str, secret: str) -> dict:
    """The --l2-adapter object of LMCache's S3 adapter on the endpoint's bucket, virtual-hosted."""
    url = urlsplit(args.endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    host = args.lmcache_host or f"{args.bucket}.localhost"
    return {"type": "s3", "s3_endpoint": f"{host}:{port}", "s3_region": args.region,
            "s3_num_io_threads": args.s3_io_threads, "disable_tls": url.scheme == "http",
            "aws_access_key_id": key_id, "aws_secret_access_key": secret}


class Side:
    """One adapter and its results, run after run."""

    def __init__(self, name: str, adapter) -> None:
        self.name, self.adapter = name, adapter
        self.load_gbs: list[float] = []
        self.store_gbs: list[float] = []


def run_side(side: Side, keys, src, dst, args, chunk_bytes: int) -> None:
    from bench_lmcache_l2 import wait

    adapter, n, batch = side.adapter, len(keys), args.batch
    t0 = time.perf_counter()
    for i in range(0, n, batch):
        adapter.submit_store_task(keys[i:i + batch], src[i:i + batch])
    done: dict = {}
    while len(done) < (n + batch - 1) // batch:
        done.update(wait(adapter.get_store_event_fd(), adapter.pop_completed_store_tasks))
    store_s = time.perf_counter() - t0
    failed = [t for t, r in done.items() if not r.is_successful()]
    assert not failed, f"{side.name}: store tasks {failed} failed"

    t0 = time.perf_counter()
    group = batch * args.concurrent
    for g in range(0, n, group):
        tasks = [(i, adapter.submit_load_task(keys[i:i + batch], dst[i - g:i - g + len(keys[i:i + batch])]))
                 for i in range(g, min(n, g + group), batch)]
        for i, tid in tasks:
            bitmap = wait(adapter.get_load_event_fd(), lambda tid=tid: adapter.query_load_result(tid))
            assert bitmap.popcount() == len(keys[i:i + batch]), f"{side.name}: miss in batch {i // batch}"
    load_s = time.perf_counter() - t0

    import torch

    for j, i in enumerate(range((n - 1) // group * group, n)):  # the last group's chunks, in dst from 0
        assert torch.equal(dst[j].raw_tensor[:chunk_bytes], src[i].raw_tensor[:chunk_bytes]), \
            f"{side.name}: chunk {i} read back wrong"
        dst[j].raw_tensor[:chunk_bytes].zero_()
    adapter.delete(keys)
    side.load_gbs.append(n * chunk_bytes / 1e9 / load_s)
    side.store_gbs.append(n * chunk_bytes / 1e9 / store_s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", required=True, help="http://HOST:PORT of the S3 server")
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--credentials-file", required=True, help="AWS shared-credentials file ([default])")
    ap.add_argument("--lmcache-host", default="", help="the bucket's virtual host (default <bucket>.localhost)")
    ap.add_argument("--s3-io-threads", type=int, default=64, help="LMCache's s3_num_io_threads (its default: 64)")
    ap.add_argument("--daemon-socket", default="", help="kvstreamd with one s3 tier (none: LMCache only)")
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--chunk-mib", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8, help="chunks per store and load task")
    ap.add_argument("--concurrent", type=int, default=4, help="load tasks submitted at once")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default="", help="write the runs' numbers here")
    args = ap.parse_args()

    sys.path.insert(0, HERE)
    import torch
    from bench_lmcache_l2 import parse_spec
    from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey
    from lmcache.v1.distributed.config import L1MemoryManagerConfig
    from lmcache.v1.distributed.l2_adapters import create_l2_adapter
    from lmcache.v1.distributed.memory_manager.l1_memory_manager import L1MemoryManager

    n, batch = args.chunks, args.batch
    chunk_bytes = args.chunk_mib << 20
    key_id, secret = read_credentials(args.credentials_file)
    layout = MemoryLayoutDesc([torch.Size((chunk_bytes // 2,))], [torch.bfloat16])
    l1 = L1MemoryManager(L1MemoryManagerConfig(size_in_bytes=(n + batch * args.concurrent + 4) * chunk_bytes,
                                               use_lazy=False, shm_name=f"lmcache_l1_pool_s3bench{os.getpid()}"))
    err, src = l1.allocate(layout, n)
    assert src, err
    err, dst = l1.allocate(layout, batch * args.concurrent)
    assert dst, err
    gen = torch.Generator().manual_seed(0)
    for obj in src:
        obj.raw_tensor[:chunk_bytes].copy_(torch.randint(0, 255, (chunk_bytes,), generator=gen, dtype=torch.uint8))

    sides: list[Side] = []
    try:
        specs = {"lmcache": lmcache_s3_spec(args, key_id, secret)}
        if args.daemon_socket:
            from kvstream.lmcache.l2_adapter import l2_adapter_spec

            specs["kvstream"] = l2_adapter_spec(
                args.daemon_socket, arena_bytes=min(1 << 30, (batch * args.concurrent + 1) * chunk_bytes))
        for name, spec in specs.items():
            sides.append(Side(name, create_l2_adapter(parse_spec(spec), l1.get_l1_memory_desc())))
        shown = {k: ("***" if "secret" in k else v) for k, v in specs["lmcache"].items()}
        print(f"lmcache s3 adapter: {json.dumps(shown)}", flush=True)
        print(f"{n} chunks x {args.chunk_mib} MiB, tasks of {batch} chunks, loads {args.concurrent} tasks at once, "
              f"{args.endpoint} bucket {args.bucket}", flush=True)
        for run in range(args.runs):
            # Fresh keys each run (a kvstream store skips keys the daemon holds), the same on both sides.
            keys = [ObjectKey(chunk_hash=((run + 1) << 64 | i).to_bytes(16, "big"), model_name=MODEL, kv_rank=0)
                    for i in range(n)]
            for side in sides if run % 2 == 0 else sides[::-1]:
                run_side(side, keys, src, dst, args, chunk_bytes)
            line = "  ".join(f"{s.name} load {s.load_gbs[-1]:6.3f} GB/s store {s.store_gbs[-1]:6.3f} GB/s"
                             for s in sides)
            if len(sides) == 2:
                line += f"  kvstream/lmcache {sides[1].load_gbs[-1] / sides[0].load_gbs[-1]:5.2f}x"
            print(f"run {run + 1}: {line}", flush=True)
        for side in sides:
            status = side.adapter.report_status()
            if side.name == "kvstream":
                print(f"kvstream adapter: zero_copy={status.get('zero_copy')}", flush=True)
    finally:
        for side in sides:
            side.adapter.close()
        l1.free(src + dst)
        l1.close()

    med = {s.name: (statistics.median(s.load_gbs), statistics.median(s.store_gbs)) for s in sides}
    if args.runs > 1:
        line = "  ".join(f"{name} load {m[0]:6.3f} GB/s store {m[1]:6.3f} GB/s" for name, m in med.items())
        if len(sides) == 2:
            ratios = [k / t for k, t in zip(sides[1].load_gbs, sides[0].load_gbs)]
            line += f"  kvstream/lmcache {med['kvstream'][0] / med['lmcache'][0]:5.2f}x (median of ratios " \
                    f"{statistics.median(ratios):.2f}x)"
        print(f"median of {args.runs}: {line}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "chunks": n, "chunk_mib": args.chunk_mib, "batch": batch, "concurrent": args.concurrent,
            "endpoint": args.endpoint, "s3_io_threads": args.s3_io_threads,
            "runs": {s.name: {"load_gbs": s.load_gbs, "store_gbs": s.store_gbs} for s in sides},
            "median": {name: {"load_gbs": m[0], "store_gbs": m[1]} for name, m in med.items()}}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
