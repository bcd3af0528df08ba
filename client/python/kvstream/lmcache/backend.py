"""KVStreamBackend: an LMCache storage plugin that keeps LMCache's chunks in kvstreamd.

Load it from LMCache's configuration:

    storage_plugins: [kvstream]
    extra_config:
      storage_plugin.kvstream.module_path: kvstream.lmcache
      storage_plugin.kvstream.class_name: KVStreamBackend
      kvstream.socket_path: /run/kvstream/kvstreamd.sock

Each LMCache worker (one per tensor-parallel rank) attaches its own session; the daemon pools the
reads of all sessions into one step. Keys are CacheEngineKey.to_string(). A stored chunk is the
MemoryObj's bytes behind a small self-describing header (chunk_codec), so any process can read it.

Data path: a get reads every key of the call in ONE daemon retrieve into the session arena; as
each chunk lands (the others still in flight) it is copied once into a MemoryObj allocated from
LMCache's LocalCPUBackend. A put takes a reference on each MemoryObj and returns at once; a worker
thread copies the chunks into the arena and persists them (the daemon stages them and writes them
while no read is pending), drops the reference once the daemon has staged the bytes, and calls
`on_complete_callback(key)` once the chunk is durable.

When the daemon is down or restarts, calls report misses and puts are dropped, with loud log
lines, and the backend reconnects by itself (DaemonLink). No exception escapes into LMCache.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch
from lmcache.logging import init_logger
from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryFormat, MemoryObj
from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface

from ..client import CONNECT_TIMEOUT_S, Client
from ..errors import Code, KVStreamError
from ..types import Chunk, LookupEntry
from . import chunk_codec
from .daemon_link import DaemonLink, Session

logger = init_logger(__name__)

DEFAULT_SOCKET = "/run/kvstream/kvstreamd.sock"
SIZE_CACHE_ENTRIES = 1 << 16


class Settings:
    """The plugin's keys in LMCache's extra_config (all optional)."""

    KEYS = {
        "kvstream.socket_path": ("socket_path", str, DEFAULT_SOCKET),
        "kvstream.arena_bytes": ("arena_bytes", int, 1 << 30),  # per session (TP rank)
        "kvstream.io_timeout": ("io_timeout", float, 60.0),  # seconds for one retrieve / persist
        "kvstream.lookup_timeout": ("lookup_timeout", float, 5.0),  # seconds for a lookup / evict
        "kvstream.connect_timeout": ("connect_timeout", float, CONNECT_TIMEOUT_S),
        "kvstream.retry_interval": ("retry_interval", float, 1.0),  # between reconnect attempts
    }

    def __init__(self, extra_config: Optional[Dict[str, Any]]) -> None:
        extra = extra_config or {}
        for key, (attr, cast, default) in self.KEYS.items():
            raw = extra.get(key, default)
            try:
                value = cast(raw)
            except (TypeError, ValueError):
                raise ValueError(f"extra_config {key}: cannot read {raw!r} as {cast.__name__}") from None
            if cast is not str and value <= 0:
                raise ValueError(f"extra_config {key} must be positive, got {raw!r}")
            setattr(self, attr, value)


def extra_config(socket_path: str, **settings: Any) -> Dict[str, Any]:
    """LMCache extra_config entries that load this plugin as storage plugin "kvstream", with the
    daemon's socket and any other Settings by attribute name (e.g. arena_bytes=1 << 30)."""
    by_attr = {attr: key for key, (attr, _, _) in Settings.KEYS.items()}
    unknown = sorted(set(settings) - set(by_attr))
    if unknown:
        raise ValueError(f"unknown kvstream settings {unknown}; known: {sorted(by_attr)}")
    extra: Dict[str, Any] = {
        "storage_plugin.kvstream.module_path": "kvstream.lmcache",
        "storage_plugin.kvstream.class_name": KVStreamBackend.__name__,
        "kvstream.socket_path": socket_path,
    }
    extra.update({by_attr[attr]: value for attr, value in settings.items()})
    return extra


