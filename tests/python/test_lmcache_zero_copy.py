"""The LMCache plugin's zero-copy gets: LMCache's CPU pool in POSIX shared memory (extra_config
shm_name) handed to kvstreamd as a client region, chunks landing in its MemoryObjs in place.

test_lmcache_backend.py runs every plugin test on both pools; these check what only this path has:
that no chunk was copied, where the objects live, that their memory returns to LMCache, and the
fallbacks (zero_copy off, a region the daemon refuses, a retrieve that fails midway)."""

from __future__ import annotations

import logging
import os

import pytest

pytest.importorskip("lmcache", reason="the LMCache plugin tests need LMCache (tests/run.sh installs it)")

import torch  # noqa: E402

from lmcache_support import (backend_of, free_chunk_buffers, key, make_storage_manager, put, random_chunks,  # noqa: E402
                             shm_pool)


def pool_range(sm):
    buffer = sm.local_cpu_backend.memory_allocator.buffer
    return buffer.data_ptr(), buffer.data_ptr() + buffer.numel()


@pytest.fixture
def shared(daemon):
    sm = make_storage_manager(daemon.socket, **shm_pool())
    yield sm
    sm.close()


def test_gets_land_in_lmcache_pool_without_a_copy_and_give_the_memory_back(shared):
    backend = backend_of(shared)
    assert backend.zero_copy and backend.status()["pool"].startswith("/dev/shm/kvstest_")
    keys = [key(i) for i in range(6)]
    tensors = put(shared, keys, seed=1)
    free_before = free_chunk_buffers(shared)
    objs = backend.batched_get_blocking(keys)
    start, end = pool_range(shared)
    for obj, expected in zip(objs, tensors):
        assert obj is not None and torch.equal(obj.tensor, expected)
        assert start <= obj.data_ptr and obj.data_ptr + obj.get_size() <= end  # in LMCache's pool
        assert obj.get_shapes() == [expected.shape] and obj.get_dtypes() == [torch.bfloat16]
        assert obj.get_ref_count() == 1
    status = backend.status()
    assert status["in_place"] == 6 and status["copied"] == 0, status
    assert free_chunk_buffers(shared) < free_before  # the objects hold pool memory...
    for obj in objs:
        obj.ref_count_down()
    assert free_chunk_buffers(shared) == free_before  # ...and give all of it back


def test_lmcache_takes_in_place_chunks_into_its_cpu_cache(daemon):
    """StorageManager.get writes a plugin's object back into LocalCPUBackend: the in-place object
    must serve from there too, and be freed when LMCache evicts it."""
    sm = make_storage_manager(daemon.socket, local_cpu=True, **shm_pool())
    try:
        keys = [key(i) for i in range(3)]
        tensors = put(sm, keys, seed=2)
        for k in keys:
            sm.local_cpu_backend.remove(k)  # only the daemon holds them now
        for k, expected in zip(keys, tensors):
            obj = sm.get(k)
            assert obj is not None and torch.equal(obj.tensor, expected)
            obj.ref_count_down()
        assert backend_of(sm).status()["in_place"] == 3
        for k, expected in zip(keys, tensors):  # now from LMCache's CPU cache, not the daemon
            assert sm.local_cpu_backend.contains(k)
            obj = sm.local_cpu_backend.get_blocking(k)
            assert torch.equal(obj.tensor, expected)
            obj.ref_count_down()
    finally:
        sm.close()


def test_prefetched_chunks_land_in_place(shared):
    backend = backend_of(shared)
    keys = [key(i) for i in range(4)]
    tensors = put(shared, keys, seed=3)
    assert backend.prefetch(keys) == 4
    objs = backend.batched_get_blocking(keys)
    for obj, expected in zip(objs, tensors):
        assert obj is not None and torch.equal(obj.tensor, expected)
        obj.ref_count_down()
    assert backend.status()["in_place"] == 4 and backend.status()["copied"] == 0


