"""transfer: the one way engine integrations move chunks between their own memory and kvstreamd.

A piece is (key, address, size): `size` bytes at `address` in this process, stored under `key`.
Each piece takes one of two paths, chosen here and nowhere else:

- in place: the piece lies in the client region the session holds (Session.memory maps its
  address to a region offset). The daemon reads into it (by O_DIRECT, or through its bounce
  buffers for device-pinned memory) and copies stored pieces out of it: no byte passes through
  Python. Calls of at most the session's max_chunks_per_call pieces (the daemon tells it at attach).
- through the arena: any other piece goes through the session arena, in waves allocated from the
  session's ArenaAllocator: as many pieces as one call takes and the arena holds (a wave waits for
  room for its first piece only, up to `room_timeout`); a write's wave takes at most half the arena,
  so reads always keep room. One memmove per piece (counted in `copied_bytes`).

A piece whose address is None has no memory of its own (its layout is known once it has landed,
say): a read hands its bytes to `on_piece` as a view of the arena, valid during that callback only;
a write asks `fill` to put them into the arena.

Every daemon call goes through DaemonLink.call, whose rule decides whether a failed call drops the
session. A failed call fails its pieces and ends the transfer (later pieces fail unattempted);
nothing raises. Reports are per piece: OK, MISS (the daemon holds no such key), DROPPED (a write the
daemon dropped because its staging was full: not stored, and no failure) or FAILED.

A write sends its pieces deepest last (on each path): by `depth`, a piece's chunk index in its
request's prefix (every request's chunk 0, then every chunk 1, ...). The daemon admits a persist's
chunks in call order and drops what finds its staging full, and a chunk past a dropped one is worth
nothing (a lookup's hit ends at the gap).

`lookup` is the one lookup of every engine integration: one daemon lookup of a request's keys,
grouped in chunks, with the load-or-recompute verdict (kvstream.verdict) applied to its hit prefix.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import enum
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from .arena_alloc import ArenaAllocator
from .daemon_link import DaemonLink, Session, call
from .errors import Code, KVStreamError, is_refusal
from .types import Chunk, ChunkResult, LookupEntry, PersistResult
from .verdict import Verdict

__all__ = ["Found", "Piece", "PieceResult", "ReadReport", "Status", "Verdict", "WriteReport", "lookup", "read",
           "write"]

logger = logging.getLogger(__name__)


# How kvstreamd answers a persisted chunk it dropped, staging being full (STAGED, RESOURCE_EXHAUSTED).
DROPPED_MESSAGE = "staging is full: dropped"


class Piece(NamedTuple):
    """`size` bytes at `address` in this process (None: see the module docstring), stored under `key`.
    `depth`: a write's piece's chunk index in its request's prefix (writes send shallow pieces first)."""

    key: str
    address: Optional[int]
    size: int
    depth: int = 0


class Status(enum.Enum):
    OK = "ok"  # read: landed whole (`size` bytes); write: staged (the daemon copied it out)
    MISS = "miss"  # read: the daemon holds no chunk under the key
    DROPPED = "dropped"  # write: the daemon's staging was full; not stored (and not a failure)
    FAILED = "failed"


@dataclass(frozen=True)
class PieceResult:
    """What became of pieces[index]. `size`: the bytes stored under its key (a read's OK: at most
    the piece's size). `abandoned`: its call failed before it completed and the session was dropped:
    the daemon may still write into its memory until the session has ended."""

    index: int
    status: Status
    size: int = 0
    message: str = ""
    abandoned: bool = False

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


OnPiece = Callable[[PieceResult, Optional[memoryview]], None]  # (result, the landed bytes of an address-less piece)
Fill = Callable[[int, memoryview], None]  # (index, its arena range): writes an address-less piece's bytes
OnWritten = Callable[[int, bool], None]  # (index, written to its tiers): once per staged piece


@dataclass
class ReadReport:
    results: List[PieceResult]  # one per piece, in piece order
    calls: int = 0  # daemon retrieves made
    copied_bytes: int = 0  # bytes copied out of the arena into pieces' memory


