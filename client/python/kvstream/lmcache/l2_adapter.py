"""KVStreamL2Adapter: an L2 adapter of LMCache's multi-process mode (`lmcache server`) over kvstreamd.

LMCache loads it with its own `plugin` adapter type:

    lmcache server ... --l2-adapter '{"type": "plugin", "module_path": "kvstream.lmcache.l2_adapter",
        "class_name": "KVStreamL2Adapter", "adapter_params": {"socket": "/run/kvstream/kvstreamd.sock"}}'

The plugin factory finds KVStreamL2AdapterConfig by its name (class_name + "Config"), builds it from
`adapter_params` and passes the L1 memory descriptor. The adapter attaches ONE kvstreamd session
(the MP server is one process serving every model and rank) and maps the interface onto it:

- lookup-and-lock: one daemon Lookup with `lock_seconds` (the lease, `lock_seconds` param); a bit is
  set for each key present and locked. Unlock: one daemon Unlock; an unlock that fails is retried
  until it succeeds, the daemon restarted (its locks are gone) or the lease has run out.
- load: one daemon retrieve per task (per max_chunks_per_call keys; objects in the shared L1 pool
  and objects copied through the arena go in separate calls), which the daemon batches as one
  step; load tasks waiting together (requests LMCache prefetches at once) share their retrieves and
  are answered apart. A key is loaded when the daemon returns exactly the MemoryObj's get_size() bytes.
- store: one Lookup (keys the daemon already holds are skipped) and one persist per task; the task
  succeeds once every chunk is written to its tiers. Chunks go out by their index in their row
  (every row's chunk 0, then chunk 1, ...); a chunk the daemon drops because its staging is full
  is counted (store_dropped), not logged, and fails the task (LMCache keeps it in L1).
- load or recompute: a lookup is kvstream.transfer.lookup with the adapter's verdict. LMCache lists
  a request's keys row by row (a row per kv rank and object group); the daemon is asked chunk by
  chunk (chunk 0 of every row, then chunk 1, ...), so its cumulative estimate covers every row, and
  chunks past the cut answer 0 in every row (their locks released; lookup_recomputed counts them).
  `chunk_tokens` (256) must be the server's --chunk-size; the model's shape comes from its
  config.json (ObjectKey.model_name) or `model_shape`; the server does not say the engine's GPUs,
  so recompute_tflops is the engine's total.
- delete: an evict per key. Capacity and eviction are the daemon's own (max_capacity_bytes 0 by
  default: LMCache runs no global eviction on this adapter).

A stored chunk is the MemoryObj's raw bytes (like LMCache's fs adapter): the caller allocates the
load buffers, so no header is needed. Keys: "<key_prefix>/<model>@<kv_rank hex>@<object group hex>
@<chunk hash hex>[@<cache_salt>]", the fields that make ObjectKeys distinct (the salt only when set).

Data path (which one is used: report_status()["zero_copy"]):
- zero copy: LMCache's MP server allocates its L1 pool (MixedMemoryAllocator, non-lazy) as POSIX
  shared memory, /dev/shm/lmcache_l1_pool_<pid> (or the --shm-name); the adapter finds the file
  behind the L1 descriptor's address in /proc/self/maps and hands it to the daemon as a client region
  (Client.add_region). Retrieves then land in the MemoryObjs by O_DIRECT and persists are copied
  out of them by the daemon: no byte passes through Python.
- copy (a lazy or anonymous/pinned L1 pool, objects outside it, the region refused by the daemon's
  arena budget, or zero_copy false): one copy per chunk between the session arena and the MemoryObj
  (a memmove without the GIL). Both paths are kvstream.transfer's, chosen per object. Loads copy each chunk as it lands, while the others of the
  retrieve are still in flight (per-chunk completion). A task larger than the arena goes in waves
  (one retrieve / persist per wave): size arena_bytes to the largest batch to keep one per task.

Threads: submit_* only enqueue and return a task id; three worker threads (store, lookup+unlock,
load) talk to the daemon, record results under a lock and signal three distinct eventfds. A daemon
that is down or restarting gives failed stores and all-zero bitmaps, never an exception into
LMCache's controller threads; the adapter reattaches by itself (DaemonLink) and hands the L1 region
over again.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from lmcache.lmcache_native import Bitmap
from lmcache.logging import init_logger
from lmcache.v1.distributed.api import ObjectKey
from lmcache.v1.distributed.internal_api import L2StoreResult
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface, L2TaskId

from .. import transfer
from ..client import Client
from ..daemon_link import DaemonLink, Session
from ..errors import KVStreamError
from ..verdict import Verdict
from ..plugin_settings import DEFAULT_SOCKET
from .l2_config import KVStreamL2AdapterConfig
from .shared_pool import SharedPool, pinned_by_a_device

logger = init_logger(__name__)

ADAPTER_MODULE = "kvstream.lmcache.l2_adapter"
ADAPTER_CLASS = "KVStreamL2Adapter"
SESSION_MODEL = "lmcache-mp"  # the session's name in the daemon's stats



class _LoadTask:
    """A submitted load task, kept as data so that the load worker can put several in one retrieve."""

    __slots__ = ("task_id", "keys", "objects")

    def __init__(self, task_id: L2TaskId, keys: List[ObjectKey], objects: List[Any]) -> None:
        self.task_id, self.keys, self.objects = task_id, keys, objects

def l2_adapter_spec(socket: str = DEFAULT_SOCKET, **params: Any) -> Dict[str, Any]:
    """The --l2-adapter JSON object (as a dict) that loads this adapter through LMCache's plugin type."""
    return {"type": "plugin", "module_path": ADAPTER_MODULE, "class_name": ADAPTER_CLASS,
            "adapter_params": {"socket": socket, **params}}