def test_an_unreadable_chunk_in_place_is_a_miss_and_its_memory_returns(shared, daemon):
    import kvstream

    backend = backend_of(shared)
    k = key(9)
    with kvstream.Client.attach(daemon.socket, arena_bytes=1 << 20) as c:
        c.arena[0:8192] = b"\x01" * 8192
        c.persist([(k.to_string(), 0, 8192)])
    free_before = free_chunk_buffers(shared)
    assert backend.get_blocking(k) is None
    assert free_chunk_buffers(shared) == free_before


def test_zero_copy_off_copies_through_the_arena(daemon):
    sm = make_storage_manager(daemon.socket, **{"kvstream.zero_copy": "false"}, **shm_pool())
    try:
        backend = backend_of(sm)
        assert not backend.zero_copy and backend.status()["pool"] is None
        keys = [key(i) for i in range(2)]
        tensors = put(sm, keys, seed=4)
        for obj, expected in zip(backend.batched_get_blocking(keys), tensors):
            assert torch.equal(obj.tensor, expected)
            obj.ref_count_down()
        assert backend.status()["copied"] == 2 and backend.status()["in_place"] == 0
    finally:
        sm.close()


def test_a_pool_the_daemon_refuses_falls_back_to_copies(state_dir, caplog):
    from conftest import Daemon

    daemon = Daemon(state_dir, sessions="{max_arena: 512MiB, arena_budget: 128MiB}")  # the pool is 256 MiB
    daemon.start()
    try:
        with caplog.at_level(logging.WARNING, logger="kvstream.lmcache.backend"):
            sm = make_storage_manager(daemon.socket, **shm_pool())
        try:
            backend = backend_of(sm)
            assert not backend.zero_copy and backend.status()["pool"] is not None
            assert any("cannot be handed to kvstreamd" in r.getMessage() for r in caplog.records)
            keys = [key(i) for i in range(2)]
            tensors = put(sm, keys, seed=5)
            for obj, expected in zip(backend.batched_get_blocking(keys), tensors):
                assert torch.equal(obj.tensor, expected)
                obj.ref_count_down()
            assert backend.status()["copied"] == 2
        finally:
            sm.close()
    finally:
        daemon.stop()


def test_a_retrieve_that_fails_midway_holds_back_the_memory_reads_may_still_land_in(shared):
    """A retrieve that times out or loses its stream may still have reads in flight into the pool:
    their objects are never handed back to LMCache for reuse (held back until close)."""
    import kvstream

    backend = backend_of(shared)
    keys = [key(i) for i in range(3)]
    tensors = put(shared, keys, seed=6)
    session = backend.link.session()
    real = session.client.retrieve

    def first_then_lost(chunks, on_chunk=None, timeout=None):
        real(chunks, on_chunk=lambda r: r.index == 0 and on_chunk(r), timeout=timeout)
        raise kvstream.Unavailable("the retrieve stream ended")

    session.client.retrieve = first_then_lost
    free_before = free_chunk_buffers(shared)
    objs = backend.batched_get_blocking(keys)
    assert objs[1] is None and objs[2] is None and torch.equal(objs[0].tensor, tensors[0])
    objs[0].ref_count_down()
    status = backend.status()
    assert status["held_back_bytes"] >= 2 * tensors[0].numel() * 2, status
    assert free_chunk_buffers(shared) <= free_before - 2  # two chunks' memory (plus headers) is not reused