@dataclass
class WriteReport:
    staged: List[PieceResult]  # one per piece: OK once staged (its memory may be reused), or DROPPED
    # Per piece: written to its tiers (not synced unless the daemon runs fsync: chunk; see
    # PersistResult.durable).
    written: "concurrent.futures.Future[List[bool]]" = field(default_factory=concurrent.futures.Future)
    calls: int = 0  # daemon persists made
    copied_bytes: int = 0  # bytes copied from pieces' memory into the arena

    @property
    def dropped(self) -> int:
        """Pieces the daemon dropped, its staging being full."""
        return sum(1 for r in self.staged if r.status is Status.DROPPED)


def read(link: DaemonLink, session: Session, pieces: Sequence[Piece], on_piece: Optional[OnPiece] = None,
         timeout: Optional[float] = None, room_timeout: Optional[float] = None) -> ReadReport:
    """Reads every piece (see the module docstring): `on_piece` fires once per piece, on this
    thread, as soon as it has landed or failed (the others may still be in flight). `timeout`: the
    deadline of each retrieve (None: none); `room_timeout`: how long a wave waits for arena room
    (default `timeout`; None: until there is room or the session is dropped)."""
    reader = _Reader(link, session, pieces, timeout, room_timeout, on_piece)
    reader.run()
    return ReadReport(reader.results_in_order(), reader.calls, reader.copied_bytes)


def write(link: DaemonLink, session: Session, pieces: Sequence[Piece], fill: Optional[Fill] = None,
          on_written: Optional[OnWritten] = None, timeout: Optional[float] = None,
          room_timeout: Optional[float] = None) -> WriteReport:
    """Stores every piece and returns once each is staged, dropped or failed (see the module
    docstring); the pieces go out by depth (stable), the reports come back in piece order.
    `on_written` fires once per staged piece, on a background thread, when the daemon reports it
    written to its tiers or not (a stream that ends without saying: not written); `written`
    completes with a flag per piece once every staged piece has been reported. `timeout`, `room_timeout`: as read's."""
    writer = _Writer(link, session, pieces, timeout, room_timeout, fill, on_written)
    writer.run()
    return WriteReport(writer.results_in_order(), writer.written, writer.calls, writer.copied_bytes)


@dataclass
class Found:
    """One lookup (transfer.lookup), in the caller's order of names, with the verdict applied."""

    entries: List[LookupEntry]  # the daemon's answer per name (locks released past the cut read unlocked)
    chunk_of: List[int]  # each name's chunk
    held_names: List[bool]  # each name held (present, or the caller's `holds`)
    held: int  # leading chunks whose every name is held: the hit prefix
    cut: Optional[int] = None  # the verdict's cut: chunks from here on answer as misses (None: no cut)

    @property
    def hits(self) -> int:
        """Leading chunks to load: the hit prefix, or less where the verdict cut it."""
        return self.held if self.cut is None else min(self.held, self.cut)

    @property
    def recomputed(self) -> int:
        """Chunks of the hit prefix the verdict gave to recomputing."""
        return self.held - self.hits

    def loads(self, i: int) -> bool:
        """Whether name i answers as a hit: held, and not past the cut."""
        return self.held_names[i] and (self.cut is None or self.chunk_of[i] < self.cut)


