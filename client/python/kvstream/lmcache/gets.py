"""Gets: chunks read from kvstreamd through the session arena into LMCache MemoryObjs.

A read retrieves its keys in waves, each as many chunks as the arena holds (one wave when it holds
them all); as each chunk lands it is decoded (chunk_codec) and copied once into a MemoryObj
allocated from LMCache's LocalCPUBackend, and its arena range is freed. A prefetch starts such a
read on a thread and parks one future per key; the gets that follow take their keys from there.
Every MemoryObj handed out holds one reference for its taker; unclaimed prefetches are released.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryFormat, MemoryObj

from ..errors import Code, KVStreamError
from ..types import Chunk
from . import chunk_codec
from ..daemon_link import DaemonLink, Session
from .lookups import Lookups


def _release_result(future: "concurrent.futures.Future[Optional[MemoryObj]]") -> None:
    """Drops the reference a prefetched MemoryObj holds (once its read has finished)."""
    obj = future.result()
    if obj is not None:
        obj.ref_count_down()


class Gets:
    """Reads and prefetches of one backend. Thread-safe; never raises into the caller (a chunk that
    cannot be read is None)."""

    def __init__(self, link: DaemonLink, lookups: Lookups, local_cpu_backend: Any, io_timeout: float,
                 log: logging.Logger) -> None:
        self._link = link
        self._lookups = lookups
        self._local_cpu_backend = local_cpu_backend
        self._io_timeout = io_timeout
        self._log = log
        self._lock = threading.Lock()
        self._prefetched: Dict[CacheEngineKey, "concurrent.futures.Future[Optional[MemoryObj]]"] = {}

    def get(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
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

    def prefetch(self, keys: Sequence[CacheEngineKey]) -> int:
        """Starts ONE retrieve for every key not already prefetched and returns at once; releases
        what an earlier prefetch parked that `keys` does not want. Returns the number of keys submitted."""
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
                self._log.error("kvstream: prefetch failed: %s", e)
            for f in futures:
                if not f.done():
                    f.set_result(None)

        try:
            threading.Thread(target=run, name="kvstream-prefetch", daemon=True).start()
        except RuntimeError as e:  # no thread: the gets read these keys themselves
            self._log.error("kvstream: cannot start a prefetch: %s", e)
            with self._lock:
                for key in fresh:
                    self._prefetched.pop(key, None)
            for f in futures:
                f.set_result(None)
            return 0
        return len(fresh)

    def release_prefetched(self) -> int:
        """Drops prefetched chunks no get took, after waiting for their reads. Returns how many."""
        with self._lock:
            stale, self._prefetched = self._prefetched, {}
        for future in stale.values():
            future.result()  # waits for its read to finish
            _release_result(future)
        return len(stale)

    def _read(self, keys: Sequence[CacheEngineKey],
              futures: Optional[Sequence["concurrent.futures.Future[Optional[MemoryObj]]"]] = None
              ) -> List[Optional[MemoryObj]]:
        """Reads `keys` in as few retrieves as the arena allows (one when it holds them all), also
        setting futures[i] (a prefetch) as chunk i lands or fails."""
        out: List[Optional[MemoryObj]] = [None] * len(keys)

        def deliver(i: int, obj: Optional[MemoryObj]) -> None:
            out[i] = obj
            if futures is not None:
                futures[i].set_result(obj)

        session = self._link.session()
        if session is None or session.allocator is None or not keys:
            for i in range(len(keys)):
                deliver(i, None)
            return out
        names = [k.to_string() for k in keys]
        sizes = self._lookups.payload_sizes(session, names)
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
                    offset = allocator.allocate(sizes[i], timeout=self._io_timeout)
                if offset is None:
                    break
                wave.append((i, offset))
            if not wave:
                if not allocator.closed:
                    self._log.error("kvstream: no room for a chunk of %d bytes in the %d-byte arena within %g s "
                                    "(kvstream.arena_bytes)", sizes[pending[0]], allocator.capacity, self._io_timeout)
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
        """One retrieve of the (index, arena offset) chunks of `wave`. False if it failed (the
        session is then dropped and every chunk not delivered yet is delivered as None)."""
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
            session.client.retrieve(chunks, on_chunk=on_chunk, timeout=self._io_timeout)
            if not all(delivered):  # a chunk without completion may still be landing: drop the arena
                raise KVStreamError(Code.DATA_LOSS, "kvstreamd ended a retrieve without completing every chunk")
        except Exception as e:  # noqa: BLE001 - daemon gone or call refused: misses
            self._log.error("kvstream: retrieve of %d chunks failed: %s", len(chunks), e)
            self._link.fail(session, e)  # its arena is dropped with it: reads may still land there
            for n, (i, _) in enumerate(wave):
                if not delivered[n]:
                    deliver(i, None)
            return False
        return True

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
        """Allocates a MemoryObj for the chunk that landed at `offset` and copies its bytes in.
        None (logged) if the chunk is unreadable or no CPU memory is left; an on-demand read
        first takes memory back from landed, unclaimed prefetches."""
        try:
            layout, data = chunk_codec.decode(session.client.arena[offset: offset + size])
            shapes = [torch.Size(s) for s in layout.shapes]
            dtypes = [getattr(torch, d, None) for d in layout.dtypes]
            if not all(isinstance(d, torch.dtype) for d in dtypes):
                raise chunk_codec.ChunkFormatError(f"unknown dtype in {layout.dtypes}")
            fmt = MemoryFormat[layout.fmt]
        except (chunk_codec.ChunkFormatError, KeyError, TypeError, ValueError) as e:
            self._log.error("kvstream: chunk %s is not readable as an LMCache chunk: %s", name, e)
            return None
        obj = None
        try:
            for _ in range(3):
                obj = self._local_cpu_backend.allocate(shapes if len(shapes) > 1 else shapes[0],
                                                       dtypes if len(dtypes) > 1 else dtypes[0], fmt, busy_loop=False)
                # A get that cannot find memory takes it back from chunks prefetched for later requests.
                if obj is not None or not on_demand or self._drop_landed_prefetches() == 0:
                    break
            if obj is None:
                self._log.error("kvstream: no CPU memory for chunk %s (%d bytes); reporting a miss",
                                name, layout.nbytes)
                return None
            if obj.get_size() != layout.nbytes:
                if layout.nbytes > obj.get_physical_size():
                    raise ValueError(f"it holds {layout.nbytes} bytes, its layout {obj.get_size()}")
                obj.set_used_size(layout.nbytes)
            obj.byte_array.cast("B")[:] = data
            return obj
        except Exception as e:  # noqa: BLE001 - one bad chunk is a miss, not a failed session
            self._log.error("kvstream: cannot load chunk %s into LMCache memory: %s", name, e)
            if obj is not None:
                obj.ref_count_down()
            return None
