"""Builds vLLM's own tiering manager (vLLM 0.33 on CPU: a real SharedOffloadRegion in /dev/shm)
with kvstream.vllm_tier.KVStreamTier as its only secondary tier, built by vLLM's factory from
`type` + `module_path`, and drives it as vLLM's scheduler does. Import it after
pytest.importorskip("vllm.v1.kv_offload.tiering.spec")."""

from __future__ import annotations

import itertools
import os
import time
from typing import Any, Iterable, List

import numpy as np
from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext, make_offload_key
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.tiering.base import TransferJob
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

import kvstream
from kvstream.vllm_tier import KVStreamTier

ROW = 256 << 10  # one chunk: 256 KiB per block, one worker, one block per chunk
ROWS = 16
_engines = itertools.count()
_jobs = itertools.count(1000)


class Engine:
    """vLLM's tiering manager with KVStreamTier as its only secondary tier, as the scheduler runs it."""

    def __init__(self, socket: str, **tier: Any) -> None:
        engine_id = f"kvstest{os.getpid()}x{next(_engines)}"
        config = OffloadingConfig(
            groups=(OffloadingGroupConfig(tokens_per_block=16, layer_names=("l0",), group_id=0),),
            worker_kv_bytes_per_block=ROW,
            enable_kv_cache_events=False,
            extra_config={"cpu_bytes_to_use": ROWS * ROW, "secondary_tiers": [
                {"type": "KVStreamTier", "module_path": "kvstream.vllm_tier", "socket_path": socket, **tier}]},
            engine_id=engine_id,
            model=OffloadingModelConfig(name="test/model", dtype="float16"),
            cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
            parallel=OffloadingParallelConfig(rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
                                              data_parallel_index=0, data_parallel_size=1,
                                              data_parallel_rank_local=None, is_parallelism_agnostic=False))
        self.shm = f"/dev/shm/vllm_offload_{engine_id}.mmap"
        self.manager = TieringOffloadingSpec(config).get_manager()
        self.tier: KVStreamTier = self.manager.secondary_tiers[0]
        self.rows = np.frombuffer(self.manager.primary_tier.get_kv_memoryview(), dtype=np.uint8).reshape(ROWS, ROW)

    def step(self, new: Iterable[str] = ()) -> None:
        with self.manager.lock:
            self.manager.on_schedule_end(ScheduleEndContext(tuple(new), ()))

    def store(self, req: str, keys: List[bytes], payloads: List[bytes]) -> None:
        """A request's chunks written to the primary tier (as the GPU workers would) and cascaded."""
        ctx = ReqContext(req_id=req)
        with self.manager.lock:
            self.manager.on_new_request(ctx)
            out = self.manager.prepare_store(keys, ctx)
            for c, payload in zip(out.store_spec.chunk_ids, payloads):
                self.rows[c, :] = np.frombuffer(payload, dtype=np.uint8)
            self.manager.complete_store(keys, ctx)
            self.manager.on_request_finished(ctx)
        self.settle()

    def settle(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.step()
            with self.manager.lock:
                if not self.manager.has_pending_work():
                    return
            assert time.monotonic() < deadline, "the tier's jobs did not finish"
            time.sleep(0.005)

    def forget_primary(self) -> None:
        """Empties the CPU tier, so that every lookup goes to kvstreamd."""
        with self.manager.lock:
            self.manager.reset_cache()
            self.manager.on_reset_flushed()
        self.rows[:] = 0

    def load(self, req: str, keys: List[bytes], steps: int = 400) -> tuple:
        """Looks the keys up step by step until each is HIT or MISS; loads the hits. Returns the
        lookup trace and {key: bytes in its primary row} for the keys that were loaded."""
        ctx = ReqContext(req_id=req)
        with self.manager.lock:
            self.manager.on_new_request(ctx)
        trace = []
        for i in range(steps):
            with self.manager.lock:
                results = [self.manager.lookup(k, ctx) for k in keys]
            trace.append([r.name for r in results])
            if all(r in (LookupResult.HIT, LookupResult.MISS) for r in results):
                break
            self.step([req] if i == 0 else [])
            time.sleep(0.005)
        hits = [k for k, r in zip(keys, results) if r is LookupResult.HIT]
        loaded = {}
        with self.manager.lock:
            if hits:
                spec = self.manager.prepare_load(hits, ctx)
                loaded = {k: bytes(self.rows[c]) for k, c in zip(hits, spec.chunk_ids)}
                self.manager.complete_load(hits, ctx)
            self.manager.on_request_finished(ctx)
        self.step()
        return [t for j, t in enumerate(trace) if j == 0 or t != trace[j - 1]], loaded

    def round_trip(self, daemon, keys: List[bytes], payloads: List[bytes]) -> list:
        """Stores the chunks, waits until they are written, empties the CPU tier and loads them
        back through the tier: they must come back byte-identical. Returns the lookup trace."""
        self.store("writer", keys, payloads)
        wait_written(daemon, self.tier, keys)
        self.forget_primary()
        trace, loaded = self.load("reader", keys)
        assert [loaded.get(k) for k in keys] == payloads
        return trace

    def close(self) -> None:
        del self.rows
        self.manager.shutdown()



def keys_and_payloads(n: int, tag: int) -> tuple:
    keys = [make_offload_key(bytes([tag, i]) * 16, 0) for i in range(n)]
    return keys, [os.urandom(ROW) for _ in range(n)]


def wait_written(daemon, tier: KVStreamTier, keys: List[bytes], timeout: float = 20) -> None:
    """Until every key is on a tier (a store job is done once the daemon has staged it, and a
    lookup or a load sees it from then on, served from staging until it is written)."""
    names = [f"{tier.status()['namespace']}/{k.hex()}" for k in keys]
    deadline = time.monotonic() + timeout
    with kvstream.Client.connect(daemon.socket) as c:
        while not all(e.tier_mask for e in c.lookup(names)[0]):
            assert time.monotonic() < deadline, "the stored chunks were never written"
            time.sleep(0.02)


def submit(tier: KVStreamTier, keys: List[bytes], rows: List[int], load: bool) -> int:
    job = TransferJob(job_id=next(_jobs), keys=keys, chunk_ids=np.array(rows, dtype=np.int32), is_promotion=load,
                      req_context=ReqContext(req_id=f"direct{time.monotonic_ns()}"))
    (tier.submit_load if load else tier.submit_store)(job)
    return job.job_id


def finished(tier: KVStreamTier, ids: Iterable[int], timeout: float = 30) -> dict:
    """Sends this step's jobs (on_schedule_end) and collects their results by job id."""
    tier.on_schedule_end(ScheduleEndContext((), ()))
    want, results = set(ids), {}
    deadline = time.monotonic() + timeout
    while want - results.keys():
        for r in tier.get_finished_jobs():
            assert r.job_id not in results, f"job {r.job_id} reported twice"
            results[r.job_id] = r
        assert time.monotonic() < deadline, f"jobs {want - results.keys()} never finished"
        time.sleep(0.005)
    return results