def lookup(link: Any, session: Session, names: Sequence[str], *, chunk_of: Optional[Sequence[int]] = None,
           holds: Optional[Callable[[LookupEntry], bool]] = None, lock_seconds: float = 0.0,
           verdict: Optional[Verdict] = None, chunk_tokens: int = 0, start_tokens: int = 0, model: str = "",
           promised: int = 0, what: str = "") -> Optional[Found]:
    """ONE daemon lookup of a request's `names` (None when it failed: DaemonLink.call's rule, and
    misses), with the load-or-recompute verdict applied to its hit prefix.

    `chunk_of[i]`: the chunk (0, 1, ...: its index in the request's prefix) name i belongs to
    (default: its own, i); a chunk is held when every name of it is (`holds(entry)`, default
    present). The daemon is asked in chunk order, so its cumulative load estimate of a chunk's
    last name is the seconds to load the prefix through that chunk. With `verdict` on, it cuts the
    hit prefix where loading stops paying (kvstream.verdict: `chunk_tokens` tokens a chunk,
    `start_tokens` cached before chunk 0, the compute model of `model`): chunks from the cut on
    answer as misses (`Found.loads`, `Found.hits`), and what the lookup locked of them
    (`lock_seconds`) is unlocked. `promised`: leading chunks an earlier verdict already told the
    engine to load (it asks again before loading them): never cut unless a tier holding one stalled."""
    n = len(names)
    chunks = list(chunk_of) if chunk_of is not None else list(range(n))
    order = sorted(range(n), key=lambda i: (chunks[i], i))  # chunk by chunk: the estimate is cumulative
    asked = [names[i] for i in order]
    estimate = verdict is not None and verdict.enabled
    kwargs: Dict[str, Any] = {"lock_seconds": lock_seconds} if lock_seconds else {}
    if estimate:
        kwargs["estimate_load"] = True
    answer = call(link, session, what or f"lookup of {n} keys", lambda: session.client.lookup(asked, **kwargs))
    if answer is None:
        return None
    answered: List[LookupEntry] = list(answer[0])
    if len(answered) != n:
        logger.error("kvstream: kvstreamd answered a lookup of %d keys with %d entries", n, len(answered))
        return None
    entries: List[LookupEntry] = [answered[0]] * n if n else []
    for at, i in enumerate(order):
        entries[i] = answered[at]
    held_names = [bool(holds(e)) if holds is not None else bool(e.present) for e in entries]
    loads: List[float] = []  # per chunk of the hit prefix: its cumulative load estimate
    at = 0
    while at < n and chunks[order[at]] == len(loads):
        end, whole = at, True
        while end < n and chunks[order[end]] == len(loads):
            whole = whole and held_names[order[end]]
            end += 1
        if not whole:
            break
        loads.append(float(answered[end - 1].load_seconds))
        at = end
    found = Found(entries, chunks, held_names, len(loads))
    if estimate and loads:
        assert verdict is not None
        h = verdict.cut(loads, chunk_tokens, start_tokens, model, at_least=promised)
        if h < len(loads):
            found.cut = h
            logger.debug("kvstream: loading %d of %d hit chunks (load estimates %s)", h, len(loads), loads)
    if found.cut is not None and lock_seconds:
        cut = found.cut
        past = [i for i in range(n) if chunks[i] >= cut and entries[i].locked]
        if past:
            release = [names[i] for i in past]
            call(link, session, f"unlock of {len(release)} keys past the verdict's cut",
                 lambda: session.client.unlock(release))
            for i in past:
                entries[i] = entries[i]._replace(locked=False)
    return found


