"""KVStreamTier: kvstreamd as a secondary tier of vLLM's own multi-tier KV offloading.

vLLM (0.33) offloads KV with `spec_name: TieringOffloadingSpec`: a CPU primary tier in one shared
file, /dev/shm/vllm_offload_<engine>.mmap (SharedOffloadRegion, one row per chunk holding every
TP rank's part), and secondary tiers built in the scheduler process, one per engine, from
`secondary_tiers` in kv_connector_extra_config:

    {"type": "KVStreamTier", "module_path": "kvstream.vllm_tier",
     "socket_path": "/run/kvstream/kvstreamd.sock"}

This tier is one kvstreamd session. The primary region goes to the daemon as a client region, so
loads land in the primary rows by O_DIRECT and stores are read out of them by the daemon: no byte
of a chunk passes through Python (`bytes_copied` counts any that do, on the copy path taken only
when the region is not shared memory or `zero_copy` is false). Every load job submitted during a
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

Keys: `<namespace>/<hex of vLLM's OffloadKey>`; the namespace defaults to the model and a digest
of everything that shapes a row (dtype, block and chunk sizes, the parallel layout), so engines of
one model and layout share chunks through the daemon and different layouts never mix.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
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

from . import engine_versions
from .arena_alloc import ArenaAllocator
from .client import Client
from .daemon_link import DaemonLink, Session
from .errors import Code, KVStreamError
from .shared_region import SharedRegion, gpu_present

logger = logging.getLogger(__name__)
engine_versions.check("vllm")

DEFAULT_SOCKET = "/run/kvstream/kvstreamd.sock"
METRIC_PREFIX = "vllm:kv_offload_kvstream_"


@dataclass
class _Batch:
    """One step's loads (or stores): the jobs, in order, and for each chunk its job and key."""

    jobs: List[TransferJob]
    keys: List[OffloadKey]
    rows: List[int]
    owners: List[int]  # index into jobs, per chunk


def _batch(jobs: List[TransferJob]) -> _Batch:
    keys: List[OffloadKey] = []
    rows: List[int] = []
    owners: List[int] = []
    for j, job in enumerate(jobs):
        job_keys = list(job.keys)
        if len(job_keys) != len(job.chunk_ids):
            raise ValueError(f"vLLM job {job.job_id} has {len(job_keys)} keys and {len(job.chunk_ids)} chunk ids")
        keys += job_keys
        rows += [int(c) for c in job.chunk_ids]
        owners += [j] * len(job_keys)
    return _Batch(jobs, keys, rows, owners)


