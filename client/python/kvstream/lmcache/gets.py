"""Gets: chunks read from kvstreamd into LMCache MemoryObjs, in place or through the session arena.

Both paths are kvstream.transfer's; this module maps MemoryObjs to its pieces and back.

Zero copy (LMCache's CPU pool is shared memory the session holds as a client region, shared_pool):
a read allocates, for each chunk, a raw MemoryObj of its stored size from LocalCPUBackend and one
retrieve (per max_chunks_per_call chunks) lands every chunk in its object (by O_DIRECT; through the daemon's bounce buffers when a
GPU pinned the pool); as each lands, its header (chunk_codec) is read and the object becomes a
MemoryObj of the stored layout over the same memory, just past the header: no byte of the chunk
is copied in Python. After failed retrieves hold back more than a quarter of the pool (a read may
still land there, so LMCache must not reuse it) the copy path serves instead.

Copy (any other pool): a read retrieves its keys in waves, each as many chunks as the arena holds
(one wave when it holds them all); as each chunk lands it is decoded and copied once into a
MemoryObj allocated from LocalCPUBackend, and its arena range is freed.

A prefetch starts such a read on a thread and parks one future per key; the gets that follow take
their keys from there. Every MemoryObj handed out holds one reference for its taker; unclaimed
prefetches are released.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryFormat, MemoryObj, MemoryObjMetadata, TensorMemoryObj

from .. import transfer
from ..daemon_link import DaemonLink
from . import chunk_codec
from .lookups import Lookups
from .shared_pool import SharedPool

# Formats LMCache's pinned pool allocates and frees (MixedMemoryAllocator); a chunk stored in
# another format (BINARY_BUFFER lives elsewhere) is copied into an object of its own.
_POOL_FORMATS = frozenset(f.name for f in (MemoryFormat.KV_2LTD, MemoryFormat.KV_2TD, MemoryFormat.KV_T2D,
                                            MemoryFormat.KV_MLA_FMT, MemoryFormat.EC_TD, MemoryFormat.HS_TD))


class _InPlaceMemoryObj(TensorMemoryObj):
    """A MemoryObj over a chunk that landed in a raw allocation, `header` bytes into it. It frees the
    whole allocation (meta.address, meta.phy_size) but reports the physical size that lies past
    its data pointer, so [data_ptr, data_ptr + get_physical_size()) stays inside the allocation."""

    def __init__(self, raw_data: torch.Tensor, metadata: MemoryObjMetadata, parent_allocator: Any,
                 header: int) -> None:
        super().__init__(raw_data, metadata, parent_allocator)
        self._header = header

    def get_physical_size(self) -> int:
        return self.meta.phy_size - self._header


def _release_result(future: "concurrent.futures.Future[Optional[MemoryObj]]") -> None:
    """Drops the reference a prefetched MemoryObj holds (once its read has finished)."""
    obj = future.result()
    if obj is not None:
        obj.ref_count_down()


class Gets:
    """Reads and prefetches of one backend. Thread-safe; never raises into the caller (a chunk that
    cannot be read is None)."""

    def __init__(self, link: DaemonLink, lookups: Lookups, local_cpu_backend: Any, io_timeout: float,
                 log: logging.Logger, pool: Optional[SharedPool] = None) -> None:
        self._link = link
        self._lookups = lookups
        self._local_cpu_backend = local_cpu_backend
        self._io_timeout = io_timeout
        self._log = log
        self._pool = pool  # LMCache's CPU pool as shared memory; used while the session holds it as a region
        self._lock = threading.Lock()
        self._prefetched: Dict[CacheEngineKey, "concurrent.futures.Future[Optional[MemoryObj]]"] = {}
        # Chunks delivered in place / copied through the arena; pool bytes held back after a failed
        # retrieve (a read may still land there, so LMCache must not reuse them).
        self._counts = {"in_place": 0, "copied": 0, "held_back_bytes": 0}  # guarded by _lock
        self._held_back: List[MemoryObj] = []  # guarded by _lock
        self._copying_since_held_back = False  # guarded by _lock

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
        """Reads `keys` (kvstream.transfer: in place into raw MemoryObjs of the pool the session
        holds, else through the arena), also setting futures[i] (a prefetch) as chunk i lands or fails."""
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
        on_demand = futures is None
        in_place = self._pool is not None and session.region != 0 and not self._holding_too_much()
        wanted: List[int] = []  # key index of each piece
        raws: Dict[int, MemoryObj] = {}  # piece -> the raw pool allocation it lands in (in place)
        pieces: List[transfer.Piece] = []
        for i, size in enumerate(sizes):
            raw = self._raw_in_pool(names[i], size, on_demand) if size and in_place else None
            if not size or raw is False:
                deliver(i, None)
                continue
            if raw is not None:
                raws[len(pieces)] = raw
                pieces.append(transfer.Piece(names[i], raw.data_ptr, raw.get_physical_size()))
            else:
                pieces.append(transfer.Piece(names[i], None, size))
            wanted.append(i)

        def on_piece(r: transfer.PieceResult, landed: Optional[memoryview]) -> None:
            i, raw = wanted[r.index], raws.get(r.index)
            obj = None
            if raw is not None and r.ok:
                obj = self._in_place(names[i], raw, r.size, on_demand)
            elif raw is not None and r.abandoned:
                with self._lock:  # a read may still land in it: LMCache must never reuse it
                    self._held_back.append(raw)
                    self._counts["held_back_bytes"] += raw.get_physical_size()
            elif raw is not None:
                raw.ref_count_down()
            elif landed is not None:
                obj = self._to_memory_obj(names[i], landed, on_demand)
            deliver(i, obj)

        transfer.read(self._link, session, pieces, on_piece, timeout=self._io_timeout)
        return out

    def _raw_in_pool(self, name: str, size: int, on_demand: bool) -> "Optional[MemoryObj] | bool":
        """A raw MemoryObj of `size` bytes in the pool the session holds; None when LMCache placed
        it outside the pool (the arena serves), False when there is no memory (a miss)."""
        pool = self._pool
        assert pool is not None
        raw = self._allocate(name, torch.Size([size]), torch.uint8, MemoryFormat.KV_2LTD, on_demand)
        if raw is None:
            return False
        if pool.offset_of(raw.data_ptr, raw.get_physical_size()) is None:
            raw.ref_count_down()
            return None
        return raw

    def _in_place(self, name: str, raw: MemoryObj, size: int, on_demand: bool) -> Optional[MemoryObj]:
        """The MemoryObj of the stored layout over the chunk that landed in `raw` (its header
        skipped), which takes over raw's allocation and reference. Takes raw in every case: a
        layout the pool does not allocate, or whose byte count differs from its shapes', is copied
        into an object of its own and raw freed; an unreadable chunk frees raw and is None (logged).
        Never raises: one bad chunk is a miss."""
        try:
            layout, data = chunk_codec.decode(raw.byte_array[:size])
            shapes, dtypes, fmt = self._layout(layout)
        except (chunk_codec.ChunkFormatError, KeyError, TypeError, ValueError) as e:
            self._log.error("kvstream: chunk %s is not readable as an LMCache chunk: %s", name, e)
            raw.ref_count_down()
            return None
        implied = sum(s.numel() * d.itemsize for s, d in zip(shapes, dtypes))
        if fmt.name not in _POOL_FORMATS or not isinstance(raw, TensorMemoryObj) or layout.nbytes != implied:
            copy = self._copied(name, layout, data, on_demand)  # narrowed or odd objects: as LMCache makes them
            raw.ref_count_down()
            return copy
        header = size - layout.nbytes
        meta = raw.meta
        try:
            obj = _InPlaceMemoryObj(raw.raw_data[header:size],
                                    MemoryObjMetadata(shape=shapes[0], dtype=dtypes[0], address=meta.address,
                                                      phy_size=meta.phy_size, ref_count=1, fmt=fmt,
                                                      shapes=shapes, dtypes=dtypes),
                                    raw.parent_allocator, header)
        except Exception as e:  # noqa: BLE001 - one bad chunk is a miss, not a failed retrieve
            self._log.error("kvstream: cannot make a MemoryObj of chunk %s in place: %s", name, e)
            raw.ref_count_down()
            return None
        raw.invalidate()  # its allocation is obj's now: obj's last reference frees it
        with self._lock:
            self._counts["in_place"] += 1
        return obj

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

    def _to_memory_obj(self, name: str, landed: memoryview, on_demand: bool = True) -> Optional[MemoryObj]:
        """A MemoryObj holding a copy of the chunk that `landed` (in the arena). None (logged) if
        the chunk is unreadable or no CPU memory is left."""
        try:
            layout, data = chunk_codec.decode(landed)
        except chunk_codec.ChunkFormatError as e:
            self._log.error("kvstream: chunk %s is not readable as an LMCache chunk: %s", name, e)
            return None
        return self._copied(name, layout, data, on_demand)

    @staticmethod
    def _layout(layout: chunk_codec.ChunkLayout) -> Tuple[List[torch.Size], List[torch.dtype], MemoryFormat]:
        """LMCache's shapes, dtypes and format of a stored layout (KeyError/ValueError if unknown)."""
        shapes = [torch.Size(s) for s in layout.shapes]
        dtypes = [getattr(torch, d, None) for d in layout.dtypes]
        if not all(isinstance(d, torch.dtype) for d in dtypes):
            raise ValueError(f"unknown dtype in {layout.dtypes}")
        return shapes, dtypes, MemoryFormat[layout.fmt]

    def _allocate(self, name: str, shapes: Any, dtypes: Any, fmt: MemoryFormat, on_demand: bool) -> Optional[MemoryObj]:
        """A MemoryObj from LocalCPUBackend (one reference), or None (logged) when no CPU memory is
        left; an on-demand read first takes memory back from landed, unclaimed prefetches."""
        obj = None
        for _ in range(3):
            try:
                obj = self._local_cpu_backend.allocate(shapes, dtypes, fmt, busy_loop=False)
            except Exception as e:  # noqa: BLE001 - e.g. a format LocalCPUBackend refuses: a miss
                self._log.error("kvstream: LMCache cannot allocate chunk %s (%s); reporting a miss", name, e)
                return None
            # A get that cannot find memory takes it back from chunks prefetched for later requests.
            if obj is not None or not on_demand or self._drop_landed_prefetches() == 0:
                break
        if obj is None:
            self._log.error("kvstream: no CPU memory for chunk %s; reporting a miss", name)
        return obj

    def _copied(self, name: str, layout: chunk_codec.ChunkLayout, data: memoryview,
                on_demand: bool) -> Optional[MemoryObj]:
        """A MemoryObj of `layout` allocated from LocalCPUBackend with `data` copied in, or None (logged)."""
        try:
            shapes, dtypes, fmt = self._layout(layout)
        except (KeyError, TypeError, ValueError) as e:
            self._log.error("kvstream: chunk %s is not readable as an LMCache chunk: %s", name, e)
            return None
        obj = self._allocate(name, shapes if len(shapes) > 1 else shapes[0], dtypes if len(dtypes) > 1 else dtypes[0],
                             fmt, on_demand)
        if obj is None:
            return None
        try:
            if obj.get_size() != layout.nbytes:
                if layout.nbytes > obj.get_physical_size():
                    raise ValueError(f"it holds {layout.nbytes} bytes, its layout {obj.get_size()}")
                obj.set_used_size(layout.nbytes)
            # byte_array: a memoryview ("<B") of pool memory, or a bytearray (BINARY_BUFFER)
            memoryview(obj.byte_array).cast("B")[:] = data.cast("B")
        except Exception as e:  # noqa: BLE001 - one bad chunk is a miss, not a failed session
            self._log.error("kvstream: cannot load chunk %s into LMCache memory: %s", name, e)
            obj.ref_count_down()
            return None
        with self._lock:
            self._counts["copied"] += 1
        return obj

    def _holding_too_much(self) -> bool:
        """True once failed retrieves hold back over a quarter of the pool: gets copy from then on
        (logged once), so repeated failures cannot starve LMCache of memory."""
        with self._lock:
            held = self._counts["held_back_bytes"]
            too_much = self._pool is not None and held > self._pool.length // 4
            first = too_much and not self._copying_since_held_back
            self._copying_since_held_back = self._copying_since_held_back or too_much
        if first:
            self._log.error("kvstream: %d bytes of LMCache's pool are held back after failed retrieves; gets copy "
                            "through the arena from now on", held)
        return too_much

    def counts(self) -> Dict[str, int]:
        """Chunks delivered in place and copied through the arena, and pool bytes held back."""
        with self._lock:
            return dict(self._counts)

    def release_held_back(self) -> int:
        """Gives LMCache back the pool memory held after failed retrieves; only once no read of the
        daemon that failed can land there any more (the backend's close). Returns how many objects."""
        with self._lock:
            held, self._held_back = self._held_back, []
            self._counts["held_back_bytes"] = 0
        for raw in held:
            raw.ref_count_down()
        return len(held)