class _Transfer:
    """What reads and writes share: the split of the pieces between the two paths, the waves, the
    per-piece results. Runs on one thread (written callbacks excepted, see _Writer)."""

    budget_share = 1  # an arena wave takes at most capacity // budget_share bytes (beyond its first piece)
    rounded_lengths = False  # arena chunks span whole aligned ranges (a retrieve's O_DIRECT may land that much)

    def __init__(self, link: DaemonLink, session: Session, pieces: Sequence[Piece], timeout: Optional[float],
                 room_timeout: Optional[float]) -> None:
        self.link, self.session, self.pieces = link, session, list(pieces)
        self.timeout = timeout
        self.room_timeout = timeout if room_timeout is None else room_timeout
        self.per_call = max(1, session.client.max_chunks_per_call)
        self.results: List[Optional[PieceResult]] = [None] * len(self.pieces)
        self.calls = 0
        self.copied_bytes = 0
        self.stopped = False  # a call failed: the remaining pieces fail unattempted
        self.unattempted = "an earlier call failed"  # why pieces left without a result fail
        self.arena: Optional[memoryview] = None  # while the arena waves run
        self.arena_base = 0

    def run(self) -> None:
        """Moves every piece; each ends with a result. Never raises (a bug fails what is left, loudly)."""
        try:
            in_place, through_arena = self._split()
            for first in range(0, len(in_place), self.per_call):
                if self.stopped:
                    break
                self.move(in_place[first:first + self.per_call], in_arena=False)
            if through_arena and not self.stopped:
                self._through_arena(through_arena)
        except Exception as e:  # noqa: BLE001 - never into the engine
            logger.exception("kvstream: a transfer of %d pieces failed: %s", len(self.pieces), e)
            self.unattempted = f"the transfer failed ({e})"
        for i, result in enumerate(self.results):
            if result is None:
                self.report(PieceResult(i, Status.FAILED, message=f"not attempted: {self.unattempted}"))
        self.finish()

    def move(self, entries: List[Tuple[int, int]], in_arena: bool) -> None:
        """One daemon call for the (piece index, offset) entries. REQUIRES: subclass."""
        raise NotImplementedError

    def finish(self) -> None:
        """After every piece has a result."""

    def report(self, result: PieceResult, landed: Optional[memoryview] = None) -> None:
        self.results[result.index] = result

    def results_in_order(self) -> List[PieceResult]:
        return [r for r in self.results if r is not None]

    def chunk(self, entry: Tuple[int, int], in_arena: bool) -> Chunk:
        i, offset = entry
        piece = self.pieces[i]
        if in_arena:
            allocator = self.session.allocator
            assert allocator is not None
            return Chunk(piece.key, offset, allocator.rounded(piece.size) if self.rounded_lengths else piece.size)
        return Chunk(piece.key, offset, piece.size, self.session.region)

    def fail_call(self, entries: List[Tuple[int, int]], done: Sequence[bool], in_arena: bool) -> None:
        """A call failed: its pieces not done fail, and the transfer stops. Their arena ranges are
        freed unless the session was dropped (I/O may still land there; the arena goes with it)."""
        self.stopped = True
        dropped = self.session.dropped
        for (i, offset), finished in zip(entries, done):
            if finished:
                continue
            if in_arena and not dropped:
                self._allocator().free(offset)
            self.report(PieceResult(i, Status.FAILED, message="its call failed", abandoned=dropped))

    def _split(self) -> Tuple[List[Tuple[int, int]], List[int]]:
        """(index, region offset) of the pieces in the session's region; indices of the others."""
        in_place: List[Tuple[int, int]] = []
        through_arena: List[int] = []
        memory = self.session.memory if self.session.region else None
        for i in self.order():
            piece = self.pieces[i]
            offset = None
            if memory is not None and piece.address is not None:
                offset = memory.offset_of(piece.address, piece.size)
            if offset is None:
                through_arena.append(i)
            else:
                in_place.append((i, offset))
        return in_place, through_arena

    def order(self) -> Sequence[int]:
        """The pieces' indices in the order they go to the daemon."""
        return range(len(self.pieces))

    def _allocator(self) -> ArenaAllocator:
        allocator = self.session.allocator
        if allocator is None:
            raise KVStreamError(Code.FAILED_PRECONDITION, "the session has no arena")
        return allocator

    def _through_arena(self, todo: List[int]) -> None:
        allocator = self.session.allocator
        try:
            arena = self.session.client.arena
            # Held while the waves run: the arena stays mapped while exported, even if the session
            # is dropped meanwhile on another thread.
            anchor = ctypes.c_char.from_buffer(arena)
        except (KVStreamError, ValueError) as e:  # no arena, or the session was closed meanwhile
            for i in todo:
                self.report(PieceResult(i, Status.FAILED, message=f"no arena: {e}"))
            return
        if allocator is None:
            return
        self.arena, self.arena_base = arena, ctypes.addressof(anchor)
        try:
            at = 0
            while at < len(todo) and not self.stopped:
                wave = self._wave(allocator, todo[at:])
                if wave:
                    at += len(wave)
                    self.move(wave, in_arena=True)
                    continue
                i = todo[at]
                size = self.pieces[i].size
                if allocator.rounded(size) > allocator.capacity:  # never fits: this piece alone fails
                    self.report(PieceResult(i, Status.FAILED, message=f"{size} bytes exceed the arena"))
                    logger.error("kvstream: a %d-byte chunk exceeds the %d-byte session arena (arena_bytes)",
                                 size, allocator.capacity)
                    at += 1
                    continue
                if not allocator.closed:
                    logger.error("kvstream: no room for a %d-byte chunk in the %d-byte arena within %s s "
                                 "(arena_bytes)", size, allocator.capacity, self.room_timeout)
                self.unattempted = "no room in the arena"
                break
        finally:
            self.arena = None
            del anchor

    def _wave(self, allocator: ArenaAllocator, todo: List[int]) -> List[Tuple[int, int]]:
        """(index, arena offset) for the leading pieces of `todo`: as many as one call takes, the
        budget allows and are free now; the first waits for room up to room_timeout."""
        wave: List[Tuple[int, int]] = []
        used = 0
        budget = allocator.capacity // self.budget_share
        for i in todo:
            size = self.pieces[i].size
            need = allocator.rounded(size)
            if len(wave) == self.per_call or (wave and used + need > budget):
                break
            offset = allocator.try_allocate(size) if wave else allocator.allocate(size, self.room_timeout)
            if offset is None:
                break
            wave.append((i, offset))
            used += need
        return wave


