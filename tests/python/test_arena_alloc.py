"""ArenaAllocator: aligned first-fit ranges, coalescing, waiting for room."""

from __future__ import annotations

import threading

import pytest

from kvstream.arena_alloc import ArenaAllocator


def test_ranges_are_aligned_disjoint_and_coalesce():
    a = ArenaAllocator(64 << 10)
    offsets = [a.try_allocate(n) for n in (1, 4096, 5000, 100)]
    assert offsets == [0, 4096, 8192, 16384]
    assert a.used_bytes == 20480
    a.free(4096)
    a.free(8192)  # merges with the range freed before it
    assert a.try_allocate(12288) == 4096
    for off in (0, 4096, 16384):
        a.free(off)
    assert a.used_bytes == 0
    assert a.try_allocate(64 << 10) == 0  # everything coalesced back into one range


def test_full_arena_refuses_or_waits():
    a = ArenaAllocator(8192)
    assert a.allocate(8193) is None  # can never fit
    first = a.try_allocate(8192)
    assert a.try_allocate(1) is None
    assert a.allocate(1, timeout=0.05) is None
    got = []
    waiter = threading.Thread(target=lambda: got.append(a.allocate(4096, timeout=10)))
    waiter.start()
    a.free(first)
    waiter.join()
    assert got == [0]


def test_double_free_is_an_error():
    a = ArenaAllocator(8192)
    off = a.try_allocate(10)
    a.free(off)
    with pytest.raises(ValueError):
        a.free(off)
    with pytest.raises(ValueError):
        ArenaAllocator(8192, alignment=3000)
