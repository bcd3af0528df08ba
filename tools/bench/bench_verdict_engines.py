#!/usr/bin/env python3
"""bench_verdict_engines: the load-or-recompute verdict end to end, through one engine's real
lookup and load path, on CPU, against kvstreamd on a tierlab tier whose read cap steps down
(tools/bench-verdict-engines.sh runs it once per engine, inside the tier's blkio cgroup).

One request's prefix of --chunks chunks (--chunk-mib MiB and --chunk-tokens tokens each) is stored
once through the engine's store path. Then, per read cap (--caps, set with `tierlab cap`):

  warm-up     --warmup-steps untimed loads through the engine's load path with the verdict off, so
              that the daemon measures the tier at the new cap: its estimate is a moving average
              over steps (a quarter weight each), so it takes steps, not bytes, to forget the old
              cap; each reads the prefix's first chunks for about --warmup-seconds at the cap
              (warmup_chunks: shorter steps ride the blkio throttle's burst);
  verdict     the engine's lookup with the verdict on picks h hit chunks; TTFT = the measured wall
              time of that lookup and the load of those h chunks through the engine's path, plus the
              predicted compute of the other m - h chunks after h cached;
  load-all    the same with the verdict off: every chunk loads, nothing is computed;
  recompute-all  the predicted compute of the whole prefix (no lookup, no load).

verdict and load-all alternate over --reps repetitions (medians reported), each after the same
idle --pause: the blkio throttle works in slices of about 100 ms, and whether a load starts on a
fresh slice (with a slice's bytes at once) would otherwise be chance, +-0.1 s a load. The tokens
after the prefix are computed in every mode alike and left out.

The fake compute clock: "computing" n tokens after c cached adds RecomputeModel.seconds(n, c) to the
emulated TTFT (nothing sleeps). The model is kvstream.recompute's, built from the same settings the
engine's verdict gets: --model-shape (KV bytes per token match the chunk size) and a calibrated
recompute_tokens_per_s chosen so that recomputing the whole prefix takes as long as loading it at
--crossover-mbps. Each engine gets those settings through its own configuration (vLLM's
secondary_tiers entry, the L2 adapter's adapter_params, SGLang's extra config), so the clock and the
verdict agree on compute, and the check tests the daemon's load estimate against the engine's
actual loads.

Engines, each through its real code:
  vllm     vLLM's TieringOffloadingManager (bench_vllm.make_manager) with the kvstream tier; the
           lookup is the scheduler's maximal-prefix loop (manager.lookup per key, RETRY/HIT_PENDING
           deferring, MISS stopping it), stepped with on_schedule_end until the h chunks are HIT
           (promoted into vLLM's CPU tier); stored through prepare_store/complete_store.
  lmcache  LMCache's MP L2 adapter interface, the adapters built by LMCache's own --l2-adapter
           parsing and factory on a shared-memory L1 pool: submit_lookup_and_lock_task, then
           submit_load_task of the leading hits, unlocked afterwards; stored with submit_store_task.
  sglang   SGLang's HiCacheController prefetch code (_storage_hit_query: batch_exists per storage
           batch; _page_transfer: batch_get_v1 into the host pool) on the kvstream backend and
           SGLang's real host KV pool; stored with the controller's _page_backup (batch_set_v1).

Checks per cap: TTFT(verdict) <= --tolerance x min(load-all, recompute-all); over the caps, the
hits chosen never grow as the cap drops, are all the chunks at the first cap and at most --few at the
last. Prints a table, writes --json, exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import kvstream
from kvstream.recompute import ModelShape, RecomputeModel

# A small model whose KV is 16 KiB a token in bf16 (2 x 8 layers x 4 KV heads x 128): 256 tokens are
# a 4 MiB chunk. Its compute rate is calibrated (recompute_tokens_per_s) for the crossover wanted.
DEFAULT_SHAPE = {"layers": 8, "hidden_size": 2048, "heads": 16, "kv_heads": 4, "head_dim": 128,
                 "intermediate_size": 5632}
HERE = os.path.dirname(os.path.abspath(__file__))


def kv_bytes_per_token(shape: Dict[str, int]) -> int:
    return 2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"] * 2  # K and V, bf16


def calibrated_rate(shape: Dict[str, int], tokens: int, seconds: float) -> float:
    """The recompute_tokens_per_s at which prefilling `tokens` with nothing cached takes `seconds`
    (kvstream.recompute: seconds = (n + attention flops / linear flops per token) / rate)."""
    s = ModelShape.from_fields(shape)
    assert s is not None
    return (tokens + s.attention_flops(tokens, 0) / s.linear_flops_per_token()) / seconds


# -- engines ------------------------------------------------------------------------------------
# Each: store() once; load(verdict, first, count) -> (chunks loaded, seconds) through its lookup and
# load path, chunks first..first+count-1 of the prefix, as a continuation of the chunks before;
# names() the daemon's keys of the prefix, chunk by chunk; verdict_model() the compute model its
# verdict uses; status() its counters; close().


class VLLMEngine:
    def __init__(self, args: argparse.Namespace, settings: Dict[str, Any]) -> None:
        sys.path.insert(0, HERE)
        import numpy as np
        from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key

        import bench_vllm

        self._bv, self._LR, self._ReqContext, self._np = bench_vllm, LookupResult, ReqContext, np
        self.socket, self.m, self.tokens = args.socket, args.chunks, args.chunk_tokens
        self.row = args.chunk_mib << 20
        self.keys = [make_offload_key(hashlib.sha256(f"verdict/{c}".encode()).digest(), 0) for c in range(self.m)]
        tier = {"type": "KVStreamTier", "module_path": "kvstream.vllm_tier", "socket_path": args.socket, **settings}
        self.managers = {v: bench_vllm.make_manager(self.row, 2 * self.m, {**tier, "verdict": v}, self.tokens)
                         for v in ("on", "off")}
        self.rows = {v: np.frombuffer(m.primary_tier.get_kv_memoryview(), dtype=np.uint8).reshape(-1, self.row)
                     for v, m in self.managers.items()}
        self._requests = 0

    def names(self) -> List[str]:
        tier = self.managers["off"].secondary_tiers[0]
        return [f"{tier.status()['namespace']}/{bytes(k).hex()}" for k in self.keys]

    def store(self) -> None:
        manager = self.managers["off"]
        self._bv.store_all(manager, self.rows["off"], [[self.keys]])
        self._bv.wait_written(self.socket, manager.secondary_tiers[0], self.keys)
        self._bv.forget_primary(manager)

    def load(self, verdict: bool, first: int = 0, count: Optional[int] = None) -> Tuple[int, float]:
        v = "on" if verdict else "off"
        manager, rows = self.managers[v], self.rows[v]
        keys = self.keys[first:first + (self.m - first if count is None else count)]
        self._requests += 1
        ctx = self._ReqContext(req_id=f"verdict-{v}-{self._requests}")
        for c, key in enumerate(keys, start=first):  # as vLLM's scheduler records them
            ctx.set_offload_key_position(key, (c + 1) * self.tokens)
        LR = self._LR
        with manager.lock:
            manager.on_new_request(ctx)
        start = time.perf_counter()
        while True:
            # vLLM's OffloadingConnectorScheduler._maximal_prefix_lookup: HIT and HIT_PENDING count,
            # RETRY defers (the scan goes on to start the other lookups), MISS ends the prefix.
            hits, defer = 0, False
            with manager.lock:
                for key in keys:
                    result = manager.lookup(key, ctx)
                    if result is LR.MISS:
                        break
                    if result is LR.RETRY:
                        defer = True
                        continue
                    hits += 1
                    defer |= result is LR.HIT_PENDING
            if not defer:
                break
            self._bv.end_step(manager)
            time.sleep(0.0005)
        took = time.perf_counter() - start
        with manager.lock:
            if hits:
                spec = manager.prepare_load(keys[:hits], ctx)
                for key, c in zip(keys[:hits], spec.chunk_ids):
                    if bytes(rows[c, :64]) != hashlib.sha512(key).digest():
                        raise RuntimeError(f"vllm: chunk {bytes(key).hex()} came back with other bytes")
                manager.complete_load(keys[:hits], ctx)
            manager.on_request_finished(ctx)
        self._bv.end_step(manager)
        self._bv.settle(manager)
        self._bv.forget_primary(manager)  # the next load reads from kvstreamd again
        rows[:] = 0
        return hits, took

    def verdict_model(self) -> RecomputeModel:
        return self.managers["on"].secondary_tiers[0]._verdict.model("bench/model")

    def status(self) -> Dict[str, Any]:
        return {v: m.secondary_tiers[0].status() for v, m in self.managers.items()}

    def close(self) -> None:
        self.rows.clear()
        import gc

        gc.collect()
        for manager in self.managers.values():
            manager.shutdown()


class LMCacheEngine:
    def __init__(self, args: argparse.Namespace, settings: Dict[str, Any]) -> None:
        sys.path.insert(0, HERE)
        import torch
        from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey
        from lmcache.v1.distributed.config import L1MemoryManagerConfig
        from lmcache.v1.distributed.l2_adapters import create_l2_adapter
        from lmcache.v1.distributed.memory_manager.l1_memory_manager import L1MemoryManager

        from bench_lmcache_l2 import parse_spec, wait
        from kvstream.lmcache.l2_adapter import l2_adapter_spec, object_key_name

        self._wait, self._torch, self.m = wait, torch, args.chunks
        self.chunk_bytes = args.chunk_mib << 20
        layout = MemoryLayoutDesc([torch.Size((self.chunk_bytes // 2,))], [torch.bfloat16])
        self.l1 = L1MemoryManager(L1MemoryManagerConfig(size_in_bytes=(2 * self.m + 2) * self.chunk_bytes,
                                                        use_lazy=False,
                                                        shm_name=f"lmcache_l1_pool_verdict{os.getpid()}"))
        err, self.src = self.l1.allocate(layout, self.m)
        assert self.src, err
        err, self.dst = self.l1.allocate(layout, self.m)
        assert self.dst, err
        gen = torch.Generator().manual_seed(0)
        for obj in self.src:
            obj.raw_tensor[:self.chunk_bytes].copy_(torch.randint(0, 255, (self.chunk_bytes,), generator=gen,
                                                                  dtype=torch.uint8))
        self.keys = [ObjectKey(chunk_hash=hashlib.sha256(f"verdict/{c}".encode()).digest()[:16],
                               model_name="bench/model", kv_rank=0) for c in range(self.m)]
        self._names = [object_key_name(k) for k in self.keys]
        params = {"chunk_tokens": args.chunk_tokens, "arena_bytes": 16 << 20, **settings}
        self.adapters = {v: create_l2_adapter(parse_spec(l2_adapter_spec(args.socket, **params, verdict=v)),
                                              self.l1.get_l1_memory_desc()) for v in ("on", "off")}

    def names(self) -> List[str]:
        return list(self._names)

    def store(self) -> None:
        adapter = self.adapters["off"]
        adapter.submit_store_task(self.keys, self.src)
        done = self._wait(adapter.get_store_event_fd(), adapter.pop_completed_store_tasks)
        assert all(r.is_successful() for r in done.values()), done

    def load(self, verdict: bool, first: int = 0, count: Optional[int] = None) -> Tuple[int, float]:
        adapter = self.adapters["on" if verdict else "off"]
        last = self.m if count is None else first + count
        keys = self.keys[first:last]
        start = time.perf_counter()
        task = adapter.submit_lookup_and_lock_task(keys)
        bitmap = self._wait(adapter.get_lookup_and_lock_event_fd(),
                            lambda: adapter.query_lookup_and_lock_result(task))
        locked = bitmap.get_indices_list()
        hits = bitmap.count_leading_ones()  # the leading hits: what the server loads
        if hits:
            task = adapter.submit_load_task(keys[:hits], self.dst[first:first + hits])
            loaded = self._wait(adapter.get_load_event_fd(), lambda: adapter.query_load_result(task))
            if loaded.popcount() != hits:
                raise RuntimeError(f"lmcache: {hits - loaded.popcount()} of {hits} hits did not load")
        took = time.perf_counter() - start
        if locked:
            adapter.submit_unlock([keys[i] for i in locked])
        for c in range(first, first + hits):
            if not self._torch.equal(self.dst[c].raw_tensor[:self.chunk_bytes], self.src[c].raw_tensor[:self.chunk_bytes]):
                raise RuntimeError(f"lmcache: chunk {c} came back with other bytes")
            self.dst[c].raw_tensor.zero_()
        return hits, took

    def verdict_model(self) -> RecomputeModel:
        return self.adapters["on"].verdict.model(self.keys[0].model_name)

    def status(self) -> Dict[str, Any]:
        return {v: a.report_status() for v, a in self.adapters.items()}

    def close(self) -> None:
        for adapter in self.adapters.values():
            adapter.close()
        self.l1.free(self.src + self.dst)
        self.l1.close()


class SGLangEngine:
    def __init__(self, args: argparse.Namespace, settings: Dict[str, Any]) -> None:
        sys.path.insert(0, HERE)
        import queue

        import torch
        from sglang.srt.managers.cache_controller import HiCacheController, PrefetchOperation, StorageOperation
        from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
        from sglang.srt.mem_cache.utils import get_storage_hash_str

        from bench_sglang import config, host_pool
        from kvstream.sglang import KVStreamHiCache, extra_config

        shape = settings["model_shape"]
        self.m, self.page = args.chunks, args.chunk_tokens
        self.host = host_pool(self.m * self.page, self.page, shape["kv_heads"], shape["head_dim"], shape["layers"])
        page_bytes = self.host.get_size_per_token() * self.page
        if page_bytes != args.chunk_mib << 20:
            raise SystemExit(f"sglang: a page of the host pool is {page_bytes} bytes, not --chunk-mib")
        self._torch, self._Prefetch, self._Storage = torch, PrefetchOperation, StorageOperation
        self.token_ids = [(7919 * i) % 32000 for i in range(self.m * self.page)]
        self.hashes = get_storage_hash_str(self.token_ids, None, page_size=self.page)
        self.src = self.host.alloc(self.m * self.page)
        self.dst = self.host.alloc(self.m * self.page)
        g = torch.Generator().manual_seed(7)
        for p in range(self.m):
            at = int(self.src[p * self.page])
            page = self.host.get_data_page(at)
            self.host.set_from_flat_data_page(at, torch.randint(-2**15, 2**15, (page.numel(),), generator=g,
                                                                dtype=torch.int16).view(page.dtype))

        class Controller(HiCacheController):
            """SGLang's controller with only what its prefetch and backup code uses (its __init__
            starts threads and process groups this driver does not need)."""

            def __init__(self, backend: Any, host: Any, page_size: int) -> None:  # noqa: D401
                self.storage_backend, self.mem_pool_host, self.page_size = backend, host, page_size
                self.storage_host_pool = host
                self.page_get_func = self._page_get_zero_copy
                self.page_set_func = self._page_set_zero_copy
                self.prefetch_sync_queue = queue.SimpleQueue()

        self.backends, self.controllers = {}, {}
        for v in ("on", "off"):
            backend = StorageBackendFactory.create_backend(
                "dynamic", config(extra_config(args.socket, shm=True, verdict=v, **settings)), self.host)
            assert isinstance(backend, KVStreamHiCache)
            backend.register_mem_pool_host(self.host)
            self.backends[v], self.controllers[v] = backend, Controller(backend, self.host, self.page)

    def names(self) -> List[str]:
        backend = self.backends["off"]
        pieces = backend._pieces_per_page()
        return [n for h in self.hashes for n in backend._keys(h, pieces)]

    def store(self) -> None:
        op = self._Storage(self.src, self.token_ids, hash_value=list(self.hashes), prefix_keys=[])
        self.controllers["off"]._page_backup(op)
        if op.completed_tokens != self.m * self.page:
            raise RuntimeError(f"sglang: stored {op.completed_tokens // self.page} of {self.m} pages")
        backend = self.backends["off"]
        with kvstream.Client.connect(backend.settings.socket_path) as c:
            deadline = time.monotonic() + 120
            while not all(e.tier_mask for e in c.lookup(self.names())[0]):
                if time.monotonic() > deadline:
                    raise RuntimeError("sglang: pages not written after 120 s")
                time.sleep(0.05)

    def load(self, verdict: bool, first: int = 0, count: Optional[int] = None) -> Tuple[int, float]:
        controller = self.controllers["on" if verdict else "off"]
        last = self.m if count is None else first + count
        tokens = self.token_ids[first * self.page:last * self.page]
        op = self._Prefetch(f"verdict-{time.monotonic_ns()}", tokens, last_hash=self.hashes[first - 1] if first else None,
                            prefix_keys=list(self.hashes[:first]))
        start = time.perf_counter()
        hash_value, hit_tokens = controller._storage_hit_query(op)
        hits = hit_tokens // self.page
        op.hash_value = hash_value[:hits]
        op.host_indices = self.dst[first * self.page:(first + hits) * self.page]
        if hits:
            done = controller._page_transfer(op)
            if done != hits:
                raise RuntimeError(f"sglang: {hits - done} of {hits} hit pages did not load")
        took = time.perf_counter() - start
        for p in range(first, first + hits):
            a = self.host.get_data_page(int(self.src[p * self.page])).view(self._torch.int16)
            b = self.host.get_data_page(int(self.dst[p * self.page])).view(self._torch.int16)
            if not self._torch.equal(a, b):
                raise RuntimeError(f"sglang: page {p} came back with other bytes")
            self.host.get_data_page(int(self.dst[p * self.page]), flat=False).view(self._torch.int16).fill_(0)
        return hits, took

    def verdict_model(self) -> RecomputeModel:
        backend = self.backends["on"]
        return backend.verdict.model(backend._model)

    def status(self) -> Dict[str, Any]:
        return {v: b.get_stats() for v, b in self.backends.items()}

    def close(self) -> None:
        for backend in self.backends.values():
            backend.close()


ENGINES = {"vllm": VLLMEngine, "lmcache": LMCacheEngine, "sglang": SGLangEngine}


# -- the sweep ----------------------------------------------------------------------------------


def set_cap(args: argparse.Namespace, mbps: float) -> None:
    subprocess.run([args.tierlab, "cap", "--dir", args.tierlab_dir, args.tier, f"{mbps:g}"], check=True,
                   stdout=subprocess.DEVNULL)


def warmup_chunks(args: argparse.Namespace, cap_mbps: float) -> int:
    """Chunks in a warm-up step at `cap_mbps`: enough for --warmup-seconds of reading at the cap
    (at most the prefix). The blkio throttle dispatches in slices of about 100 ms and, after a
    pause, grants a slice's bytes at once: a step of a slice or two reads above the cap, and the
    daemon would take that burst for the tier's bandwidth."""
    return max(1, min(args.chunks, math.ceil(cap_mbps * 1e6 * args.warmup_seconds / (args.chunk_mib << 20))))