class _Reader(_Transfer):
    rounded_lengths = True

    def __init__(self, link: DaemonLink, session: Session, pieces: Sequence[Piece], timeout: Optional[float],
                 room_timeout: Optional[float], on_piece: Optional[OnPiece]) -> None:
        super().__init__(link, session, pieces, timeout, room_timeout)
        self.on_piece = on_piece

    def report(self, result: PieceResult, landed: Optional[memoryview] = None) -> None:
        super().report(result)
        if self.on_piece is None:
            return
        try:
            self.on_piece(result, landed)
        except Exception as e:  # noqa: BLE001 - the engine's handling of one piece fails that piece alone
            logger.error("kvstream: handling chunk %s failed: %s", self.pieces[result.index].key, e)

    def move(self, entries: List[Tuple[int, int]], in_arena: bool) -> None:
        chunks = [self.chunk(e, in_arena) for e in entries]
        done = [False] * len(entries)

        def on_chunk(r: ChunkResult) -> None:
            if not 0 <= r.index < len(entries) or done[r.index]:
                return
            done[r.index] = True
            i, offset = entries[r.index]
            try:
                self._land(i, offset if in_arena else None, r)
            finally:
                if in_arena:
                    self._allocator().free(offset)

        def retrieve() -> bool:
            self.calls += 1
            try:
                self.session.client.retrieve(chunks, on_chunk=on_chunk, timeout=self.timeout)
            except Exception as e:
                # kvstreamd refuses a retrieve only before its first completion; a refusal code
                # after one (raised on this side) comes while reads may still land: not a refusal.
                if any(done) and is_refusal(e):
                    raise KVStreamError(Code.INTERNAL, f"a retrieve failed after chunks had landed: {e}") from e
                raise
            if not all(done):
                raise KVStreamError(Code.DATA_LOSS, "kvstreamd ended a retrieve without completing every chunk")
            return True

        if not self.link.call(self.session, f"retrieve of {len(chunks)} chunks", retrieve, failed=False):
            self.fail_call(entries, done, in_arena)

    def _land(self, i: int, offset: Optional[int], r: ChunkResult) -> None:
        """Reports piece i, which the daemon completed (`offset`: its arena range, None in place)."""
        piece = self.pieces[i]
        if r.code == Code.NOT_FOUND:
            self.report(PieceResult(i, Status.MISS, message=r.message))
        elif not r.ok:
            self.report(PieceResult(i, Status.FAILED, message=f"{r.code.name}: {r.message}"))
        elif r.size > piece.size:
            self.report(PieceResult(i, Status.FAILED, r.size, f"the stored chunk holds {r.size} bytes, "
                                                              f"more than the {piece.size} asked for"))
        elif offset is None:
            self.report(PieceResult(i, Status.OK, r.size))
        elif piece.address is None:
            assert self.arena is not None
            self.report(PieceResult(i, Status.OK, r.size), self.arena[offset:offset + r.size])
        else:
            ctypes.memmove(piece.address, self.arena_base + offset, r.size)
            self.copied_bytes += r.size
            self.report(PieceResult(i, Status.OK, r.size))