def object_key_name(key: ObjectKey, prefix: str = "lmcache") -> str:
    """The daemon key of an ObjectKey: stable across processes, distinct for distinct ObjectKeys
    (model names and salts cannot contain '@', so the fields split unambiguously)."""
    name = f"{prefix}/{key.model_name}@{key.kv_rank:#010x}@{key.object_group_id:x}@{key.chunk_hash.hex()}"
    return f"{name}@{key.cache_salt}" if key.cache_salt else name


def chunk_positions(keys: Sequence[ObjectKey]) -> List[int]:
    """Each key's chunk index in its request: its position among the keys of its row (model, kv
    rank, object group, salt), as LMCache lists a request's rows one after another."""
    seen: Dict[Tuple[str, int, int, str], int] = {}
    positions = []
    for k in keys:
        row = (k.model_name, k.kv_rank, k.object_group_id, k.cache_salt)
        positions.append(seen.get(row, 0))
        seen[row] = positions[-1] + 1
    return positions


def _bitmap(n: int, hits: Sequence[int]) -> Bitmap:
    bitmap = Bitmap(n)
    for i in hits:
        bitmap.set(i)
    return bitmap


class KVStreamL2Adapter(L2AdapterInterface):
    """LMCache L2AdapterInterface over kvstreamd. Thread-safe; never raises into the controllers."""

    def __init__(self, config: "KVStreamL2AdapterConfig | Dict[str, Any]", l1_memory_desc: Any = None) -> None:
        if not isinstance(config, KVStreamL2AdapterConfig):
            config = KVStreamL2AdapterConfig.from_dict(dict(config or {}))
        super().__init__(max_capacity_bytes=config.max_capacity_bytes)
        self.config = config
        self._store_efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._lookup_efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._load_efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._lock = threading.Lock()
        self._next_id: L2TaskId = 0
        self._stores: Dict[L2TaskId, L2StoreResult] = {}
        self._lookups: Dict[L2TaskId, Bitmap] = {}
        self._loads: Dict[L2TaskId, Bitmap] = {}
        self._counts = {"stored": 0, "store_failed": 0, "store_dropped": 0, "lookup_hits": 0, "lookup_misses": 0,
                        "lookup_recomputed": 0, "loaded": 0, "load_failed": 0, "unlock_retries": 0}
        self._pending_unlocks: List[Tuple[List[str], float]] = []  # (names, give up at), lookup worker only
        self._closed = False

        self._l1: Optional[SharedPool] = None
        if config.zero_copy and l1_memory_desc is not None:
            self._l1 = SharedPool.find(int(l1_memory_desc.ptr), int(l1_memory_desc.size))
        c = config
        where = f"kvstreamd on {c.socket} (LMCache L2 adapter)"
        self.link = DaemonLink(where, self._connect, logger, retry_interval=c.retry_interval)
        self.verdict = Verdict(c.recompute, "LMCache L2 adapter", log=logger)

        self._queues: Dict[str, "queue.Queue[Optional[Callable[[], None]]]"] = {}
        self._workers: List[threading.Thread] = []
        for name in ("store", "lookup", "load"):
            q: "queue.Queue[Optional[Callable[[], None]]]" = queue.Queue()
            self._queues[name] = q
            t = threading.Thread(target=self._work, args=(name, q), name=f"kvstream-l2-{name}", daemon=True)
            t.start()
            self._workers.append(t)
        self.link.connect_now()  # now if the daemon is up; otherwise say so once and retry later
        logger.info("kvstream: L2 adapter on %s, L1 pool %s", c.socket,
                    f"shared with the daemon ({self._l1.path})" if self._l1 else "copied through the arena")

    # -- the session --------------------------------------------------------------------------

    def _connect(self) -> Session:
        c = self.config
        client = Client.attach(c.socket, model=SESSION_MODEL, rank=0, world_size=1,
                               arena_bytes=c.arena_bytes if self._l1 is None else min(c.arena_bytes, 16 << 20),
                               timeout=c.connect_timeout, rpc_timeout=c.lookup_timeout)
        if self._l1 is None:
            return Session(client)
        try:
            return Session(client, client.add_region(self._l1.fd, self._l1.size, device_pinned=pinned_by_a_device()),
                           self._l1)
        except KVStreamError as e:  # e.g. over sessions.arena_budget: the copy path serves
            logger.warning("kvstream: the L1 pool (%d bytes) cannot be handed to kvstreamd (%s); chunks are "
                           "copied through the session arena", self._l1.size, e)
            client.close()
        return Session(Client.attach(c.socket, model=SESSION_MODEL, rank=0, world_size=1, arena_bytes=c.arena_bytes,
                                     timeout=c.connect_timeout, rpc_timeout=c.lookup_timeout))

    @property
    def zero_copy(self) -> bool:
        """True while the live session reads into and persists from the L1 pool in place."""
        session = self.link.session()
        return session is not None and session.region != 0

    def _names(self, keys: Sequence[ObjectKey]) -> List[str]:
        return [object_key_name(k, self.config.key_prefix) for k in keys]

    @staticmethod
    def _pieces(names: List[str], objects: Sequence[Any], indices: Iterable[int],
                depths: Optional[Sequence[int]] = None) -> List[transfer.Piece]:
        """The MemoryObjs as pieces: in the L1 pool when the session holds it (kvstream.transfer)."""
        return [transfer.Piece(names[i], objects[i].data_ptr, objects[i].get_size(), depths[i] if depths else 0)
                for i in indices]

    # -- workers ------------------------------------------------------------------------------

    def _submit(self, worker: str, run: Callable[[L2TaskId], None]) -> L2TaskId:
        with self._lock:
            task_id = self._next_id
            self._next_id += 1
        self._queues[worker].put(lambda: run(task_id))
        return task_id

    def _work(self, name: str, q: "queue.Queue[Any]") -> None:
        while True:
            timeout = self.config.retry_interval if name == "lookup" and self._pending_unlocks else None
            try:
                job = q.get(timeout=timeout)
            except queue.Empty:
                job = self._retry_unlocks
            if job is None:
                return
            stop = False
            if isinstance(job, _LoadTask):
                # Every load task waiting now goes into the same retrieve: one daemon step for the
                # requests LMCache prefetches at once (step batching), answered per task.
                tasks = [job]
                while True:
                    try:
                        more = q.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    tasks.append(more)
                job = lambda tasks=tasks: self._load_tasks(tasks)  # noqa: E731
            try:
                job()
            except BaseException as e:  # noqa: BLE001 - jobs record their own failures; the worker survives
                logger.error("kvstream: L2 %s worker: %s", name, e)
            if stop:
                return

    def _finish(self, results: str, task_id: L2TaskId, value: Any, efd: int) -> None:
        """Records a task's result in the dict named `results` (looked up under the lock: the pop
        calls replace it) and signals `efd`."""
        with self._lock:
            getattr(self, results)[task_id] = value
        if not self._closed:
            try:
                os.eventfd_write(efd, 1)
            except OSError:
                pass

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                self._counts[k] += v

    # -- event fds ----------------------------------------------------------------------------

    def get_store_event_fd(self) -> int:
        return self._store_efd

    def get_lookup_and_lock_event_fd(self) -> int:
        return self._lookup_efd

    def get_load_event_fd(self) -> int:
        return self._load_efd

    # -- store --------------------------------------------------------------------------------

    def submit_store_task(self, keys: List[ObjectKey], objects: List[Any]) -> L2TaskId:
        keys, objects = list(keys), list(objects)
        return self._submit("store", lambda tid: self._finish("_stores", tid, self._store(keys, objects),
                                                              self._store_efd))

    def pop_completed_store_tasks(self) -> Dict[L2TaskId, L2StoreResult]:
        with self._lock:
            done, self._stores = self._stores, {}
        return done

    def _store(self, keys: List[ObjectKey], objects: List[Any]) -> L2StoreResult:
        if len(keys) != len(objects):
            logger.error("kvstream: store task with %d keys and %d objects", len(keys), len(objects))
            return L2StoreResult(False, 0)
        if not keys:
            return L2StoreResult(True, 0)
        session = self.link.session()
        names = self._names(keys)
        found = self.link.call(session, "lookup", lambda: session.client.lookup(names)) if session else None
        if found is None:
            self._count(store_failed=len(keys))
            return L2StoreResult(False, 0)
        todo = [i for i, e in enumerate(found[0]) if not e.present]  # the daemon keeps what it holds
        if not todo:
            return L2StoreResult(True, 0)
        # One persist per task (waves when the arena cannot stage them all); done once written.
        report = transfer.write(self.link, session, self._pieces(names, objects, todo, chunk_positions(keys)),
                                timeout=self.config.io_timeout)
        stored = [todo[n] for n, written in enumerate(report.written.result()) if written]
        sizes = [objects[i].get_size() for i in stored]
        dropped = report.dropped  # the daemon's staging was full: not stored, and not a failure
        self._count(stored=len(stored), store_dropped=dropped, store_failed=len(todo) - len(stored) - dropped)
        if stored:
            self._notify_keys_stored([keys[i] for i in stored], sizes)
        return L2StoreResult(len(stored) == len(todo), sum(sizes))

    # -- lookup and lock, unlock --------------------------------------------------------------

    def submit_lookup_and_lock_task(self, keys: List[ObjectKey], group_layout_descs: Any = None) -> L2TaskId:
        keys = list(keys)
        return self._submit("lookup", lambda tid: self._finish("_lookups", tid, self._lookup(keys),
                                                               self._lookup_efd))

    def query_lookup_and_lock_result(self, task_id: L2TaskId) -> Optional[Bitmap]:
        with self._lock:
            return self._lookups.pop(task_id, None)

    def _lookup(self, keys: List[ObjectKey]) -> Bitmap:
        session = self.link.session() if keys else None
        hits: List[int] = []
        recomputed = 0
        found = None if session is None else transfer.lookup(
            self.link, session, self._names(keys), chunk_of=chunk_positions(keys),
            holds=lambda e: e.present and e.locked, lock_seconds=self.config.lock_seconds, verdict=self.verdict,
            chunk_tokens=self.config.chunk_tokens, model=keys[0].model_name, what="lookup and lock")
        if found is not None:
            hits = [i for i in range(len(keys)) if found.loads(i)]
            recomputed = sum(1 for i in range(len(keys)) if found.held_names[i]) - len(hits)
        self._count(lookup_hits=len(hits), lookup_misses=len(keys) - len(hits), lookup_recomputed=recomputed)
        return _bitmap(len(keys), hits)

    def submit_unlock(self, keys: List[ObjectKey]) -> None:
        names = self._names(keys)
        if names:
            give_up = time.monotonic() + self.config.lock_seconds  # the lease has ended by then anyway
            self._queues["lookup"].put(lambda: self._unlock(names, give_up))

    def _unlock(self, names: List[str], give_up: float) -> None:
        """REQUIRES: the lookup worker. Unlocks, or keeps the keys for a retry."""
        session = self.link.session()
        if session is not None and self.link.call(session, "unlock", lambda: session.client.unlock(names)) is not None:
            return
        if time.monotonic() < give_up:
            self._pending_unlocks.append((names, give_up))

    def _retry_unlocks(self) -> None:
        pending, self._pending_unlocks = self._pending_unlocks, []
        self._count(unlock_retries=len(pending))
        for names, give_up in pending:
            self._unlock(names, give_up)

    # -- load ---------------------------------------------------------------------------------

    def submit_load_task(self, keys: List[ObjectKey], objects: List[Any]) -> L2TaskId:
        with self._lock:
            task_id = self._next_id
            self._next_id += 1
        self._queues["load"].put(_LoadTask(task_id, list(keys), list(objects)))
        return task_id

    def _load_tasks(self, tasks: List["_LoadTask"]) -> None:
        keys = [k for t in tasks for k in t.keys]
        objects = [o for t in tasks for o in t.objects]
        # A task whose keys and objects differ in number loads nothing (and spoils no other task).
        valid = all(len(t.keys) == len(t.objects) for t in tasks)
        hits = set(self._load_hits(keys, objects) if valid else [])
        if not valid:
            self._count(load_failed=len(keys))
        start = 0
        for t in tasks:
            n = len(t.keys)
            self._finish("_loads", t.task_id, _bitmap(n, [i - start for i in range(start, start + n) if i in hits]),
                         self._load_efd)
            start += n

    def query_load_result(self, task_id: L2TaskId) -> Optional[Bitmap]:
        with self._lock:
            return self._loads.pop(task_id, None)

    def _load_hits(self, keys: List[ObjectKey], objects: List[Any]) -> List[int]:
        """ONE retrieve of `keys` into `objects` (waves only when the arena cannot hold them); the
        indices loaded: a key loads when exactly its object's get_size() bytes landed."""
        n = len(keys)
        session = self.link.session() if n and n == len(objects) else None
        hits: List[int] = []
        if session is not None:
            sizes = [obj.get_size() for obj in objects]
            report = transfer.read(self.link, session, self._pieces(self._names(keys), objects, range(n)),
                                   timeout=self.config.io_timeout)
            hits = [r.index for r in report.results if r.ok and r.size == sizes[r.index]]
        self._count(loaded=len(hits), load_failed=n - len(hits))
        if hits:
            self._notify_keys_accessed([keys[i] for i in hits])
        return hits

    # -- delete, status, close ----------------------------------------------------------------

    def delete(self, keys: List[ObjectKey]) -> None:
        session = self.link.session() if keys else None
        if session is None:
            return
        names = self._names(keys)
        deleted: List[ObjectKey] = []
        sizes: List[int] = []

        def delete() -> None:
            entries, _ = session.client.lookup(names)
            for key, name, entry in zip(keys, names, entries):
                if entry.present and session.client.evict(key=name).replicas > 0:
                    deleted.append(key)
                    sizes.append(entry.size)

        self.link.call(session, f"delete of {len(keys)} keys", delete)
        if deleted:
            self._notify_keys_deleted(deleted, sizes)

    def report_status(self) -> dict:
        with self._lock:
            counts = dict(self._counts)
        session = self.link.session()
        return {"is_healthy": session is not None, "type": "KVStreamL2Adapter", "socket": self.config.socket,
                "zero_copy": session is not None and session.region != 0,
                "l1_region": self._l1.path if self._l1 else None,
                "workers_alive": all(t.is_alive() for t in self._workers), **counts}

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for q in self._queues.values():
            q.put(None)
        for t in self._workers:
            t.join(self.config.io_timeout)
        self.link.close()
        if self._l1 is not None:
            self._l1.close()
        for fd in (self._store_efd, self._lookup_efd, self._load_efd):
            try:
                os.close(fd)
            except OSError:
                pass
        logger.info("kvstream: L2 adapter closed")