class _Lookups(AsyncLookupManager):
    """vLLM's non-blocking lookup cache: after each step, on its thread, one daemon lookup per
    request with new keys."""

    def __init__(self, tier: "KVStreamTier") -> None:
        super().__init__(tier_type=tier.tier_type)
        self._tier = tier

    def batch_lookup(self, keys: List[OffloadKey], req_context: ReqContext) -> Iterable[bool]:
        return self._tier._present(keys)


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
        self._lease = float(lease_seconds)
        self._namespace = namespace or _default_namespace(offloading_spec, self.block_size_bytes)
        self._row = self.block_size_bytes
        self._rows = len(primary_kv_view)
        view = primary_kv_view.cast("B") if primary_kv_view.ndim != 1 or primary_kv_view.format != "B" else primary_kv_view
        self._bytes = view  # the primary rows as bytes (the copy path's source and target)
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
            return Session(client, region)

        def connect_for_lookups() -> Session:
            return Session(Client.connect(socket_path, timeout=connect_timeout, rpc_timeout=lookup_timeout))

        self._link = DaemonLink(f"kvstreamd at {socket_path}", connect, logger, retry_interval=retry_interval)
        self._lookup_link = DaemonLink(f"kvstreamd at {socket_path} (lookups)", connect_for_lookups, logger,
                                       retry_interval=retry_interval)
        self._arena_lock = threading.Lock()  # the copy path: one thread's rounds at a time use the arena
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
                    "failed_keys:store", "failed_keys:durable")}}

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
                batch = _batch(jobs)
                executor.submit(self._run, batch, run)
            except Exception as e:  # noqa: BLE001 - a bad job or a shut-down executor: fail, never raise into vLLM
                logger.error("kvstream: could not send %d vLLM jobs: %s", len(jobs), e)
                self._finish(_batch_of_failed(jobs), [False] * sum(len(j.keys) for j in jobs), 0.0)

    def _run(self, batch: _Batch, run: Callable[[Session, _Batch], List[bool]]) -> None:
        """On an I/O thread: moves the batch and reports one JobResult per job."""
        start = time.monotonic()
        ok = [False] * len(batch.keys)
        session = self._link.session()
        if session is None:
            logger.debug("kvstream: no daemon; %d chunks fail", len(batch.keys))
        else:
            try:
                ok = run(session, batch)
            except KVStreamError as e:
                # The call ended: the daemon refused it as a whole, or went away (then its I/O
                # into the rows ended with it).
                logger.warning("kvstream: a step of %d chunks failed (%s); vLLM recomputes them", len(batch.keys), e)
                if e.code in (Code.UNAVAILABLE, Code.CANCELLED):
                    self._link.fail(session, e)
            except Exception as e:  # noqa: BLE001 - anything else fails the jobs, never the engine
                logger.exception("kvstream: a step of %d chunks failed: %s", len(batch.keys), e)
        self._finish(batch, ok, time.monotonic() - start)

    def _finish(self, batch: _Batch, ok: Sequence[bool], seconds: float) -> None:
        per_job: List[List[bool]] = [[] for _ in batch.jobs]
        for owner, good in zip(batch.owners, ok):
            per_job[owner].append(good)
        failed_loads: List[OffloadKey] = []
        results: List[JobResult] = []
        for job, flags in zip(batch.jobs, per_job):
            keys = list(job.keys)
            good = [k for k, f in zip(keys, flags) if f]
            success = len(good) == len(keys)
            if job.is_promotion and not success:
                failed_loads += [k for k, f in zip(keys, flags) if not f]
            self._count("failed_keys:load" if job.is_promotion else "failed_keys:store", len(keys) - len(good))
            results.append(JobResult(
                job_id=job.job_id, success=success,
                successful_keys=tuple(good) if job.is_promotion and not success and good else None,
                transfer_time=seconds, transfer_bytes=len(good) * self._row))
        self._finished.append((results, failed_loads))
        with self._idle:
            self._in_flight -= len(batch.jobs)
            self._idle.notify_all()

    def _check_rows(self, batch: _Batch) -> None:
        for row in batch.rows:
            if not 0 <= row < self._rows:
                raise ValueError(f"vLLM chunk id {row} is outside the primary tier's {self._rows} rows")

    def _load(self, session: Session, batch: _Batch) -> List[bool]:
        """One retrieve of the step's chunks (of at most the daemon's max_chunks_per_call each), straight into the
        primary rows (or through the arena)."""
        self._check_rows(batch)
        names = [self._name(k) for k in batch.keys]
        if self._region is not None:
            chunks = [(name, self._region_offset(row), self._row, session.region) for name, row in zip(names, batch.rows)]
            results = []
            per_call = session.client.max_chunks_per_call
            for first in range(0, len(chunks), per_call):
                self._count("retrieves", 1)
                results += session.client.retrieve(chunks[first:first + per_call]).results
            ok = [self._whole(r) for r in results]
            self._count("loaded_bytes", sum(ok) * self._row)
            _log_failures(results)
            return ok
        return self._through_arena(session, batch, names, loading=True)

    def _store(self, session: Session, batch: _Batch) -> List[bool]:
        """One persist of the step's chunks (of at most the daemon's max_chunks_per_call each), read
        by the daemon out of the primary rows; a job is done once its chunks are staged (out of the
        rows: vLLM may reuse them)."""
        self._check_rows(batch)
        missing = self._missing(session, [self._name(k) for k in batch.keys])
        keep = [i for i, m in enumerate(missing) if m]
        if keep:
            part = _Batch(batch.jobs, [batch.keys[i] for i in keep], [batch.rows[i] for i in keep],
                          [batch.owners[i] for i in keep])
            names = [self._name(k) for k in part.keys]
            if self._region is not None:
                chunks = [(name, self._region_offset(row), self._row, session.region)
                          for name, row in zip(names, part.rows)]
                per_call = session.client.max_chunks_per_call
                for first in range(0, len(chunks), per_call):
                    durable = session.client.persist_async(chunks[first:first + per_call], check=False)
                    durable.add_done_callback(self._note_durable)
                self._count("stored_bytes", len(chunks) * self._row)
            else:
                self._through_arena(session, part, names, loading=False)
        return [True] * len(batch.keys)

    def _note_durable(self, future: "concurrent.futures.Future[Any]") -> None:
        """Counts staged chunks that then reached no tier (vLLM already has them as stored)."""
        error = future.exception()
        if error is not None:
            logger.warning("kvstream: staged chunks may not have reached a tier: %s", error)
            return
        results = future.result()
        failed = sum(1 for r in results if not r.ok)
        if failed:
            logger.warning("kvstream: %d of %d staged chunks reached no tier", failed, len(results))
            self._count("failed_keys:durable", failed)

    def _whole(self, result: Any) -> bool:
        """A chunk landed whole: OK and exactly one row (a shorter chunk under the key is a miss)."""
        return result.code == Code.OK and result.size == self._row

    def _holds(self, entry: Any) -> bool:
        """A lookup entry of a whole row (a chunk of another size under the key is not ours)."""
        return entry.present and entry.size == self._row

    def _missing(self, session: Session, names: List[str]) -> List[bool]:
        """Which of the chunks the daemon does not hold yet (a store skips the others, as vLLM asks)."""
        entries, _ = session.client.lookup(names)
        return [not self._holds(e) for e in entries]

    def _region_offset(self, row: int) -> int:
        offset = self._region.offset_of(self._base + row * self._row, self._row) if self._region else None
        if offset is None:
            raise ValueError(f"row {row} is outside the shared region")
        return offset

    def _through_arena(self, session: Session, batch: _Batch, names: List[str], loading: bool) -> List[bool]:
        """The copy path: as many chunks as fit in the arena at a time, copied in Python."""
        with self._arena_lock:
            return self._through_arena_locked(session, batch, names, loading)

    def _through_arena_locked(self, session: Session, batch: _Batch, names: List[str], loading: bool) -> List[bool]:
        allocator = session.allocator
        if allocator is None:
            raise KVStreamError(Code.FAILED_PRECONDITION, "the session has no arena")
        per_round = max(1, min(allocator.capacity // allocator.rounded(self._row), session.client.max_chunks_per_call))
        ok: List[bool] = []
        for first in range(0, len(names), per_round):
            part = range(first, min(first + per_round, len(names)))
            spans = [(allocator.try_allocate(self._row), i) for i in part]
            try:
                if any(offset is None for offset, _ in spans):
                    raise KVStreamError(Code.RESOURCE_EXHAUSTED, "the session arena is in use")
                arena = session.client.arena
                chunks = [(names[i], offset, self._row) for offset, i in spans]
                if loading:
                    results, _ = session.client.retrieve(chunks)
                    self._count("retrieves", 1)
                    for (offset, i), r in zip(spans, results):
                        if self._whole(r):
                            row = batch.rows[i] * self._row
                            self._bytes[row:row + self._row] = arena[offset:offset + self._row]
                    good = [self._whole(r) for r in results]
                    self._count("loaded_bytes", sum(good) * self._row)
                    _log_failures(results)
                else:
                    for offset, i in spans:
                        row = batch.rows[i] * self._row
                        arena[offset:offset + self._row] = self._bytes[row:row + self._row]
                    durable = session.client.persist_async(chunks, check=False)
                    durable.add_done_callback(self._note_durable)
                    good = [True] * len(chunks)
                    self._count("stored_bytes", len(chunks) * self._row)
                self._count("copied_bytes", sum(good) * self._row)
                ok += good
            finally:
                for offset, _ in spans:
                    if offset is not None:
                        allocator.free(offset)
        return ok

    def _present(self, keys: List[OffloadKey]) -> List[bool]:
        """On the lookup thread: which keys the daemon holds, each locked for the lease."""
        session = self._lookup_link.session()
        if session is None:
            return [False] * len(keys)
        try:
            entries, _ = session.client.lookup([self._name(k) for k in keys], lock_seconds=self._lease)
            return [self._holds(e) for e in entries]
        except KVStreamError as e:
            logger.warning("kvstream: a lookup of %d chunks failed (%s); they count as misses", len(keys), e)
            if e.code in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.CANCELLED):
                self._lookup_link.fail(session, e)
            return [False] * len(keys)


def _log_failures(results: Sequence[Any]) -> None:
    """One line per retrieve with failed chunks: how many, and the first one's code and message."""
    failed = [r for r in results if r.code != Code.OK]
    if failed:
        misses = sum(1 for r in failed if r.code == Code.NOT_FOUND)
        logger.info("kvstream: %d of %d chunks not loaded (%d misses; first: %s %s); vLLM recomputes them",
                    len(failed), len(results), misses, Code(failed[0].code).name, failed[0].message)


def _batch_of_failed(jobs: List[TransferJob]) -> _Batch:
    """A batch for jobs that could not even be batched: one owner entry per key."""
    owners = [j for j, job in enumerate(jobs) for _ in job.keys]
    return _Batch(jobs, [k for job in jobs for k in job.keys], [0] * len(owners), owners)


def _default_namespace(spec: Any, row_bytes: int) -> str:
    """The model and a digest of everything that shapes a row, from vLLM's OffloadingConfig."""
    config = getattr(spec, "config", None)
    model = getattr(getattr(config, "model", None), "name", None) or "model"
    parallel = getattr(config, "parallel", None)
    agnostic = bool(getattr(parallel, "is_parallelism_agnostic", False))
    shape = {
        "row_bytes": row_bytes,
        "dtype": str(getattr(getattr(config, "model", None), "dtype", "")),
        "tokens_per_hash": getattr(getattr(config, "cache", None), "tokens_per_hash", None),
        "blocks_per_chunk": getattr(getattr(config, "cache", None), "blocks_per_chunk", None),
        "groups": [repr(g) for g in getattr(config, "groups", ())],
        "layout": [str(getattr(config, n, "")) for n in ("kv_cache_layout", "replicated_layout", "canonical_layout")],
        "parallel": None if agnostic else [getattr(parallel, n, None) for n in (
            "world_size", "tp_size", "pp_size", "pcp_size", "dcp_size")],
    }
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"vllm/{model.replace('/', '_')}/{digest}"


__all__ = ["KVStreamTier"]