class _Writer(_Transfer):
    budget_share = 2  # writes take at most half the arena: reads keep room

    def __init__(self, link: DaemonLink, session: Session, pieces: Sequence[Piece], timeout: Optional[float],
                 room_timeout: Optional[float], fill: Optional[Fill], on_written: Optional[OnWritten]) -> None:
        super().__init__(link, session, pieces, timeout, room_timeout)
        self.fill = fill
        self.on_written = on_written
        self.written: "concurrent.futures.Future[List[bool]]" = concurrent.futures.Future()
        self._lock = threading.Lock()
        self._written: List[Optional[bool]] = [None] * len(self.pieces)  # GUARDED_BY(_lock)
        self._open = 1  # persist streams not ended, plus this run; GUARDED_BY(_lock)

    def order(self) -> Sequence[int]:
        """Shallow pieces first (every request's chunk 0, then chunk 1, ...): the daemon admits in
        call order and drops what finds its staging full."""
        return sorted(range(len(self.pieces)), key=lambda i: self.pieces[i].depth)

    def move(self, entries: List[Tuple[int, int]], in_arena: bool) -> None:
        if in_arena:
            entries = self._copy_in(entries)
            if not entries:
                return
        chunks = [self.chunk(e, in_arena) for e in entries]

        def on_written(r: PersistResult) -> None:
            if 0 <= r.index < len(entries):
                self._mark_written(entries[r.index][0], r.ok)

        not_staged: Dict[int, PersistResult] = {}  # entry index -> why; filled before persist_async returns

        def on_staged(r: PersistResult) -> None:
            if not r.ok and 0 <= r.index < len(entries):
                not_staged[r.index] = r

        def persist() -> Any:
            self.calls += 1
            return self.session.client.persist_async(chunks, on_written=on_written, check=False, timeout=self.timeout,
                                                     on_staged=on_staged)

        with self._lock:
            self._open += 1
        future = self.link.call(self.session, f"persist of {len(chunks)} chunks", persist, failed=None)
        if future is None:
            self._stream_ended(entries, None)
            self.fail_call(entries, [False] * len(entries), in_arena)
            return
        # First: whatever happens below, the stream's end closes it (written then always completes).
        future.add_done_callback(lambda f: self._stream_ended(entries, f))
        if in_arena:  # staged (or failed alone): the daemon is done with the bytes, the ranges are free
            for i, offset in entries:
                self._allocator().free(offset)
                self.copied_bytes += self.pieces[i].size if self.pieces[i].address is not None else 0
        for n, (i, _) in enumerate(entries):
            error = not_staged.get(n)
            if error is None:
                self.report(PieceResult(i, Status.OK, self.pieces[i].size))
            elif error.code == Code.RESOURCE_EXHAUSTED and error.message.startswith(DROPPED_MESSAGE):
                self.report(PieceResult(i, Status.DROPPED, message=error.message))  # staging full: not stored
            else:  # the daemon staged it with an error: never staged (its WRITTEN says the same)
                self.report(PieceResult(i, Status.FAILED, message=f"{error.code.name}: {error.message}"))

    def _copy_in(self, wave: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
        """Copies (or fills) each piece of the wave into its arena range; the entries that made it."""
        assert self.arena is not None
        ready: List[Tuple[int, int]] = []
        for i, offset in wave:
            piece = self.pieces[i]
            try:
                if piece.address is not None:
                    ctypes.memmove(self.arena_base + offset, piece.address, piece.size)
                elif self.fill is None:
                    raise ValueError("a piece without an address needs a fill")
                else:
                    self.fill(i, self.arena[offset:offset + piece.size])
            except Exception as e:  # noqa: BLE001 - this piece fails alone
                logger.error("kvstream: cannot stage %s into the arena: %s", piece.key, e)
                self._allocator().free(offset)
                self.report(PieceResult(i, Status.FAILED, message=f"staging: {e}"))
                continue
            ready.append((i, offset))
        return ready

    def _mark_written(self, i: int, ok: bool) -> None:
        """Records once whether piece i was written (later reports of it are ignored) and tells on_written."""
        with self._lock:
            if self._written[i] is not None:
                return
            self._written[i] = ok
        if self.on_written is not None:
            try:
                self.on_written(i, ok)
            except Exception as e:  # noqa: BLE001 - never into the persist stream
                logger.error("kvstream: on_written for %s failed: %s", self.pieces[i].key, e)

    def _stream_ended(self, entries: List[Tuple[int, int]], future: "Optional[concurrent.futures.Future[Any]]") -> None:
        """A persist stream ended (None: it never started): its pieces without a WRITTEN event are not written."""
        error = future.exception() if future is not None else None
        if error is not None:
            logger.warning("kvstream: persist stream of %d chunks ended early: %s", len(entries), error)
        if future is not None:
            for i, _ in entries:
                self._mark_written(i, False)
        self._close_one()

    def finish(self) -> None:
        self._close_one()

    def _close_one(self) -> None:
        with self._lock:
            self._open -= 1
            if self._open:
                return
            flags = [bool(w) for w in self._written]
        self.written.set_result(flags)
