"""Puts: LMCache chunks persisted into kvstreamd by one worker thread, off LMCache's path.

`submit` takes a reference on each MemoryObj and returns at once with one future per chunk. The
worker drops the chunks the daemon already holds (one lookup) and writes the others through the
session arena behind their chunk_codec header (kvstream.transfer: waves of at most half the arena,
so gets keep room; one persist per wave). A MemoryObj's reference is released once its bytes are
in the arena, a wave's arena ranges once the daemon has staged it; each chunk then finishes exactly once: its future gets True and on_complete(key) is
called when the daemon reports it written, and its future gets False when it was dropped.

A submit is one request's chunks in prefix order: each goes out at its depth (its index), so that
when the daemon's staging is full it drops the deepest; a dropped chunk is counted (`dropped`),
not logged: LMCache simply does not have it stored.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set

from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryObj

from .. import transfer
from ..daemon_link import DaemonLink, Session
from . import chunk_codec
from .lookups import Lookups


class _PutBatch:
    """Chunks of one submit call. `objs` (an entry is None once its reference is dropped),
    `finished` and `submitted` (indices) are guarded by the Puts lock: a chunk finishes once; a
    submitted one finishes on its stream."""

    def __init__(self, on_complete: Optional[Callable[[CacheEngineKey], None]]) -> None:
        self.keys: List[CacheEngineKey] = []
        self.objs: List[Optional[MemoryObj]] = []
        self.futures: List["concurrent.futures.Future[bool]"] = []
        self.on_complete = on_complete
        self.finished: Set[int] = set()
        self.submitted: Set[int] = set()


class Puts:
    """The put queue and its worker thread (started at construction). Thread-safe; never raises
    into the caller (a chunk that cannot be persisted finishes as not written)."""

    def __init__(self, link: DaemonLink, lookups: Lookups, io_timeout: float, log: logging.Logger) -> None:
        self._link = link
        self._lookups = lookups
        self._io_timeout = io_timeout
        self._log = log
        self._lock = threading.Lock()
        self._in_flight: Set[CacheEngineKey] = set()  # keys queued, being staged or being written
        self._closed = False
        self.dropped = 0  # chunks the daemon dropped, its staging being full
        self._queue: "queue.Queue[Optional[_PutBatch]]" = queue.Queue()
        self._worker = threading.Thread(target=self._loop, name="kvstream-put", daemon=True)
        self._worker.start()

    def submit(self, keys: Sequence[CacheEngineKey], objs: List[MemoryObj],
               on_complete: Optional[Callable[[CacheEngineKey], None]] = None
               ) -> Optional[List["concurrent.futures.Future[bool]"]]:
        """Queues the chunks whose keys are not in flight (referencing each MemoryObj) and returns
        at once with their futures; None when nothing was queued or after close()."""
        batch = _PutBatch(on_complete)
        with self._lock:  # with close(): nothing is queued behind the worker's stop marker
            if self._closed:
                return None
            for key, obj in zip(keys, objs):
                if key in self._in_flight or key in batch.keys:
                    continue
                obj.ref_count_up()
                self._in_flight.add(key)
                batch.keys.append(key)
                batch.objs.append(obj)
                batch.futures.append(concurrent.futures.Future())
            if not batch.keys:
                return None
            self._queue.put(batch)
        return batch.futures

    def in_flight(self, key: CacheEngineKey) -> bool:
        """Whether `key` is queued, being staged or being written."""
        with self._lock:
            return key in self._in_flight

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until every put queued so far is written or dropped. False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._in_flight:
                    return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    def close(self) -> bool:
        """Stops taking puts and persists what is queued (each wait bounded by io_timeout). False
        if it was already closed."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            self._queue.put(None)
        self._worker.join(self._io_timeout)
        if not self.flush(self._io_timeout):
            self._log.warning("kvstream: closing with chunks still being persisted")
        return True

    def _loop(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            try:
                self._persist(batch)
            except BaseException as e:  # noqa: BLE001 - the worker must survive anything
                self._log.error("kvstream: persist of %d chunks failed: %s", len(batch.keys), e)
                with self._lock:
                    unsubmitted = [i for i in range(len(batch.keys)) if i not in batch.submitted]
                self._finish(batch, unsubmitted, written=False)

    def _persist(self, batch: _PutBatch) -> None:
        session = self._link.session()
        if session is None or session.allocator is None:
            self._log.warning("kvstream: dropping %d chunks to persist: the daemon is unavailable", len(batch.keys))
            self._finish(batch, range(len(batch.keys)), written=False)
            return
        # Chunks the daemon already holds are done (it would not rewrite them anyway).
        names = [k.to_string() for k in batch.keys]
        found = self._lookups.lookup(session, names)
        if found is None:
            self._finish(batch, range(len(batch.keys)), written=False)
            return
        entries = found[0]
        self._finish(batch, [i for i, e in enumerate(entries) if e.present], written=True)
        todo = [i for i, e in enumerate(entries) if not e.present]
        headers = {i: self._encode_header(batch.objs[i], batch.keys[i]) for i in todo}
        self._finish(batch, [i for i in todo if headers[i] is None], written=False)
        todo = [i for i in todo if headers[i] is not None]
        if todo:
            self._write(session, batch, names, todo, headers)

    def _write(self, session: Session, batch: _PutBatch, names: List[str], todo: List[int],
               headers: Dict[int, Optional[bytes]]) -> None:
        """Persists chunks `todo` of the batch, each its header then its bytes, through the arena
        (kvstream.transfer); each finishes on its WRITTEN event, or as not written."""
        sizes = {i: len(headers[i] or b"") + batch.objs[i].get_size() for i in todo}  # type: ignore[union-attr]

        def fill(n: int, target: memoryview) -> None:
            i = todo[n]
            header, obj = headers[i], batch.objs[i]
            assert header is not None and obj is not None
            target[:len(header)] = header
            target[len(header):] = obj.byte_array.cast("B")
            self._release_obj(batch, i)  # its bytes are in the arena now

        report = transfer.write(self._link, session, [transfer.Piece(names[i], None, sizes[i], i) for i in todo],
                                fill, lambda n, ok: self._finish(batch, [todo[n]], written=ok),
                                timeout=self._io_timeout)
        # Pieces never filled (a failed call ended the transfer first) still hold their reference.
        with self._lock:
            batch.submitted.update(todo[r.index] for r in report.staged if r.ok)
            self.dropped += report.dropped
        for r in report.staged:
            self._release_obj(batch, todo[r.index])
        self._finish(batch, [todo[r.index] for r in report.staged if not r.ok], written=False)

    def _encode_header(self, obj: MemoryObj, key: CacheEngineKey) -> Optional[bytes]:
        """The chunk_codec header describing `obj`; None (logged) if it cannot be described."""
        try:
            return chunk_codec.ChunkLayout(
                obj.get_memory_format().name, [list(s) for s in obj.get_shapes()],
                [str(d).removeprefix("torch.") for d in obj.get_dtypes()], obj.get_size()).encode_header()
        except Exception as e:  # noqa: BLE001 - a MemoryObj this plugin cannot describe
            self._log.error("kvstream: cannot store %s: %s", key, e)
            return None

    def _release_obj(self, batch: _PutBatch, i: int) -> None:
        """Drops the put's reference on chunk i (once: the persist and written paths both call it)."""
        with self._lock:
            obj, batch.objs[i] = batch.objs[i], None
        if obj is not None:
            obj.ref_count_down()

    def _finish(self, batch: _PutBatch, indices: Iterable[int], written: bool) -> None:
        """Finishes each chunk once (later calls for it are no-ops), from whichever thread."""
        for i in indices:
            self._release_obj(batch, i)
            key = batch.keys[i]
            with self._lock:
                if i in batch.finished:
                    continue
                batch.finished.add(i)
                self._in_flight.discard(key)
            batch.futures[i].set_result(written)
            if written and batch.on_complete is not None:
                try:
                    batch.on_complete(key)
                except Exception as e:  # noqa: BLE001 - LMCache's contract: caught and logged
                    self._log.warning("kvstream: on_complete_callback failed for %s: %s", key, e)