def estimate(control: Any, names: Sequence[str]) -> float:
    """The daemon's estimate of loading the whole prefix now (what the verdict is told)."""
    entries, _ = control.lookup(list(names), estimate_load=True)
    return float(entries[-1].load_seconds) if entries else math.nan


def sweep(args: argparse.Namespace, engine: Any, model: RecomputeModel) -> List[Dict[str, Any]]:
    m, tokens = args.chunks, args.chunk_tokens
    names = engine.names()
    recompute_all = model.seconds(m * tokens, 0)
    rows = []
    with kvstream.Client.connect(args.socket) as control:
        for cap in args.caps:
            set_cap(args, cap)
            # The daemon measures the tier at this cap (see warmup_chunks).
            for _ in range(args.warmup_steps):
                engine.load(False, 0, warmup_chunks(args, cap))
            est, hits, ttft_v, ttft_l = [], [], [], []
            for _ in range(args.reps):
                # The same pause before every timed load: each starts on a fresh throttle slice
                # (with back-to-back loads, whether one does is chance: +-1 slice, 0.1 s).
                time.sleep(args.pause)
                est.append(estimate(control, names))
                h, took = engine.load(True)
                hits.append(h)
                ttft_v.append(took + model.seconds((m - h) * tokens, h * tokens))
                time.sleep(args.pause)
                h_all, took = engine.load(False)
                if h_all != m:
                    raise RuntimeError(f"load-all loaded {h_all} of {m} chunks")
                ttft_l.append(took)
            row = {"cap_mbps": cap, "hits": hits, "hits_median": statistics.median(hits), "chunks": m,
                   "ttft_verdict": statistics.median(ttft_v), "load_all": statistics.median(ttft_l),
                   "recompute_all": recompute_all, "estimate_load_all": statistics.median(est),
                   "runs": {"verdict": ttft_v, "load_all": ttft_l, "estimate": est}}
            row["ratio"] = row["ttft_verdict"] / min(row["load_all"], row["recompute_all"])
            row["pass"] = row["ratio"] <= args.tolerance
            rows.append(row)
            print(f"  cap {cap:g} MB/s: hits {hits}, verdict {row['ttft_verdict']:.3f} s, load-all "
                  f"{row['load_all']:.3f} s (estimate {row['estimate_load_all']:.3f} s), recompute-all "
                  f"{recompute_all:.3f} s", flush=True)
    return rows


