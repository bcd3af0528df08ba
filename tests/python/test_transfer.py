"""kvstream.transfer against a real kvstreamd: pieces in place in a client region, pieces through the
arena in waves, the daemon's per-call limit, per-piece outcomes, and a call that fails mid-wave."""

from __future__ import annotations

import ctypes
import logging
import math
import mmap
import os
import random
from typing import Iterator, List, Tuple

import pytest

from conftest import STAGING_FULL, Daemon, estimating, staging_full
from kvstream import Client, Code, KVStreamError, Unavailable
from kvstream import transfer
from kvstream.daemon_link import DaemonLink, Session
from kvstream.recompute import RecomputeSettings
from kvstream.verdict import Verdict
from kvstream.shared_region import SharedRegion
from kvstream.transfer import Piece, Status

PIECE = 256 << 10  # one daemon block
log = logging.getLogger("test_transfer")


class Region:
    """A memfd of `size` bytes mapped here, handed to sessions as a client region."""

    def __init__(self, size: int) -> None:
        self.fd = os.memfd_create("kvs-transfer-test")
        os.ftruncate(self.fd, size)
        self.size = size
        self.map = mmap.mmap(self.fd, size)
        self._anchor = ctypes.c_char.from_buffer(self.map)
        self.base = ctypes.addressof(self._anchor)

    def memory(self) -> SharedRegion:
        return SharedRegion(self.fd, self.size, self.base, 0, self.size, "test region")

    def close(self) -> None:
        del self._anchor
        self.map.close()
        os.close(self.fd)


def link_to(socket: str, arena_bytes: int = 64 << 20, region: Region | None = None) -> DaemonLink:
    """A link whose session holds `region` (if any); reattaches only after a minute (a dropped
    session stays dropped for the test)."""

    def connect() -> Session:
        client = Client.attach(socket, model="transfer-test", arena_bytes=arena_bytes)
        if region is None:
            return Session(client)
        return Session(client, client.add_region(region.fd, region.size), region.memory())

    link = DaemonLink(f"kvstreamd on {socket}", connect, log, retry_interval=60)
    assert link.connect_now() is not None
    return link


def payloads(n: int, seed: int, size: int = PIECE) -> List[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(size) for _ in range(n)]


class Private:
    """Memory no region holds (it goes through the arena): a buffer per key, alive as long as this."""

    def __init__(self, keys: List[str], data: List[bytes]) -> None:
        self.buffers = [ctypes.create_string_buffer(d, len(d)) for d in data]
        self.pieces = [Piece(k, ctypes.addressof(b), len(b)) for k, b in zip(keys, self.buffers)]

    def contents(self) -> List[bytes]:
        return [b.raw for b in self.buffers]


@pytest.fixture
def link(daemon: Daemon) -> Iterator[DaemonLink]:
    link = link_to(daemon.socket, arena_bytes=1 << 20)  # 4 pieces: reads in waves of 4, writes of 2
    yield link
    link.close()


def test_pieces_in_the_region_move_in_place_and_come_back_byte_identical(daemon):
    region = Region(16 * PIECE)
    link = link_to(daemon.socket, arena_bytes=1 << 20, region=region)
    try:
        session = link.session()
        data = payloads(6, seed=1)
        for i, d in enumerate(data):
            region.map[i * PIECE:(i + 1) * PIECE] = d
        keys = [f"region/{i}" for i in range(6)]
        written = transfer.write(link, session, [Piece(k, region.base + i * PIECE, PIECE) for i, k in enumerate(keys)])
        assert [r.status for r in written.staged] == [Status.OK] * 6
        assert written.written.result(30) == [True] * 6
        assert written.calls == 1 and written.copied_bytes == 0
        landed = []
        report = transfer.read(link, session, [Piece(k, region.base + (8 + i) * PIECE, PIECE) for i, k in enumerate(keys)],
                               on_piece=lambda r, view: landed.append((r.index, view)))
        assert [r.status for r in report.results] == [Status.OK] * 6 and report.calls == 1
        assert report.copied_bytes == 0  # zero copy stays zero copy
        assert sorted(i for i, _ in landed) == list(range(6)) and all(view is None for _, view in landed)
        assert [region.map[(8 + i) * PIECE:(9 + i) * PIECE] for i in range(6)] == data
    finally:
        link.close()
        region.close()