class _PutBatch:
    """Chunks of one batched_submit_put_task call. `finished` and `submitted` (indices) are
    guarded by the backend's lock: a chunk finishes once; a submitted one finishes on its stream."""

    def __init__(self, on_complete: Optional[Callable[[CacheEngineKey], None]]) -> None:
        self.keys: List[CacheEngineKey] = []
        self.objs: List[Optional[MemoryObj]] = []
        self.futures: List["concurrent.futures.Future[bool]"] = []
        self.on_complete = on_complete
        self.finished: Set[int] = set()
        self.submitted: Set[int] = set()


def _release_result(future: "concurrent.futures.Future[Optional[MemoryObj]]") -> None:
    """Drops the reference a prefetched MemoryObj holds (once its read has finished)."""
    obj = future.result()
    if obj is not None:
        obj.ref_count_down()


class KVStreamBackend(StoragePluginInterface):
    """LMCache StoragePluginInterface over kvstreamd. Thread-safe."""

    def __init__(self, dst_device: str = "cpu", config: Any = None, metadata: Any = None,
                 local_cpu_backend: Any = None, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        super().__init__(dst_device=dst_device, config=config, metadata=metadata,
                         local_cpu_backend=local_cpu_backend, loop=loop)
        self.settings = Settings(getattr(config, "extra_config", None))
        role = getattr(metadata, "role", None)
        # The scheduler only looks keys up: it has no LocalCPUBackend to allocate into.
        self.with_session = role != "scheduler" and local_cpu_backend is not None
        s = self.settings
        if self.with_session:
            model = getattr(metadata, "model_name", "") or ""
            rank = int(getattr(metadata, "worker_id", 0) or 0)
            world = int(getattr(metadata, "world_size", 1) or 1)

            def connect() -> Client:
                return Client.attach(s.socket_path, model=model, rank=rank, world_size=world,
                                     arena_bytes=s.arena_bytes, timeout=s.connect_timeout, rpc_timeout=s.lookup_timeout)
            describe = f"kvstreamd on {s.socket_path} (session for {model or 'model'} rank {rank}/{world})"
        else:
            def connect() -> Client:
                return Client.connect(s.socket_path, timeout=s.connect_timeout, rpc_timeout=s.lookup_timeout)
            describe = f"kvstreamd on {s.socket_path} (lookups only, role {role or 'unknown'})"
        self.link = DaemonLink(describe, connect, logger, retry_interval=s.retry_interval)
        self._lock = threading.Lock()
        self._sizes: "collections.OrderedDict[str, int]" = collections.OrderedDict()  # payload sizes seen in lookups
        self._put_tasks: Set[CacheEngineKey] = set()  # keys queued, being staged or being written
        self._prefetched: Dict[CacheEngineKey, "concurrent.futures.Future[Optional[MemoryObj]]"] = {}
        self._puts: "queue.Queue[Optional[_PutBatch]]" = queue.Queue()
        self._put_worker = threading.Thread(target=self._put_loop, name="kvstream-put", daemon=True)
        self._put_worker.start()
        self._closed = False
        self.link.connect_now()  # connect now if the daemon is up; otherwise say so once and retry later

    def __str__(self) -> str:
        return "KVStreamBackend"

    # -- lookups -----------------------------------------------------------------------------

    def contains(self, key: CacheEngineKey, pin: bool = False) -> bool:
        return self.batched_contains([key], pin) == 1

    def batched_contains(self, keys: List[CacheEngineKey], pin: bool = False) -> int:
        """Leading keys present, from ONE daemon lookup."""
        return self._lookup_prefix(keys)

    async def batched_async_contains(self, lookup_id: str, keys: List[CacheEngineKey], pin: bool = False) -> int:
        return await asyncio.get_running_loop().run_in_executor(None, self.batched_contains, keys, pin)

    def exists_in_put_tasks(self, key: CacheEngineKey) -> bool:
        with self._lock:
            return key in self._put_tasks

    def _lookup_prefix(self, keys: Sequence[CacheEngineKey]) -> int:
        session = self.link.session() if keys else None
        if session is None:
            return 0
        found = self._lookup(session, [k.to_string() for k in keys])
        return found[1] if found is not None else 0

    def _lookup(self, session: Session, names: List[str]) -> Optional[Tuple[List[LookupEntry], int]]:
        """One daemon lookup (entries, prefix hits), remembering the sizes of the keys present.
        None when the call failed: the session is then dropped (a miss, never an exception)."""
        try:
            entries, prefix = session.client.lookup(names)
        except Exception as e:  # noqa: BLE001 - the daemon went away
            self.link.fail(session, e)
            return None
        with self._lock:
            for name, entry in zip(names, entries):
                if entry.present:
                    self._remember_size(name, entry.size)
        return entries, prefix

    def _remember_size(self, name: str, size: int) -> None:
        self._sizes[name] = size
        self._sizes.move_to_end(name)
        if len(self._sizes) > SIZE_CACHE_ENTRIES:
            self._sizes.popitem(last=False)

    # -- gets --------------------------------------------------------------------------------

    def get_blocking(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        return self.batched_get_blocking([key])[0]

    def batched_get_blocking(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        """Every key in ONE daemon retrieve (keys prefetched for the step are taken from there).

        Each returned MemoryObj holds one reference for the caller; None for a key that could not
        be read (miss, daemon down, no CPU memory)."""
        out: List[Optional[MemoryObj]] = [None] * len(keys)
        waiting: List[Tuple[int, "concurrent.futures.Future[Optional[MemoryObj]]"]] = []
        rest: List[int] = []
        with self._lock:
            for i, key in enumerate(keys):
                future = self._prefetched.pop(key, None)
                if future is not None:
                    waiting.append((i, future))
                else:
                    rest.append(i)
        for i, future in waiting:
            out[i] = future.result()
            if out[i] is None:  # the prefetch could not read it (e.g. no CPU memory then): try now
                rest.append(i)
        if rest:
            rest.sort()
            for i, obj in zip(rest, self._read([keys[i] for i in rest])):
                out[i] = obj
        return out

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[CacheEngineKey],
                                       transfer_spec: Any = None) -> List[MemoryObj]:
        """The leading keys that could be read, from one retrieve on an executor thread. Each
        returned MemoryObj holds one reference and no pin, as LocalCPUBackend returns them: the
        engine drops chunks it does not use with ref_count_down alone (a pinned one would stay
        allocated until LMCache's pin timeout)."""
        objs = await asyncio.get_running_loop().run_in_executor(None, self.batched_get_blocking, list(keys))
        leading: List[MemoryObj] = []
        for obj in objs:
            if obj is None:
                break
            leading.append(obj)
        for obj in objs[len(leading):]:
            if obj is not None:
                obj.ref_count_down()
        return leading

    def prefetch(self, keys: Sequence[CacheEngineKey]) -> int:
        """Starts ONE retrieve for every key not already prefetched and returns at once.

        The gets that follow (batched_get_blocking) take these keys' MemoryObjs as they land.
        Step batching: a connector calls this with the chunks of all requests of a step before
        LMCache retrieves them request after request. Returns the number of keys submitted."""
        wanted = dict.fromkeys(keys)
        with self._lock:
            # What an earlier step prefetched and nobody took, and this step does not want, is stale.
            stale = [f for k, f in self._prefetched.items() if k not in wanted]
            self._prefetched = {k: f for k, f in self._prefetched.items() if k in wanted}
            fresh = [k for k in wanted if k not in self._prefetched]
            futures = [concurrent.futures.Future() for _ in fresh]
            self._prefetched.update(zip(fresh, futures))
        for future in stale:
            future.add_done_callback(_release_result)
        if not fresh:
            return 0

        def run() -> None:
            try:
                self._read(fresh, futures)
            except BaseException as e:  # noqa: BLE001 - never leave a get waiting
                logger.error("kvstream: prefetch failed: %s", e)
            for f in futures:
                if not f.done():
                    f.set_result(None)

        try:
            threading.Thread(target=run, name="kvstream-prefetch", daemon=True).start()
        except RuntimeError as e:  # no thread: the gets read these keys themselves
            logger.error("kvstream: cannot start a prefetch: %s", e)
            with self._lock:
                for key in fresh:
                    self._prefetched.pop(key, None)
            for f in futures:
                f.set_result(None)
            return 0
        return len(fresh)

    def release_prefetched(self) -> int:
        """Drops prefetched chunks no get took (e.g. a request the step did not load after all)."""
        with self._lock:
            stale, self._prefetched = self._prefetched, {}
        for future in stale.values():
            future.result()  # waits for its read to finish
            _release_result(future)
        return len(stale)

    def _read(self, keys: Sequence[CacheEngineKey],
              futures: Optional[Sequence["concurrent.futures.Future[Optional[MemoryObj]]"]] = None
              ) -> List[Optional[MemoryObj]]:
        """Reads `keys` in as few retrieves as the arena allows (one when it holds them all)."""
        out: List[Optional[MemoryObj]] = [None] * len(keys)

        def deliver(i: int, obj: Optional[MemoryObj]) -> None:
            out[i] = obj
            if futures is not None:
                futures[i].set_result(obj)

        session = self.link.session()
        if session is None or session.allocator is None or not keys:
            for i in range(len(keys)):
                deliver(i, None)
            return out
        names = [k.to_string() for k in keys]
        sizes = self._payload_sizes(session, names)
        pending = [i for i, size in enumerate(sizes) if size]
        for i, size in enumerate(sizes):
            if not size:
                deliver(i, None)
        allocator = session.allocator
        while pending:
            # As many chunks as the arena holds now: wait for room only for the first one.
            wave: List[Tuple[int, int]] = []
            for i in pending:
                if wave:
                    offset = allocator.try_allocate(sizes[i])
                else:
                    offset = allocator.allocate(sizes[i], timeout=self.settings.io_timeout)
                if offset is None:
                    break
                wave.append((i, offset))
            if not wave:
                if not allocator.closed:
                    logger.error("kvstream: no room for a chunk of %d bytes in the %d-byte arena within %g s "
                                 "(kvstream.arena_bytes)", sizes[pending[0]], allocator.capacity,
                                 self.settings.io_timeout)
                break
            pending = pending[len(wave):]
            if not self._read_wave(session, names, sizes, wave, deliver, prefetch=futures is not None):
                break
        for i in pending:
            deliver(i, None)
        return out

    def _read_wave(self, session: Session, names: List[str], sizes: List[Optional[int]],
                   wave: List[Tuple[int, int]], deliver: Callable[[int, Optional[MemoryObj]], None],
                   prefetch: bool) -> bool:
        allocator = session.allocator
        assert allocator is not None
        chunks = [Chunk(names[i], offset, allocator.rounded(sizes[i] or 0)) for i, offset in wave]
        delivered = [False] * len(wave)

        def on_chunk(r: Any) -> None:
            i, offset = wave[r.index]
            obj = self._to_memory_obj(session, names[i], offset, r.size, on_demand=not prefetch) if r.ok else None
            allocator.free(offset)
            delivered[r.index] = True
            deliver(i, obj)

        try:
            session.client.retrieve(chunks, on_chunk=on_chunk, timeout=self.settings.io_timeout)
            if not all(delivered):  # a chunk without completion may still be landing: drop the arena
                raise KVStreamError(Code.DATA_LOSS, "kvstreamd ended a retrieve without completing every chunk")
        except Exception as e:  # noqa: BLE001 - daemon gone or call refused: misses
            logger.error("kvstream: retrieve of %d chunks failed: %s", len(chunks), e)
            self.link.fail(session, e)  # its arena is dropped with it: reads may still land there
            for n, (i, _) in enumerate(wave):
                if not delivered[n]:
                    deliver(i, None)
            return False
        return True

    def _payload_sizes(self, session: Session, names: List[str]) -> List[Optional[int]]:
        """Payload sizes of the keys: from recent lookups, else from one lookup now (None: absent)."""
        with self._lock:
            sizes: List[Optional[int]] = [self._sizes.get(n) for n in names]
        unknown = [i for i, s in enumerate(sizes) if s is None]
        if unknown:
            found = self._lookup(session, [names[i] for i in unknown])
            if found is None:
                return [None] * len(names)
            for i, entry in zip(unknown, found[0]):
                if entry.present:
                    sizes[i] = entry.size
        return sizes

    def _drop_landed_prefetches(self) -> int:
        """Releases prefetched chunks that have landed and no get has taken yet (a later get of
        one reads it again). Returns how many were released."""
        with self._lock:
            landed = {k: f for k, f in self._prefetched.items() if f.done() and f.result() is not None}
            for k in landed:
                del self._prefetched[k]
        for future in landed.values():
            _release_result(future)
        return len(landed)

    def _to_memory_obj(self, session: Session, name: str, offset: int, size: int,
                       on_demand: bool = True) -> Optional[MemoryObj]:
        """Allocates a MemoryObj for the chunk that landed at `offset` and copies its bytes in."""
        try:
            layout, data = chunk_codec.decode(session.client.arena[offset: offset + size])
            shapes = [torch.Size(s) for s in layout.shapes]
            dtypes = [getattr(torch, d, None) for d in layout.dtypes]
            if not all(isinstance(d, torch.dtype) for d in dtypes):
                raise chunk_codec.ChunkFormatError(f"unknown dtype in {layout.dtypes}")
            fmt = MemoryFormat[layout.fmt]
        except (chunk_codec.ChunkFormatError, KeyError, TypeError, ValueError) as e:
            logger.error("kvstream: chunk %s is not readable as an LMCache chunk: %s", name, e)
            return None
        obj = None
        try:
            for _ in range(3):
                obj = self.local_cpu_backend.allocate(shapes if len(shapes) > 1 else shapes[0],
                                                      dtypes if len(dtypes) > 1 else dtypes[0], fmt, busy_loop=False)
                # A get that cannot find memory takes it back from chunks prefetched for later requests.
                if obj is not None or not on_demand or self._drop_landed_prefetches() == 0:
                    break
            if obj is None:
                logger.error("kvstream: no CPU memory for chunk %s (%d bytes); reporting a miss", name, layout.nbytes)
                return None
            if obj.get_size() != layout.nbytes:
                if layout.nbytes > obj.get_physical_size():
                    raise ValueError(f"it holds {layout.nbytes} bytes, its layout {obj.get_size()}")
                obj.set_used_size(layout.nbytes)
            obj.byte_array.cast("B")[:] = data
            return obj
        except Exception as e:  # noqa: BLE001 - one bad chunk is a miss, not a failed session
            logger.error("kvstream: cannot load chunk %s into LMCache memory: %s", name, e)
            if obj is not None:
                obj.ref_count_down()
            return None

    # -- puts --------------------------------------------------------------------------------

    def batched_submit_put_task(self, keys: Sequence[CacheEngineKey], objs: List[MemoryObj],
                                transfer_spec: Any = None,
                                on_complete_callback: Optional[Callable[[CacheEngineKey], None]] = None
                                ) -> Optional[List["concurrent.futures.Future[bool]"]]:
        """Queues the chunks for persisting and returns at once with one future per chunk queued
        (True once durable, False if it was dropped). Keys already queued are skipped. Each queued
        MemoryObj is referenced (ref_count_up) until the daemon has staged its bytes."""
        if not self.with_session:
            return None
        batch = _PutBatch(on_complete_callback)
        with self._lock:  # with close(): nothing is queued behind the worker's stop marker
            if self._closed:
                return None
            for key, obj in zip(keys, objs):
                if key in self._put_tasks or key in batch.keys:
                    continue
                obj.ref_count_up()
                self._put_tasks.add(key)
                batch.keys.append(key)
                batch.objs.append(obj)
                batch.futures.append(concurrent.futures.Future())
            if not batch.keys:
                return None
            self._puts.put(batch)
        return batch.futures

    def _put_loop(self) -> None:
        while True:
            batch = self._puts.get()
            if batch is None:
                return
            try:
                self._persist(batch)
            except BaseException as e:  # noqa: BLE001 - the worker must survive anything
                logger.error("kvstream: persist of %d chunks failed: %s", len(batch.keys), e)
                with self._lock:
                    unsubmitted = [i for i in range(len(batch.keys)) if i not in batch.submitted]
                self._finish_puts(batch, unsubmitted, durable=False)

    def _persist(self, batch: _PutBatch) -> None:
        session = self.link.session()
        if session is None or session.allocator is None:
            logger.warning("kvstream: dropping %d chunks to persist: the daemon is unavailable", len(batch.keys))
            self._finish_puts(batch, range(len(batch.keys)), durable=False)
            return
        # Chunks the daemon already holds are done (it would not rewrite them anyway).
        names = [k.to_string() for k in batch.keys]
        found = self._lookup(session, names)
        if found is None:
            self._finish_puts(batch, range(len(batch.keys)), durable=False)
            return
        entries = found[0]
        self._finish_puts(batch, [i for i, e in enumerate(entries) if e.present], durable=True)
        todo = [i for i, e in enumerate(entries) if not e.present]
        allocator = session.allocator
        while todo:
            staged: List[Tuple[int, int, int]] = []  # (index in batch, arena offset, bytes)
            taken = 0  # chunks of `todo` handled in this wave (staged or failed)
            wave_bytes = 0
            for i in todo:
                obj = batch.objs[i]
                assert obj is not None
                header = self._encode_header(obj, batch.keys[i])
                if header is None:
                    self._finish_puts(batch, [i], durable=False)
                    taken += 1
                    continue
                size = len(header) + obj.get_size()
                if staged and wave_bytes + size > allocator.capacity // 2:
                    break  # puts never hold more than half the arena: gets keep room
                offset = allocator.allocate(size, self.settings.io_timeout) if not staged else allocator.try_allocate(size)
                if offset is None:
                    break
                wave_bytes += allocator.rounded(size)
                try:
                    arena = session.client.arena
                    arena[offset: offset + len(header)] = header
                    arena[offset + len(header): offset + size] = obj.byte_array.cast("B")
                except Exception as e:  # noqa: BLE001 - e.g. the session was dropped meanwhile
                    logger.error("kvstream: cannot stage %s into the arena: %s", batch.keys[i], e)
                    allocator.free(offset)
                    self._finish_puts(batch, [i], durable=False)
                    taken += 1
                    continue
                staged.append((i, offset, size))
                taken += 1
            todo = todo[taken:]
            if staged:
                self._persist_wave(session, batch, names, staged)
            elif todo:
                if not allocator.closed:
                    logger.error("kvstream: no room to stage a chunk in the %d-byte arena within %g s "
                                 "(kvstream.arena_bytes)", allocator.capacity, self.settings.io_timeout)
                self._finish_puts(batch, todo, durable=False)
                return

    @staticmethod
    def _encode_header(obj: MemoryObj, key: CacheEngineKey) -> Optional[bytes]:
        try:
            return chunk_codec.ChunkLayout(
                obj.get_memory_format().name, [list(s) for s in obj.get_shapes()],
                [str(d).removeprefix("torch.") for d in obj.get_dtypes()], obj.get_size()).encode_header()
        except Exception as e:  # noqa: BLE001 - a MemoryObj this plugin cannot describe
            logger.error("kvstream: cannot store %s: %s", key, e)
            return None

    def _persist_wave(self, session: Session, batch: _PutBatch, names: List[str],
                      staged: List[Tuple[int, int, int]]) -> None:
        allocator = session.allocator
        assert allocator is not None
        chunks = [Chunk(names[i], offset, size) for i, offset, size in staged]
        with self._lock:
            batch.submitted.update(i for i, _, _ in staged)

        def on_durable(r: Any) -> None:
            self._finish_puts(batch, [staged[r.index][0]], durable=r.ok)

        try:
            durable = session.client.persist_async(chunks, on_durable=on_durable, check=False,
                                                   timeout=self.settings.io_timeout)
        except Exception as e:  # noqa: BLE001
            logger.error("kvstream: persist of %d chunks failed: %s", len(chunks), e)
            self.link.fail(session, e)
            self._finish_puts(batch, [i for i, _, _ in staged], durable=False)
            return

        def on_stream_end(future: "concurrent.futures.Future[Any]") -> None:
            # Every DURABLE event has been handled by now; chunks without one (the daemon went
            # away after staging them) are not durable.
            if future.exception() is not None:
                logger.error("kvstream: persist stream of %d chunks ended early: %s", len(chunks), future.exception())
            self._finish_puts(batch, [i for i, _, _ in staged], durable=False)

        durable.add_done_callback(on_stream_end)
        # Staged: the daemon has copied the bytes, so the arena ranges and the MemoryObjs are free.
        for i, offset, _ in staged:
            allocator.free(offset)
            self._release_obj(batch, i)

    def _release_obj(self, batch: _PutBatch, i: int) -> None:
        """Drops the put's reference on chunk i (once: the persist and durable paths both call it)."""
        with self._lock:
            obj, batch.objs[i] = batch.objs[i], None
        if obj is not None:
            obj.ref_count_down()

    def _finish_puts(self, batch: _PutBatch, indices: Any, durable: bool) -> None:
        """Finishes each chunk once (later calls for it are no-ops), from whichever thread."""
        for i in indices:
            self._release_obj(batch, i)
            key = batch.keys[i]
            with self._lock:
                if i in batch.finished:
                    continue
                batch.finished.add(i)
                self._put_tasks.discard(key)
            batch.futures[i].set_result(durable)
            if durable and batch.on_complete is not None:
                try:
                    batch.on_complete(key)
                except Exception as e:  # noqa: BLE001 - LMCache's contract: caught and logged
                    logger.warning("kvstream: on_complete_callback failed for %s: %s", key, e)

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until every put queued so far is durable or dropped. False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._put_tasks:
                    return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    # -- pins, removal, lifecycle ------------------------------------------------------------

    def pin(self, key: CacheEngineKey) -> bool:
        """Accepted and not recorded: the daemon has no pins (its LRU eviction skips only chunks a
        pending read uses), and LMCache's async lookups pin keys they never unpin. A key evicted
        under capacity pressure before its get is a miss."""
        return True

    def unpin(self, key: CacheEngineKey) -> bool:
        return True

    def remove(self, key: CacheEngineKey, force: bool = True) -> bool:
        """Evicts the key from every tier of the daemon."""
        session = self.link.session()
        if session is None:
            return False
        name = key.to_string()
        try:
            removed = session.client.evict(key=name).replicas > 0
        except Exception as e:  # noqa: BLE001
            self.link.fail(session, e)
            return False
        with self._lock:
            self._sizes.pop(name, None)
        return removed

    def get_allocator_backend(self) -> Any:
        if self.local_cpu_backend is None:
            raise RuntimeError("KVStreamBackend has no allocator in the scheduler role (no LocalCPUBackend)")
        return self.local_cpu_backend

    def touch_cache(self) -> None:
        """Nothing to do: every daemon read already refreshes the chunk in the daemon's LRU."""

    def close(self) -> None:
        """Persists what is queued (bounded by io_timeout), then ends the session."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._puts.put(None)
        self._put_worker.join(self.settings.io_timeout)
        if not self.flush(self.settings.io_timeout):
            logger.warning("kvstream: closing with chunks still being persisted")
        self.release_prefetched()
        self.link.close()