def report(args: argparse.Namespace, rows: List[Dict[str, Any]]) -> List[str]:
    """Prints the table; returns the failed checks."""
    m = args.chunks
    print(f"\n{args.engine}: {m} chunks x {args.chunk_mib} MiB x {args.chunk_tokens} tokens, medians of {args.reps}")
    print(f"{'cap MB/s':>8} {'hits':>7} {'verdict s':>10} {'load-all s':>10} {'recomp-all s':>12} "
          f"{'est load s':>10} {'ratio':>6}  check")
    failed = []
    for r in rows:
        spread = f"{min(r['hits'])}-{max(r['hits'])}" if min(r["hits"]) != max(r["hits"]) else f"{r['hits'][0]}"
        print(f"{r['cap_mbps']:8g} {spread + '/' + str(m):>7} {r['ttft_verdict']:10.3f} {r['load_all']:10.3f} "
              f"{r['recompute_all']:12.3f} {r['estimate_load_all']:10.3f} {r['ratio']:6.3f}  "
              f"{'PASS' if r['pass'] else 'FAIL'}")
        if not r["pass"]:
            failed.append(f"cap {r['cap_mbps']:g}: verdict {r['ratio']:.3f} x the better of load-all and "
                          f"recompute-all (> {args.tolerance:g})")
    medians = [r["hits_median"] for r in rows]
    if any(b > a for a, b in zip(medians, medians[1:])):
        failed.append(f"hits grow as the cap drops: {medians}")
    if rows and medians[0] != m:
        failed.append(f"hits at {rows[0]['cap_mbps']:g} MB/s: {medians[0]:g}, not all {m}")
    if rows and medians[-1] > args.few:
        failed.append(f"hits at {rows[-1]['cap_mbps']:g} MB/s: {medians[-1]:g}, more than {args.few}")
    print(f"hits never grow as the cap drops, all at {rows[0]['cap_mbps']:g}, at most {args.few} at "
          f"{rows[-1]['cap_mbps']:g}: {'PASS' if not any(f.startswith('hits') for f in failed) else 'FAIL'}")
    for f in failed:
        print(f"{args.engine}: FAIL {f}")
    return failed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", required=True, choices=sorted(ENGINES))
    p.add_argument("--socket", required=True, help="kvstreamd's socket")
    p.add_argument("--tierlab", required=True, help="tools/tierlab (to set the caps)")
    p.add_argument("--tierlab-dir", required=True, help="the tiers' tierlab --dir")
    p.add_argument("--tier", default="t0", help="the tier whose read cap steps")
    p.add_argument("--caps", default="300,100,30,10", help="read caps in MB/s, in order")
    p.add_argument("--chunks", type=int, default=16, help="chunks of the prefix")
    p.add_argument("--chunk-mib", type=int, default=4)
    p.add_argument("--chunk-tokens", type=int, default=256)
    p.add_argument("--model-shape", default=json.dumps(DEFAULT_SHAPE),
                   help="JSON of kvstream.recompute's shape fields (KV bytes per token x chunk tokens = chunk bytes)")
    p.add_argument("--crossover-mbps", type=float, default=40.0,
                   help="the read rate at which loading the prefix takes as long as recomputing it")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup-steps", type=int, default=20,
                   help="untimed loads after each cap change (the daemon's moving average keeps 0.75^N of the old cap)")
    p.add_argument("--warmup-seconds", type=float, default=0.5,
                   help="each warm-up load reads this long at the cap (at most the whole prefix)")
    p.add_argument("--pause", type=float, default=0.3,
                   help="seconds idle before each timed load (longer than a blkio throttle slice)")
    p.add_argument("--tolerance", type=float, default=1.05)
    p.add_argument("--few", type=int, default=2, help="most hits allowed at the last cap")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    args.caps = [float(c) for c in args.caps.split(",")]
    shape = json.loads(args.model_shape)
    if kv_bytes_per_token(shape) * args.chunk_tokens != args.chunk_mib << 20:
        raise SystemExit(f"model shape's KV ({kv_bytes_per_token(shape)} bytes a token) x {args.chunk_tokens} "
                         f"tokens is not a chunk of {args.chunk_mib} MiB")
    prefix_bytes = args.chunks * (args.chunk_mib << 20)
    rate = calibrated_rate(shape, args.chunks * args.chunk_tokens, prefix_bytes / (args.crossover_mbps * 1e6))
    settings = {"recompute_tokens_per_s": rate, "model_shape": shape}
    model = RecomputeModel(ModelShape.from_fields(shape), tokens_per_s=rate)
    print(f"{args.engine}: prefix of {args.chunks} x {args.chunk_mib} MiB ({prefix_bytes / 1e6:.1f} MB, "
          f"{args.chunks * args.chunk_tokens} tokens); compute model {model}: the prefix in "
          f"{model.seconds(args.chunks * args.chunk_tokens):.3f} s (= loading it at {args.crossover_mbps:g} MB/s)",
          flush=True)

    engine = ENGINES[args.engine](args, settings)
    try:
        # The clock must be the engine's own compute model, as its verdict found it.
        found = engine.verdict_model()
        n = args.chunks * args.chunk_tokens
        if not all(math.isclose(found.seconds(n - k, k), model.seconds(n - k, k), rel_tol=1e-9) for k in (0, n // 2)):
            raise RuntimeError(f"the engine's verdict computes with {found}, not the clock's {model}")
        set_cap(args, args.caps[0])
        start = time.perf_counter()
        engine.store()
        print(f"  stored the prefix in {time.perf_counter() - start:.1f} s", flush=True)
        rows = sweep(args, engine, model)
        status = engine.status()
    finally:
        engine.close()
    failed = report(args, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"engine": args.engine, "chunks": args.chunks, "chunk_mib": args.chunk_mib,
                       "chunk_tokens": args.chunk_tokens, "model_shape": shape, "recompute_tokens_per_s": rate,
                       "crossover_mbps": args.crossover_mbps, "rows": rows, "failed": failed,
                       "engine_status": status}, f, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001 - status 2: the bench broke (1 is a check that failed)
        import traceback

        traceback.print_exc()
        sys.exit(2)
