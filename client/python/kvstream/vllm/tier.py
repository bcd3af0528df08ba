"""KVStreamTier: kvstreamd as a secondary tier of vLLM's own multi-tier KV offloading.

vLLM (0.33) offloads KV with `spec_name: TieringOffloadingSpec`: a CPU primary tier in one shared
file, /dev/shm/vllm_offload_<engine>.mmap (SharedOffloadRegion, one row per chunk holding every
TP rank's part), and secondary tiers built in the scheduler process, one per engine, from
`secondary_tiers` in kv_connector_extra_config:

    {"type": "KVStreamTier", "module_path": "kvstream.vllm_tier",
     "socket_path": "/run/kvstream/kvstreamd.sock"}

This tier is one kvstreamd session. The primary region goes to the daemon as a client region, so
loads land in the primary rows by O_DIRECT and stores are read out of them by the daemon: no byte
of a chunk passes through Python (`copied_bytes` counts any that do, on the copy path taken only
when the region is not shared memory or `zero_copy` is false; kvstream.transfer moves the rows
either way, and DaemonLink.call decides whether a failed call drops the session). Every load job submitted during a
scheduler step goes to the daemon as ONE retrieve at the end of the step (M1: all requests of the
step read from every kvstreamd tier at once), and the step's stores as one persist (the daemon
stages them and writes them while no read is pending, M2). Lookups never block the scheduler:
vLLM's AsyncLookupManager asks the daemon on its own thread after each step (one daemon lookup
per request with new keys), and each hit is locked for `lease_seconds` so that a HIT stays
loadable; until the answer is in, lookup says RETRY.

Failures end in failed keys, which vLLM recomputes, never in wrong bytes: a chunk the daemon
cannot serve (a miss, a checksum mismatch, every replica failed, or its only replica on a tier
that hangs, given up after the daemon's `reads.give_up`, 10 s) fails alone
(JobResult.successful_keys names the rest) and is a MISS from then on; a daemon that goes away
(stops, restarts, dies) fails the batch in flight, and the tier answers MISS until it is back
(kvstream.daemon_link reconnects). A job is never reported while the daemon may still read into
or out of its rows (vLLM reuses the rows of a finished job): retrieves and persists carry no
client deadline, since the daemon bounds a hung tier itself (reads.give_up) and a hung daemon is
restarted by its watchdog, which ends the calls. Lookups use a connection of their own, so a slow
lookup never touches the session the data moves on. A stored chunk counts once the daemon has
staged it (copied out of the primary row); from then on lookups see it (the daemon serves it
from staging until it is on a tier), and a store skips chunks the daemon already holds.

When a GPU is present vLLM's workers pin the primary region (cudaHostRegister), so it goes to the
daemon as device-pinned memory: reads land through the daemon's bounce buffers (one copy in the
daemon) and the daemon never swaps pages under the GPU.

Load or recompute: a lookup asks the daemon for its load estimate and the tier's verdict
(kvstream.verdict through kvstream.transfer.lookup) answers MISS for the request's chunks past the
point where loading stops paying (vLLM recomputes them): the chunks' positions come from the
request's ReqContext, the model's shape from its config (vLLM's current config or its config.json),
its TP size times `recompute_tflops` is the engine's throughput. Stores go out by each chunk's
depth in its request (every request's chunk 0 first); a chunk the daemon drops because its staging
is full fails its store job (vLLM's back-pressure sees it) and counts as dropped_keys, not as a
failed key, and nothing is logged.

Keys: `<namespace>/<hex of vLLM's OffloadKey>`; the namespace defaults to the model and a digest
of everything that shapes a row (dtype, block and chunk sizes, the parallel layout), so engines of
one model and layout share chunks through the daemon and different layouts never mix.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
from vllm.v1.kv_offload.base import (
    Locality,
    LookupResult,
    Medium,
    OffloadingCounterMetadata,
    OffloadingMetricMetadata,
    OffloadKey,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
)
from vllm.v1.kv_offload.tiering.async_lookup import AsyncLookupManager
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob

from .. import engine_versions, recompute, transfer
from ..client import Client
from ..daemon_link import DaemonLink, Session
from ..shared_region import SharedRegion, gpu_present
from ..verdict import Verdict
from .jobs import Batch, batch_of, batch_of_failed
from .namespace import default_namespace

logger = logging.getLogger("kvstream.vllm_tier")  # the name user configs know
engine_versions.check("vllm")

DEFAULT_SOCKET = "/run/kvstream/kvstreamd.sock"
METRIC_PREFIX = "vllm:kv_offload_kvstream_"


class _Lookups(AsyncLookupManager):
    """vLLM's non-blocking lookup cache: after each step, on its thread, one daemon lookup per
    request with new keys."""

    def __init__(self, tier: "KVStreamTier") -> None:
        super().__init__(tier_type=tier.tier_type)
        self._tier = tier

    def batch_lookup(self, keys: List[OffloadKey], req_context: ReqContext) -> Iterable[bool]:
        return self._tier._present(keys, req_context)


class KVStreamTier(SecondaryTierManager):
    """A vLLM secondary tier served by kvstreamd (see the module docstring).

    Settings (the other keys of the tier's entry in `secondary_tiers`):
      socket_path     kvstreamd's socket (default /run/kvstream/kvstreamd.sock)
      namespace       key prefix; default: the model and a digest of the row layout
      lookup_timeout  seconds a lookup may take before it counts as a miss (5)
      lease_seconds   how long a lookup hit stays locked against eviction (60)
      connect_timeout seconds to wait for the daemon at attach (2)
      retry_interval  seconds between reconnects while the daemon is down (1)
      zero_copy       hand the primary region to the daemon (true); false copies through the arena
      device_pinned   the region is pinned by a GPU (default: when torch sees CUDA)
      arena_bytes     the session arena for the copy path (256 MiB; 1 MiB with zero copy)
      locality        LOCAL or REMOTE, for vLLM's KV events
      verdict         on | off: cut lookups where loading stops paying (on)
      recompute_tflops        effective TFLOPS per GPU of the engine's prefill (400)
      recompute_tokens_per_s  prefill tokens/s measured with no cache (0: not calibrated)
      model_shape     fields of the model's shape over those of its config (kvstream.recompute)
    """

    medium = Medium.STORAGE

    def __init__(
        self,
        offloading_spec: Any,
        primary_kv_view: memoryview,
        tier_type: str,
        backpressure_detector: Any = None,
        socket_path: str = DEFAULT_SOCKET,
        namespace: Optional[str] = None,
        lookup_timeout: float = 5.0,
        lease_seconds: float = 60.0,
        connect_timeout: float = 2.0,
        retry_interval: float = 1.0,
        zero_copy: bool = True,
        device_pinned: Optional[bool] = None,
        arena_bytes: Optional[int] = None,
        locality: Optional[str] = None,
        verdict: Any = "on",
        recompute_tflops: float = recompute.DEFAULT_TFLOPS,
        recompute_tokens_per_s: float = 0.0,
        model_shape: Any = None,
    ) -> None:
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        for name, value in (("lookup_timeout", lookup_timeout),
                            ("lease_seconds", lease_seconds), ("connect_timeout", connect_timeout),
                            ("retry_interval", retry_interval)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"KVStreamTier: {name} must be a positive number of seconds, got {value!r}")
        if lease_seconds > 3600:
            raise ValueError(f"KVStreamTier: lease_seconds must be at most 3600, got {lease_seconds!r}")
        if not isinstance(zero_copy, bool):
            raise ValueError(f"KVStreamTier: zero_copy must be true or false, got {zero_copy!r}")
        if device_pinned is not None and not isinstance(device_pinned, bool):
            raise ValueError(f"KVStreamTier: device_pinned must be true or false, got {device_pinned!r}")
        self._device_pinned = gpu_present() if device_pinned is None else device_pinned
        if arena_bytes is not None and (not isinstance(arena_bytes, int) or isinstance(arena_bytes, bool)
                                        or arena_bytes <= 0):
            raise ValueError(f"KVStreamTier: arena_bytes must be a positive integer, got {arena_bytes!r}")
        self.locality = Locality(locality) if locality is not None else None
        settings = recompute.settings({"verdict": verdict, "recompute_tflops": recompute_tflops,
                                       "recompute_tokens_per_s": recompute_tokens_per_s,
                                       "model_shape": model_shape}, where="KVStreamTier:")
        config = getattr(offloading_spec, "config", None)
        groups = getattr(config, "groups", ()) or ()
        blocks = getattr(getattr(config, "cache", None), "blocks_per_chunk", 0) or 0
        self._chunk_tokens = int(getattr(groups[0], "tokens_per_block", 0) * blocks) if groups else 0
        self._model = getattr(getattr(config, "model", None), "name", "") or ""
        tp = int(getattr(getattr(config, "parallel", None), "tp_size", 1) or 1)
        self._verdict = Verdict(settings, f"vLLM tier '{tier_type}'", gpus=tp, log=logger)
        self._lease = float(lease_seconds)
        self._namespace = namespace or default_namespace(offloading_spec, self.block_size_bytes)
        self._row = self.block_size_bytes
        self._rows = len(primary_kv_view)
        view = primary_kv_view.cast("B") if primary_kv_view.ndim != 1 or primary_kv_view.format != "B" else primary_kv_view
        self._bytes = view  # the primary rows as bytes
        self._own_view = view is not primary_kv_view  # ours to release at shutdown
        base = np.frombuffer(view, dtype=np.uint8).ctypes.data  # its address (the array is dropped at once)
        self._region: Optional[SharedRegion] = SharedRegion.find(base, view.nbytes) if zero_copy else None
        self._base = base
        if zero_copy and self._region is None:
            logger.warning("kvstream: vLLM's primary tier is not shared memory this process can hand over; "
                           "chunks are copied through the session arena")
        arena = arena_bytes if arena_bytes is not None else (1 << 20 if self._region is not None else 256 << 20)
        if self._region is None and arena < self._row:
            raise ValueError(f"KVStreamTier: arena_bytes {arena} is smaller than one chunk ({self._row} bytes)")

        def connect() -> Session:
            client = Client.attach(socket_path, model=self._namespace, rank=0, world_size=1, arena_bytes=arena,
                                   timeout=connect_timeout, rpc_timeout=lookup_timeout)
            try:
                region = (client.add_region(self._region.fd, self._region.size, device_pinned=self._device_pinned)
                          if self._region is not None else 0)
            except BaseException:
                client.close()
                raise
            return Session(client, region, self._region)

        def connect_for_lookups() -> Session:
            return Session(Client.connect(socket_path, timeout=connect_timeout, rpc_timeout=lookup_timeout))

        self._link = DaemonLink(f"kvstreamd at {socket_path}", connect, logger, retry_interval=retry_interval)
        self._lookup_link = DaemonLink(f"kvstreamd at {socket_path} (lookups)", connect_for_lookups, logger,
                                       retry_interval=retry_interval)
        self._stats_lock = threading.Lock()
        self._counters: Dict[str, float] = {}  # GUARDED_BY(_stats_lock); reset by get_stats
        self._totals: Dict[str, float] = {}  # GUARDED_BY(_stats_lock); never reset (status())
        # Submitted this step, sent at on_schedule_end (scheduler thread, under vLLM's manager lock).
        self._pending_loads: List[TransferJob] = []
        self._pending_stores: List[TransferJob] = []
        # Results from the I/O threads, a batch's with its failed loads; get_finished_jobs drains it
        # (deque appends are thread-safe; a batch's keys turn MISS before vLLM sees its results).
        self._finished: "deque[Tuple[List[JobResult], List[OffloadKey]]]" = deque()
        self._in_flight = 0  # jobs sent and not finished; GUARDED_BY(_idle)
        self._idle = threading.Condition()
        # One thread each, so that a step's loads never wait behind a store blocked on staging.
        self._loader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kvstream-vllm-load")
        self._storer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kvstream-vllm-store")
        self._lookups = _Lookups(self)
        self._link.connect_now()
        self._lookup_link.connect_now()
        logger.info("kvstream: vLLM tier '%s' on %s, namespace %s, %d rows of %d bytes, %s", tier_type, socket_path,
                    self._namespace, self._rows, self._row,
                    f"zero copy ({self._region.path})" if self._region is not None else "copying through the arena")

    # -- vLLM's interface (scheduler thread, under the manager's lock) ----------------------------

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        found = self._lookups.lookup(key, req_context)
        if found is None:
            return LookupResult.RETRY
        return LookupResult.HIT if found else LookupResult.MISS

    def submit_load(self, job_metadata: TransferJob) -> None:
        self._pending_loads.append(job_metadata)

    def submit_store(self, job_metadata: TransferJob) -> None:
        self._pending_stores.append(job_metadata)

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        self._send()
        self._lookups.flush()

    def get_finished_jobs(self) -> Iterable[JobResult]:
        results: List[JobResult] = []
        while self._finished:
            batch, failed_loads = self._finished.popleft()
            if failed_loads:
                self._lookups.mark_miss(failed_loads)
            results += batch
        return results

    def has_pending_work(self) -> bool:
        with self._idle:
            in_flight = self._in_flight
        return bool(in_flight or self._finished or self._pending_loads or self._pending_stores)

    def on_request_finished(self, req_context: ReqContext) -> None:
        self._lookups.cleanup(req_context.req_id)

    def drain_jobs(self) -> None:
        """Sends what this step submitted and waits until every job has finished, i.e. the daemon
        no longer touches its rows; their results stay queued for get_finished_jobs."""
        self._send()
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0)

    def shutdown(self) -> None:
        self.drain_jobs()
        self._lookups.shutdown()
        self._loader.shutdown(wait=True)
        self._storer.shutdown(wait=True)
        self._link.close()
        self._lookup_link.close()
        if self._region is not None:
            self._region.close()
        if self._own_view:
            self._bytes.release()

    @classmethod
    def build_metric_definitions(cls, extra_config: Dict[str, Any]) -> Dict[str, OffloadingMetricMetadata]:
        return {
            METRIC_PREFIX + "loaded_bytes": OffloadingCounterMetadata(documentation="Bytes loaded from kvstreamd."),
            METRIC_PREFIX + "stored_bytes": OffloadingCounterMetadata(documentation="Bytes staged in kvstreamd."),
            METRIC_PREFIX + "copied_bytes": OffloadingCounterMetadata(
                documentation="Bytes copied in Python (0 when the primary tier is handed over)."),
            METRIC_PREFIX + "failed_keys": OffloadingCounterMetadata(
                documentation="Chunks a load or store could not move.", labelnames=("operation",)),
            METRIC_PREFIX + "retrieves": OffloadingCounterMetadata(documentation="Daemon retrieves (one per step)."),
            METRIC_PREFIX + "dropped_keys": OffloadingCounterMetadata(
                documentation="Chunks a store left out because the daemon's staging was full."),
            METRIC_PREFIX + "recomputed_keys": OffloadingCounterMetadata(
                documentation="Hit chunks a lookup answered MISS: recomputing them was faster than loading."),
        }

    def get_stats(self) -> Any:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadingConnectorStats

        with self._stats_lock:
            counters, self._counters = self._counters, {}
        if not counters:
            return None
        stats = OffloadingConnectorStats()
        for name, value in counters.items():
            metric, _, operation = name.partition(":")
            stats.increase_counter(METRIC_PREFIX + metric, value, (operation,) if operation else ())
        return stats

    def config_info(self) -> Dict[str, Any]:
        return {}

    def status(self) -> Dict[str, Any]:
        """What this tier has done since it started (bytes, failures, whether zero copy serves)."""
        with self._stats_lock:
            totals = dict(self._totals)
        return {"zero_copy": self._region is not None, "connected": self._link.connected,
                "namespace": self._namespace, **{k: totals.get(k, 0) for k in (
                    "loaded_bytes", "stored_bytes", "copied_bytes", "retrieves", "failed_keys:load",
                    "failed_keys:store", "failed_keys:durable", "dropped_keys", "recomputed_keys")}}

    # -- the I/O ----------------------------------------------------------------------------------

    def _name(self, key: OffloadKey) -> str:
        return f"{self._namespace}/{bytes(key).hex()}"

    def _count(self, name: str, value: float) -> None:
        if value:
            with self._stats_lock:
                self._counters[name] = self._counters.get(name, 0) + value
                self._totals[name] = self._totals.get(name, 0) + value

    def _send(self) -> None:
        """Hands this step's loads and stores to the I/O threads, one batch each."""
        for pending, executor, run in ((self._pending_loads, self._loader, self._load),
                                       (self._pending_stores, self._storer, self._store)):
            if not pending:
                continue
            jobs = list(pending)
            pending.clear()
            with self._idle:
                self._in_flight += len(jobs)
            try:
                batch = batch_of(jobs, self._chunk_tokens)
                executor.submit(self._run, batch, run)
            except Exception as e:  # noqa: BLE001 - a bad job or a shut-down executor: fail, never raise into vLLM
                logger.error("kvstream: could not send %d vLLM jobs: %s", len(jobs), e)
                self._finish(batch_of_failed(jobs), [False] * sum(len(j.keys) for j in jobs), 0.0)

    def _run(self, batch: Batch, run: Callable[[Session, Batch], List[bool]]) -> None:
        """On an I/O thread: moves the batch and reports one JobResult per job. A failed daemon call
        fails its chunks (kvstream.transfer; DaemonLink.call's rule drops the session or keeps it)."""
        start = time.monotonic()
        ok = [False] * len(batch.keys)
        session = self._link.session()
        if session is None:
            logger.debug("kvstream: no daemon; %d chunks fail", len(batch.keys))
        else:
            try:
                self._check_rows(batch)
                ok = run(session, batch)
            except Exception as e:  # noqa: BLE001 - a bad job fails, never the engine
                logger.exception("kvstream: a step of %d chunks failed: %s", len(batch.keys), e)
        self._finish(batch, ok, time.monotonic() - start)

    def _finish(self, batch: Batch, ok: Sequence[bool], seconds: float) -> None:
        per_job: List[List[bool]] = [[] for _ in batch.jobs]
        dropped = [0] * len(batch.jobs)
        for i, (owner, good) in enumerate(zip(batch.owners, ok)):
            per_job[owner].append(good)
            dropped[owner] += i in batch.dropped
        failed_loads: List[OffloadKey] = []
        results: List[JobResult] = []
        for job, flags, job_dropped in zip(batch.jobs, per_job, dropped):
            keys = list(job.keys)
            good = [k for k, f in zip(keys, flags) if f]
            success = len(good) == len(keys)
            if job.is_promotion and not success:
                failed_loads += [k for k, f in zip(keys, flags) if not f]
            # A chunk the daemon dropped (staging full) fails its store job (back-pressure) but is no failed key.
            self._count("dropped_keys", job_dropped)
            self._count("failed_keys:load" if job.is_promotion else "failed_keys:store",
                        len(keys) - len(good) - job_dropped)
            results.append(JobResult(
                job_id=job.job_id, success=success,
                successful_keys=tuple(good) if job.is_promotion and not success and good else None,
                transfer_time=seconds, transfer_bytes=len(good) * self._row))
        self._finished.append((results, failed_loads))
        with self._idle:
            self._in_flight -= len(batch.jobs)
            self._idle.notify_all()

    def _check_rows(self, batch: Batch) -> None:
        for row in batch.rows:
            if not 0 <= row < self._rows:
                raise ValueError(f"vLLM chunk id {row} is outside the primary tier's {self._rows} rows")

    def _load(self, session: Session, batch: Batch) -> List[bool]:
        """One retrieve of the step's chunks (of at most the daemon's max_chunks_per_call each), straight
        into the primary rows (or through the arena). No deadline: see the module docstring."""
        report = transfer.read(self._link, session, self._pieces(batch))
        ok = [self._whole(r) for r in report.results]
        self._count("retrieves", report.calls)
        self._count("loaded_bytes", sum(ok) * self._row)
        self._count("copied_bytes", report.copied_bytes)
        _log_failures(report.results)
        return ok

    def _store(self, session: Session, batch: Batch) -> List[bool]:
        """One persist of the step's chunks the daemon does not hold yet (of at most its
        max_chunks_per_call each), read by the daemon out of the primary rows; a chunk is done once
        staged (out of its row: vLLM may reuse it)."""
        names = [self._name(k) for k in batch.keys]
        # On the lookup connection: its deadline (lookup_timeout) must never drop the data session,
        # whose reads may be landing in the primary rows.
        lookups = self._lookup_link.session()
        found = None if lookups is None else self._lookup_link.call(
            lookups, f"lookup of {len(names)} chunks", lambda: lookups.client.lookup(names))
        if found is None:
            return [False] * len(batch.keys)
        keep = [i for i, e in enumerate(found[0]) if not self._holds(e)]  # vLLM asks to skip the others
        ok = [True] * len(batch.keys)
        if keep:
            report = transfer.write(self._link, session, self._pieces(batch, keep))
            for r in report.staged:
                ok[keep[r.index]] = r.ok
                if r.status is transfer.Status.DROPPED:
                    batch.dropped.add(keep[r.index])
            staged = [r.index for r in report.staged if r.ok]
            self._count("stored_bytes", len(staged) * self._row)
            self._count("copied_bytes", report.copied_bytes)
            report.written.add_done_callback(lambda f: self._note_unwritten(staged, f.result()))
        return ok

    def _pieces(self, batch: Batch, indices: Optional[Sequence[int]] = None) -> List[transfer.Piece]:
        """The batch's chunks (all, or `indices`) as pieces: their rows of the primary tier."""
        chosen = range(len(batch.keys)) if indices is None else indices
        return [transfer.Piece(self._name(batch.keys[i]), self._base + batch.rows[i] * self._row, self._row,
                               batch.depths[i] if batch.depths else 0)
                for i in chosen]

    def _note_unwritten(self, staged: List[int], written: List[bool]) -> None:
        """Counts staged chunks that then reached no tier (vLLM already has them as stored), as
        failed_keys:durable: not written, so not durable either."""
        failed = sum(1 for i in staged if not written[i])
        if failed:
            logger.warning("kvstream: %d of %d staged chunks reached no tier", failed, len(staged))
            self._count("failed_keys:durable", failed)

    def _whole(self, result: transfer.PieceResult) -> bool:
        """A chunk landed whole: OK and exactly one row (a shorter chunk under the key is a miss)."""
        return result.ok and result.size == self._row

    def _holds(self, entry: Any) -> bool:
        """A lookup entry of a whole row (a chunk of another size under the key is not ours)."""
        return entry.present and entry.size == self._row

    def _present(self, keys: List[OffloadKey], req_context: Optional[ReqContext] = None) -> List[bool]:
        """On the lookup thread: which of a request's keys to load, each locked for the lease: those
        the daemon holds, up to the verdict's cut (a failed lookup: misses)."""
        session = self._lookup_link.session()
        if session is None or not keys:
            return [False] * len(keys)
        names = [self._name(k) for k in keys]
        chunk_of, start = self._chunks(keys, req_context)
        found = transfer.lookup(self._lookup_link, session, names, chunk_of=chunk_of, holds=self._holds,
                                lock_seconds=self._lease, verdict=self._verdict, chunk_tokens=self._chunk_tokens,
                                start_tokens=start, model=self._model, what=f"lookup of {len(keys)} chunks")
        if found is None:
            return [False] * len(keys)
        self._count("recomputed_keys", sum(found.held_names) - sum(found.loads(i) for i in range(len(keys))))
        return [found.loads(i) for i in range(len(keys))]

    def _chunks(self, keys: List[OffloadKey], req_context: Optional[ReqContext]) -> Tuple[List[int], int]:
        """Each key's chunk index from the first of the lookup, and the tokens before that chunk:
        from the end tokens the scheduler recorded (ReqContext), else the keys' order from 0."""
        tokens = self._chunk_tokens
        ends = [req_context.get_offload_key_position(k) for k in keys] if req_context is not None else []
        if tokens <= 0 or not ends or any(e is None for e in ends):
            return list(range(len(keys))), 0
        first = min(-(-e // tokens) for e in ends)  # chunks up to and including the earliest key
        return [-(-e // tokens) - first for e in ends], (first - 1) * tokens


def _log_failures(results: Sequence[transfer.PieceResult]) -> None:
    """One line per load with failed chunks: how many, and the first one's reason."""
    failed = [r for r in results if not r.ok]
    if failed:
        misses = sum(1 for r in failed if r.status is transfer.Status.MISS)
        logger.info("kvstream: %d of %d chunks not loaded (%d misses; first: %s %s); vLLM recomputes them",
                    len(failed), len(results), misses, failed[0].status.value, failed[0].message)


__all__ = ["KVStreamTier"]