def test_other_pieces_go_through_the_arena_in_waves(link):
    session = link.session()
    data = payloads(10, seed=2)
    keys = [f"arena/{i}" for i in range(10)]
    reported: List[Tuple[int, bool]] = []
    source = Private(keys, data)
    written = transfer.write(link, session, source.pieces, on_written=lambda i, ok: reported.append((i, ok)))
    assert all(r.ok for r in written.staged)
    assert written.calls == 5  # at most half the 1 MiB arena per write: 2 pieces a wave
    assert written.copied_bytes == 10 * PIECE
    assert written.written.result(30) == [True] * 10
    assert sorted(reported) == [(i, True) for i in range(10)]  # once per piece
    target = Private(keys, [bytes(PIECE)] * 10)
    report = transfer.read(link, session, target.pieces)
    assert all(r.ok and r.size == PIECE for r in report.results)
    assert report.calls == 3  # the whole arena per read: 4 + 4 + 2
    assert report.copied_bytes == 10 * PIECE
    assert target.contents() == data
    assert session.allocator.used_bytes == 0


def test_pieces_without_memory_are_filled_and_handed_over_from_the_arena(link):
    session = link.session()
    data = payloads(3, seed=3, size=5000)  # not a multiple of the alignment
    keys = [f"fill/{i}" for i in range(3)]

    def fill(i: int, target: memoryview) -> None:
        target[:] = data[i]

    written = transfer.write(link, session, [Piece(k, None, 5000) for k in keys], fill=fill)
    assert written.written.result(30) == [True] * 3 and written.copied_bytes == 0
    got = {}
    report = transfer.read(link, session, [Piece(k, None, 5000) for k in keys],
                           on_piece=lambda r, view: got.__setitem__(r.index, bytes(view)))
    assert all(r.ok and r.size == 5000 for r in report.results)
    assert [got[i] for i in range(3)] == data


def test_calls_take_at_most_the_sessions_max_chunks_per_call(state_dir):
    daemon = Daemon(state_dir, sessions="{max_arena: 512MiB, max_chunks_per_call: 3}")
    daemon.start()
    region = Region(16 * PIECE)
    link = link_to(daemon.socket, region=region)
    try:
        session = link.session()
        assert session.client.max_chunks_per_call == 3
        keys = [f"limit/{i}" for i in range(8)]
        in_place = [Piece(k, region.base + i * PIECE, PIECE) for i, k in enumerate(keys)]
        written = transfer.write(link, session, in_place)
        assert written.calls == 3 and written.written.result(30) == [True] * 8  # 3 + 3 + 2
        report = transfer.read(link, session, in_place)
        assert report.calls == 3 and all(r.ok for r in report.results)
        # Through the arena (64 MiB: room for all 8), the per-call limit cuts the waves as well.
        target = Private(keys, [bytes(PIECE)] * 8)
        report = transfer.read(link, session, target.pieces)
        assert report.calls == 3 and all(r.ok for r in report.results)
    finally:
        link.close()
        region.close()
        daemon.stop()