def test_a_pool_whose_shm_name_another_process_took_is_not_handed_over():
    """LMCache unlinks a segment of the same name before creating its pool, so two processes given
    one shm_name leave the first mapping a deleted file while the name opens the second's: the
    first must not hand the second's memory to the daemon."""
    import ctypes
    from multiprocessing import shared_memory

    from kvstream.lmcache.shared_pool import SharedPool

    name, size = f"kvstest_{os.getpid()}_reused", 1 << 20
    first = shared_memory.SharedMemory(name=name, create=True, size=size)
    shared_memory.SharedMemory(name=name).unlink()  # what the second process's LMCache does first
    second = shared_memory.SharedMemory(name=name, create=True, size=size)
    views = [(ctypes.c_char * size).from_buffer(m.buf) for m in (first, second)]
    try:
        assert SharedPool.find(ctypes.addressof(views[0]), size) is None
        pool = SharedPool.find(ctypes.addressof(views[1]), size)
        assert pool is not None and pool.path == f"/dev/shm/{name}" and pool.offset_of(ctypes.addressof(views[1]), 4096) == 0
        pool.close()
    finally:
        del views
        first.close()
        second.close()
        second.unlink()


def test_a_chunk_in_a_format_the_pool_does_not_hold_is_copied_and_its_landing_memory_returned(shared, daemon):
    """A stored BINARY_BUFFER chunk (LMCache keeps those outside its pinned pool) lands in the pool,
    then is copied into an object of LMCache's byte-buffer allocator; the pool memory goes back."""
    import kvstream
    from kvstream.lmcache.chunk_codec import ChunkLayout

    backend = backend_of(shared)
    k = key(12)
    data = bytes(range(256)) * 64
    header = ChunkLayout("BINARY_BUFFER", [[len(data)]], ["uint8"], len(data)).encode_header()
    with kvstream.Client.attach(daemon.socket, arena_bytes=1 << 20) as c:
        c.arena[0:len(header) + len(data)] = header + data
        c.persist([(k.to_string(), 0, len(header) + len(data))])
    free_before = free_chunk_buffers(shared)
    obj = backend.get_blocking(k)
    assert obj is not None and bytes(obj.byte_array) == data
    assert backend.status()["copied"] == 1 and backend.status()["in_place"] == 0
    obj.ref_count_down()
    assert free_chunk_buffers(shared) == free_before


def test_a_narrowed_chunk_lands_with_its_own_size_not_its_shapes(shared):
    """A MemoryObj LMCache narrowed (set_used_size) is stored with fewer bytes than its shapes
    imply: it comes back with exactly those bytes (copied), never a view past its allocation."""
    backend = backend_of(shared)
    objs, tensors = random_chunks(shared, 1, seed=13)
    obj = objs[0]
    used = obj.get_size() // 2
    obj.set_used_size(used)
    expected = bytes(obj.byte_array)
    k = key(13)
    shared.batched_put([k], objs)
    assert backend.flush(30)
    got = backend.get_blocking(k)
    assert got is not None and got.get_size() == used and bytes(got.byte_array) == expected
    assert backend.status()["in_place"] == 0 and backend.status()["copied"] == 1
    got.ref_count_down()


def test_a_chunk_lmcache_cannot_allocate_is_one_miss_not_a_failed_get(shared, daemon):
    """LocalCPUBackend refuses some formats (UNDEFINED) with an exception: that chunk is a miss;
    the get's other chunks land and the session stays."""
    import kvstream
    from kvstream.lmcache.chunk_codec import ChunkLayout

    backend = backend_of(shared)
    good = [key(20)]
    tensors = put(shared, good, seed=14)
    bad = key(21)
    data = bytes(4096)
    header = ChunkLayout("UNDEFINED", [[len(data)]], ["uint8"], len(data)).encode_header()
    with kvstream.Client.attach(daemon.socket, arena_bytes=1 << 20) as c:
        c.arena[0:len(header) + len(data)] = header + data
        c.persist([(bad.to_string(), 0, len(header) + len(data))])
    session = backend.link.session()
    objs = backend.batched_get_blocking([good[0], bad])
    assert objs[1] is None and objs[0] is not None and torch.equal(objs[0].tensor, tensors[0])
    objs[0].ref_count_down()
    assert backend.link.session() is session  # not dropped