def test_each_piece_is_reported_on_its_own(link):
    session = link.session()
    data = payloads(2, seed=4)
    source = Private(["own/0", "own/1"], data)
    transfer.write(link, session, source.pieces).written.result(30)
    # A miss; a piece smaller than its stored chunk (its memory would overflow); two that land.
    target = Private(["own/0", "own/absent", "own/1", "own/1"], [bytes(PIECE)] * 2 + [bytes(PIECE // 2), bytes(PIECE)])
    report = transfer.read(link, session, target.pieces)
    assert [r.status for r in report.results] == [Status.OK, Status.MISS, Status.FAILED, Status.OK]
    assert not any(r.abandoned for r in report.results)
    got = target.contents()
    assert got[1] == bytes(PIECE) and got[2] == bytes(PIECE // 2)  # untouched
    assert [got[0], got[3]] == data
    assert link.session() is session  # per-piece failures are no call failures


def test_a_call_that_fails_mid_wave_fails_its_pieces_and_the_rest(link):
    session = link.session()
    keys = [f"mid/{i}" for i in range(10)]
    data = payloads(10, seed=5)
    source = Private(keys, data)
    transfer.write(link, session, source.pieces).written.result(30)
    real = session.client.retrieve
    calls = []

    def second_call_loses_the_daemon(chunks, on_chunk=None, timeout=None):
        calls.append(len(chunks))
        if len(calls) < 2:
            return real(chunks, on_chunk=on_chunk, timeout=timeout)
        # Two chunks land, then the stream breaks.
        real(chunks[:2], on_chunk=on_chunk, timeout=timeout)
        raise Unavailable("the daemon went away")

    session.client.retrieve = second_call_loses_the_daemon
    target = Private(keys, [bytes(PIECE)] * 10)
    report = transfer.read(link, session, target.pieces)
    statuses = [r.status for r in report.results]
    assert statuses == [Status.OK] * 6 + [Status.FAILED] * 4, statuses
    # The wave's unfinished pieces may still be written by the daemon; the third wave never started.
    assert [r.abandoned for r in report.results[6:]] == [True, True, False, False]
    assert target.contents()[:6] == data[:6]
    assert calls == [4, 4] and session.dropped and link.session() is None


def test_a_refused_call_fails_its_pieces_and_keeps_the_session(link):
    session = link.session()
    real = session.client.persist_async

    def refused(chunks, **kwargs):
        raise KVStreamError(Code.RESOURCE_EXHAUSTED, "over the staging limit")

    session.client.persist_async = refused
    source = Private(["refused/0", "refused/1", "refused/2"], payloads(3, seed=6))
    written = transfer.write(link, session, source.pieces)
    assert [r.status for r in written.staged] == [Status.FAILED] * 3
    assert not any(r.abandoned for r in written.staged)
    assert written.written.result(5) == [False] * 3
    assert session.allocator.used_bytes == 0  # a refused call started no I/O: its ranges are free
    assert link.session() is session and not session.dropped
    session.client.persist_async = real
    assert transfer.write(link, session, source.pieces[:1]).written.result(30) == [True]


def test_a_piece_larger_than_the_arena_fails_alone(link):
    session = link.session()
    source = Private(["big", "small"], [bytes(2 << 20), payloads(1, seed=7)[0]])
    written = transfer.write(link, session, source.pieces)
    assert [r.status for r in written.staged] == [Status.FAILED, Status.OK]
    assert written.written.result(30) == [False, True]


def test_a_piece_the_daemon_cannot_stage_fails_alone(state_dir):
    # A chunk over the staging limit is refused alone, inside a persist that stages the others.
    daemon = Daemon(state_dir, extra_yaml="staging: {limit: 1MiB}\n")
    daemon.start()
    link = link_to(daemon.socket)
    try:
        session = link.session()
        source = Private(["stage/small", "stage/big"], [payloads(1, seed=8)[0], bytes(4 * PIECE)])
        written = transfer.write(link, session, source.pieces)
        assert [r.status for r in written.staged] == [Status.OK, Status.FAILED]
        assert "staging limit" in written.staged[1].message
        assert written.written.result(30) == [True, False]
        assert link.session() is session  # one chunk's failure is no call failure
    finally:
        link.close()
        daemon.stop()


# -- writes when the daemon's staging is full -------------------------------------------------------

def test_a_write_sends_every_requests_chunk_0_first_then_chunk_1_and_so_on(daemon, caplog):
    """Two requests of three chunks each, handed over request by request; the daemon stages four
    more chunks. In call order by depth, both requests keep their first two chunks; the two dropped
    are reported DROPPED (counted, not written, no failure and nothing logged) and are absent."""
    region = Region(8 * PIECE)
    link = link_to(daemon.socket, region=region)
    try:
        session = link.session()
        full = staging_full(session, room=4)
        keys = [f"depth/r{r}/c{c}" for r in range(2) for c in range(3)]
        pieces = [Piece(k, region.base + i * PIECE, PIECE, depth=i % 3) for i, k in enumerate(keys)]
        with caplog.at_level(logging.INFO, logger="kvstream"):
            written = transfer.write(link, session, pieces)
            flags = written.written.result(30)
        assert full.calls == [[keys[0], keys[3], keys[1], keys[4], keys[2], keys[5]]]  # depth 0, 1, 2
        assert [r.status for r in written.staged] == [Status.OK, Status.OK, Status.DROPPED] * 2
        assert written.dropped == 2 and written.staged[2].message.startswith(STAGING_FULL)
        assert flags == [True, True, False] * 2
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        assert link.session() is session and not session.dropped  # a drop fails no call
        entries, _ = session.client.lookup(keys)
        assert [e.present for e in entries] == [True, True, False] * 2
    finally:
        link.close()
        region.close()


def test_through_the_arena_the_waves_go_by_depth_too(link):
    session = link.session()
    full = staging_full(session, room=3)
    keys = [f"waves/r{r}/c{c}" for r in range(3) for c in range(2)]
    source = Private(keys, payloads(6, seed=9))
    pieces = [p._replace(depth=i % 2) for i, p in enumerate(source.pieces)]
    written = transfer.write(link, session, pieces)  # waves of 2 pieces (half the 1 MiB arena)
    assert [k for call in full.calls for k in call] == keys[0::2] + keys[1::2]
    assert [r.status for r in written.staged] == [Status.OK, Status.DROPPED] * 3
    assert written.written.result(30) == [True, False] * 3
    assert session.allocator.used_bytes == 0  # dropped pieces free their arena ranges too


# -- lookups: one daemon lookup per request, the verdict applied ------------------------------------

def test_a_lookup_asks_for_the_estimate_and_a_daemon_without_one_loads_everything(link):
    session = link.session()
    keys = [f"plain/{i}" for i in range(4)]
    source = Private(keys[:3], payloads(3, seed=10))  # alive while written
    transfer.write(link, session, source.pieces).written.result(30)
    asked = estimating(session, None)  # the daemon's own answer
    verdict = Verdict(RecomputeSettings(tokens_per_s=1000.0), "test")
    found = transfer.lookup(link, session, keys, verdict=verdict, chunk_tokens=256)
    assert asked.asked == [(keys, True)]
    assert (found.held, found.cut, found.hits) == (3, None, 3)
    assert [found.loads(i) for i in range(4)] == [True, True, True, False]
    off = transfer.lookup(link, session, keys, verdict=Verdict(RecomputeSettings(verdict=False), "test"))
    assert asked.asked[-1] == (keys, False) and off.hits == 3


def test_a_lookup_asks_chunk_by_chunk_cuts_where_loading_stops_paying_and_unlocks_past_the_cut(link):
    """Two rows (say two TP ranks) of three chunks, named row by row: the daemon is asked chunk by
    chunk, so its cumulative estimate at a chunk's last key covers that chunk of both rows. Chunk
    0 loads fast, chunk 1 slowly: the verdict loads chunk 0 alone; chunks 1 and 2 answer as misses
    and their locks are released."""
    session = link.session()
    names = [f"rows/{r}/{c}" for r in range(2) for c in range(3)]
    source = Private(names, payloads(6, seed=11))
    transfer.write(link, session, source.pieces).written.result(30)
    asked = estimating(session, lambda name: 0.001 if name.endswith("/0") else 10.0)
    verdict = Verdict(RecomputeSettings(tokens_per_s=1000.0), "test")  # 0.1 s to recompute a chunk of 100
    found = transfer.lookup(link, session, names, chunk_of=[0, 1, 2, 0, 1, 2], lock_seconds=60, verdict=verdict,
                            chunk_tokens=100)
    assert asked.asked == [([names[0], names[3], names[1], names[4], names[2], names[5]], True)]
    assert (found.held, found.cut, found.hits, found.recomputed) == (3, 1, 1, 2)
    assert [found.loads(i) for i in range(6)] == [True, False, False] * 2
    assert [e.locked for e in found.entries] == [True, False, False] * 2
    assert session.client.unlock([names[1], names[2], names[4], names[5]]) == 0  # released already
    assert session.client.unlock([names[0], names[3]]) == 2
    # A stalled tier holds chunk 1: never loaded, whatever recomputing costs.
    estimating(session, lambda name: math.inf if name.endswith("/1") else 0.001)
    stalled = transfer.lookup(link, session, names, chunk_of=[0, 1, 2, 0, 1, 2],
                              verdict=Verdict(RecomputeSettings(tokens_per_s=1e-3), "test"), chunk_tokens=100)
    assert stalled.hits == 1
