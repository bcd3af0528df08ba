"""KVStreamBackend inside real LMCache (StorageManager, CreateStorageBackends) against a real kvstreamd."""

from __future__ import annotations

import asyncio
import math
import logging
import os
import time

import pytest

pytest.importorskip("lmcache", reason="the LMCache plugin tests need LMCache (tests/run.sh installs it)")

import torch  # noqa: E402

import kvstream  # noqa: E402
from conftest import wait_stopped  # noqa: E402
from lmcache_support import (backend_of, free_chunk_buffers, key, make_storage_manager, put, random_chunks,  # noqa: E402
                             shm_pool)


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def captured():
    handler = Captured()
    log = logging.getLogger("kvstream.daemon_link")
    backend_log = logging.getLogger("kvstream.lmcache.backend")
    for lg in (log, backend_log):
        lg.addHandler(handler)
    yield handler
    for lg in (log, backend_log):
        lg.removeHandler(handler)


@pytest.fixture(params=["shm", "anonymous"])
def manager(daemon, request):
    """LMCache with its CPU pool in POSIX shared memory (extra_config shm_name: gets land in place)
    or in private memory (gets are copied through the session arena)."""
    sm = make_storage_manager(daemon.socket, **shm_pool(request.param == "shm"))
    assert backend_of(sm).zero_copy == (request.param == "shm")
    yield sm
    sm.close()


def check_and_release(objs, tensors):
    assert len(objs) == len(tensors)
    for obj, expected in zip(objs, tensors):
        assert obj is not None
        assert torch.equal(obj.tensor, expected)
        obj.ref_count_down()


def daemon_steps(socket_path):
    with kvstream.Client.connect(socket_path) as c:
        return c.stats().steps, c.steps(1)


def test_put_and_get_through_lmcache_are_byte_identical_in_one_retrieve(daemon, manager):
    keys = [key(i) for i in range(8)]
    tensors = put(manager, keys)
    hits, mapping = manager.batched_contains(keys)
    assert hits == 8 and list(mapping) == ["kvstream"]
    steps_before, _ = daemon_steps(daemon.socket)
    objs = manager.batched_get(keys, location="kvstream")
    steps_after, last = daemon_steps(daemon.socket)
    check_and_release(objs, tensors)
    assert steps_after == steps_before + 1, "a batched get is ONE daemon retrieve"
    assert last[0].chunks == 8 and last[0].hits == 8
    # The plain blocking path (StorageManager.get) reaches the plugin too.
    obj = manager.get(keys[3])
    check_and_release([obj], [tensors[3]])


def test_put_honours_refcounts_and_completion_callbacks(daemon, manager):
    backend = backend_of(manager)
    objs, tensors = random_chunks(manager, 3, seed=1)
    keys = [key(100 + i) for i in range(3)]
    done = []
    futures = backend.batched_submit_put_task(keys, objs, on_complete_callback=done.append)
    assert len(futures) == 3
    assert all(f.result(30) for f in futures)
    assert backend.flush(30)
    assert sorted(k.chunk_hash for k in done) == [100, 101, 102]  # once per key, once written
    assert [o.get_ref_count() for o in objs] == [1, 1, 1]  # the backend dropped its reference
    assert not any(backend.exists_in_put_tasks(k) for k in keys)
    # A put of keys the daemon already holds completes without writing them again.
    with kvstream.Client.connect(daemon.socket) as c:
        written = sum(t.replicas_written for t in c.stats().tiers)
        futures = backend.batched_submit_put_task(keys, objs, on_complete_callback=done.append)
        assert all(f.result(30) for f in futures)
        assert sum(t.replicas_written for t in c.stats().tiers) == written
    for o in objs:
        o.ref_count_down()


def test_prefix_hits_and_removal(daemon, manager):
    put(manager, [key(i) for i in (0, 1, 2, 4)])
    backend = backend_of(manager)
    assert backend.batched_contains([key(i) for i in range(5)]) == 3
    assert backend.contains(key(4)) and not backend.contains(key(3))
    assert manager.remove(key(1)) >= 1
    assert backend.batched_contains([key(i) for i in range(5)]) == 1
    assert backend.get_blocking(key(1)) is None


def test_restarted_daemon_still_hits(daemon, manager):
    keys = [key(i) for i in range(4)]
    tensors = put(manager, keys, seed=2)
    daemon.restart()
    backend = backend_of(manager)
    assert backend.batched_contains(keys) == 4
    check_and_release(backend.batched_get_blocking(keys), tensors)


def test_stopped_daemon_means_misses_and_a_clear_error_then_recovery(daemon, manager, captured):
    keys = [key(i) for i in range(2)]
    tensors = put(manager, keys, seed=3)
    backend = backend_of(manager)
    daemon.stop()
    assert manager.contains(keys[0]) is None
    assert backend.batched_contains(keys) == 0
    assert backend.batched_get_blocking(keys) == [None, None]
    assert manager.batched_get(keys, location="kvstream") == [None, None]
    objs, _ = random_chunks(manager, 1, seed=4)
    manager.batched_put([key(50)], objs)  # dropped, no exception
    assert backend.flush(10)
    assert any("unavailable" in m for m in captured.messages), captured.messages
    daemon.start()
    deadline = time.monotonic() + 5
    while backend.batched_contains(keys) != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    check_and_release(backend.batched_get_blocking(keys), tensors)
    assert any("reconnected" in m for m in captured.messages), captured.messages


def test_lmcache_starts_while_the_daemon_is_down(state_dir, captured):
    from conftest import Daemon

    daemon = Daemon(state_dir)
    sm = make_storage_manager(daemon.socket)
    try:
        backend = backend_of(sm)
        assert not backend.contains(key(1))
        assert any("unavailable" in m for m in captured.messages)
        daemon.start()
        deadline = time.monotonic() + 5
        while backend.link.session() is None and time.monotonic() < deadline:  # reconnects in the background
            time.sleep(0.01)
        tensors = put(sm, [key(1)], seed=5)
        check_and_release([sm.get(key(1))], tensors)
    finally:
        sm.close()
        daemon.stop()


def test_scheduler_role_looks_up_without_a_session(daemon, manager):
    put(manager, [key(7)], seed=6)
    scheduler = make_storage_manager(daemon.socket, role="scheduler")
    try:
        backend = backend_of(scheduler)
        assert not backend.with_session
        assert backend.contains(key(7)) and not backend.contains(key(8))
        assert backend.get_blocking(key(7)) is None
        with pytest.raises(RuntimeError):
            backend.get_allocator_backend()
        with kvstream.Client.connect(daemon.socket) as c:
            assert c.stats().sessions == 1  # only the worker's
    finally:
        scheduler.close()


def test_pins_lock_keys_in_the_daemon_until_unpinned(daemon, manager):
    keys = [key(i) for i in range(20, 23)]
    put(manager, keys, seed=8)
    backend = backend_of(manager)
    names = [k.to_string() for k in keys]
    assert backend.pin(keys[0]) and not backend.pin(key(99))  # an absent key cannot be pinned
    assert backend.unpin(keys[0]) and not backend.unpin(keys[0])
    assert backend.batched_contains(keys, pin=True) == 3  # LMCache's lookup-and-pin
    with kvstream.Client.connect(daemon.socket) as c:
        assert c.unlock(names) == 3  # each was locked once, in the daemon
        assert c.unlock(names) == 0
    assert backend.batched_contains(keys) == 3
    with kvstream.Client.connect(daemon.socket) as c:
        assert c.unlock(names) == 0  # a plain lookup locks nothing


def test_async_lookup_and_load_pair(daemon, manager):
    keys = [key(i) for i in range(4)]
    tensors = put(manager, keys, seed=7)
    backend = backend_of(manager)
    free = free_chunk_buffers(manager)
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(backend.batched_async_contains("req-1", keys, pin=True)) == 4
        objs = loop.run_until_complete(backend.batched_get_non_blocking("req-1", keys))
        # Not pinned: the engine drops chunks it does not use with ref_count_down alone.
        assert not any(o.is_pinned for o in objs)
        check_and_release(objs, tensors)
        assert free_chunk_buffers(manager) == free
        manager.remove(keys[2])
        objs = loop.run_until_complete(backend.batched_get_non_blocking("req-2", keys))
        check_and_release(objs, tensors[:2])  # the leading chunks that could be read
        assert free_chunk_buffers(manager) == free  # the chunk after the gap was released too
    finally:
        loop.close()


def test_gets_larger_than_the_arena_run_in_waves(state_dir):
    from conftest import Daemon

    daemon = Daemon(state_dir)
    daemon.start()
    sm = make_storage_manager(daemon.socket, **{"kvstream.arena_bytes": 8 << 20})  # holds 1 chunk of 4 MiB + header
    try:
        keys = [key(i) for i in range(5)]
        tensors = put(sm, keys, seed=8)
        check_and_release(backend_of(sm).batched_get_blocking(keys), tensors)
    finally:
        sm.close()
        daemon.stop()


def test_foreign_payload_under_a_key_is_a_miss_not_an_exception(daemon, manager):
    k = key(9)
    with kvstream.Client.attach(daemon.socket, arena_bytes=1 << 20) as c:
        c.arena[0:4096] = b"\x01" * 4096
        c.persist([(k.to_string(), 0, 4096)])
    assert backend_of(manager).contains(k)
    assert backend_of(manager).get_blocking(k) is None


def test_each_rank_is_a_session(daemon):
    from lmcache.v1.event_manager import EventManager
    from lmcache.v1.storage_backend.storage_manager import StorageManager
    from lmcache_support import make_config, make_metadata

    managers = [StorageManager(config=make_config(daemon.socket), metadata=make_metadata(worker_id=r, world_size=2),
                               event_manager=EventManager()) for r in range(2)]
    try:
        with kvstream.Client.connect(daemon.socket) as c:
            assert c.stats().sessions == 2
    finally:
        for m in managers:
            m.close()


def test_bad_plugin_settings_are_clear_errors():
    from kvstream.lmcache import Settings

    with pytest.raises(ValueError, match="kvstream.arena_bytes"):
        Settings({"kvstream.arena_bytes": "lots"})
    with pytest.raises(ValueError, match="positive"):
        Settings({"kvstream.io_timeout": 0})
    assert Settings(None).socket_path == "/run/kvstream/kvstreamd.sock"
    from kvstream.lmcache import extra_config

    assert Settings(extra_config("/s", arena_bytes=4096)).arena_bytes == 4096
    with pytest.raises(ValueError, match="unknown kvstream settings"):
        extra_config("/s", arena=1)
    with pytest.raises(ValueError, match="kvstream.verdict"):
        Settings({"kvstream.verdict": "maybe"})
    with pytest.raises(ValueError, match="kvstream.model_shape"):
        Settings({"kvstream.model_shape": {"layers": -1}})
    recompute = Settings(extra_config("/s", verdict="off", recompute_tflops=100, model_shape={"layers": 2})).recompute
    assert (recompute.verdict, recompute.tflops, recompute.shape) == (False, 100.0, {"layers": 2})


def test_a_refused_session_is_a_clear_error_not_an_outage(daemon, captured):
    sm = make_storage_manager(daemon.socket, **{"kvstream.arena_bytes": 1 << 40})  # above sessions.max_arena
    try:
        assert not backend_of(sm).contains(key(1))
        assert any("refused the session" in m and "INVALID_ARGUMENT" in m for m in captured.messages), captured.messages
    finally:
        sm.close()


def test_puts_whose_written_report_never_comes_are_finished_as_failed(daemon, manager):
    """The daemon takes the bytes (STAGED) and the stream then ends without WRITTEN (it went away):
    the puts must not stay pending forever (flush, exists_in_put_tasks, futures, references)."""
    import concurrent.futures

    backend = backend_of(manager)
    session = backend.link.session()
    real = session.client.persist_async

    def staged_then_lost(chunks, on_written=None, check=True, timeout=None):
        real(chunks, check=False, timeout=timeout).result()  # really staged and written, events dropped
        lost = concurrent.futures.Future()
        lost.set_exception(kvstream.Unavailable("the persist stream ended"))
        return lost

    session.client.persist_async = staged_then_lost
    objs, _ = random_chunks(manager, 2, seed=9)
    done = []
    futures = backend.batched_submit_put_task([key(70), key(71)], objs, on_complete_callback=done.append)
    assert [f.result(30) for f in futures] == [False, False]
    assert backend.flush(5) and not backend.exists_in_put_tasks(key(70))
    assert done == [] and [o.get_ref_count() for o in objs] == [1, 1]
    for o in objs:
        o.ref_count_down()


def test_a_retrieve_that_ends_without_a_chunk_drops_the_session_and_misses_it(daemon, manager):
    keys = [key(i) for i in range(3)]
    tensors = put(manager, keys, seed=10)
    backend = backend_of(manager)
    session = backend.link.session()
    real = session.client.retrieve

    def loses_last_completion(chunks, on_chunk=None, timeout=None):
        return real(chunks, on_chunk=lambda r: r.index != len(chunks) - 1 and on_chunk(r), timeout=timeout)

    session.client.retrieve = loses_last_completion
    objs = backend.batched_get_blocking(keys)
    assert objs[2] is None
    check_and_release(objs[:2], tensors[:2])
    assert backend.link.session() is not session  # the arena it may still write into is dropped
    deadline = time.monotonic() + 5
    while backend.link.session() is None and time.monotonic() < deadline:  # reattach after retry_interval
        time.sleep(0.01)
    check_and_release(backend.batched_get_blocking(keys), tensors)


def test_a_killed_daemon_does_not_stall_lmcache(daemon, manager):
    """SIGKILL leaves the socket file behind: reconnect attempts must fail at once, not after
    kvstream.connect_timeout each, or every LMCache lookup would stall while the daemon is dead."""
    keys = [key(i) for i in range(2)]
    put(manager, keys, seed=11)
    daemon.process.kill()
    daemon.process.wait()
    daemon.process = None
    backend = backend_of(manager)
    slowest = 0.0
    for _ in range(20):  # with retry_interval 0.05 s, several reconnect attempts
        start = time.monotonic()
        assert backend.batched_contains(keys) == 0
        slowest = max(slowest, time.monotonic() - start)
        time.sleep(0.05)
    assert slowest < 0.5, slowest  # no call waits for a connect attempt (connect_timeout is 1 s)


def test_a_hung_daemon_costs_one_lookup_timeout_then_misses_at_once(daemon, captured):
    import signal

    sm = make_storage_manager(daemon.socket, **{"kvstream.lookup_timeout": 0.5})
    try:
        keys = [key(i) for i in range(2)]
        put(sm, keys, seed=12)
        backend = backend_of(sm)
        daemon.process.send_signal(signal.SIGSTOP)
        wait_stopped(daemon.process.pid)  # every thread, before the first lookup
        try:
            start = time.monotonic()
            assert backend.batched_contains(keys) == 0  # waits lookup_timeout, then gives up on the session
            first = time.monotonic() - start
            start = time.monotonic()
            for _ in range(20):  # reconnects run in the background: callers never wait for them
                assert backend.batched_contains(keys) == 0
                time.sleep(0.02)
            rest = time.monotonic() - start
        finally:
            daemon.process.send_signal(signal.SIGCONT)
        assert first < 3 and rest < 3, (first, rest)  # lookup_timeout 0.5 s; connect_timeout 1 s per attempt
        deadline = time.monotonic() + 10
        while backend.batched_contains(keys) != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert backend.batched_contains(keys) == 2
    finally:
        sm.close()


# -- load or recompute, and a daemon whose staging is full ------------------------------------------

RECOMPUTE_A_CHUNK = {"kvstream.recompute_tokens_per_s": 2560}  # 0.1 s to recompute a 256-token chunk


def slow_from(n: int, seconds: float = 10.0):
    """Load seconds per key: fast (1 ms) for chunks below `n` of the key(i) numbering, `seconds` from n on."""
    return lambda name: 0.001 if int(name.rsplit("@", 2)[-2], 16) < n else seconds


def test_lookups_contain_only_the_chunks_worth_loading(daemon):
    """LMCache's lookup (the StorageManager's batched_contains, pins included) and the block mapping
    of its retrieve see the prefix up to the verdict's cut: all of a fast tier, none at 10 s a
    chunk, the fast chunks before slow ones, none past a stalled tier; pins past the cut released."""
    from conftest import estimating

    sm = make_storage_manager(daemon.socket, **RECOMPUTE_A_CHUNK)
    try:
        keys = [key(40 + i) for i in range(6)]
        put(sm, keys, seed=20)
        backend = backend_of(sm)
        asked = estimating(backend.link.session(), lambda name: 0.001)
        assert backend.batched_contains(keys) == 6 and asked.asked[-1][1]  # the estimate was asked for
        estimating(backend.link.session(), lambda name: 10.0)
        assert backend.batched_contains([key(50 + i) for i in range(3)]) == 0  # absent: nothing to cut
        assert backend.batched_contains(keys) == 6  # promised by the verdict above: not cut again
        backend.lookups._clock = lambda: time.monotonic() + 3600  # the promises have run out
        assert backend.batched_contains(keys) == 0
        estimating(backend.link.session(), slow_from(43))
        assert sm.batched_contains(keys, pin=True) == (3, {"kvstream": keys[:3]})
        names = [k.to_string() for k in keys]
        with kvstream.Client.connect(daemon.socket) as c:
            assert c.unlock(names[3:]) == 0  # released at once, past the cut
            assert c.unlock(names[:3]) == 3
        assert backend.status()["recomputed_chunks"] == 6 + 3
        estimating(backend.link.session(), lambda name: math.inf if name.endswith(f"@{42:x}@bfloat16") else 0.001)
        backend.lookups._clock = lambda: time.monotonic() + 7200
        assert backend.batched_contains(keys) == 2  # a stalled tier holds chunk 2
    finally:
        sm.close()


def test_the_verdict_off_loads_every_hit_and_asks_for_no_estimate(daemon):
    from conftest import estimating

    sm = make_storage_manager(daemon.socket, **RECOMPUTE_A_CHUNK, **{"kvstream.verdict": "off"})
    try:
        keys = [key(60 + i) for i in range(3)]
        put(sm, keys, seed=21)
        backend = backend_of(sm)
        asked = estimating(backend.link.session(), lambda name: math.inf)
        assert backend.batched_contains(keys) == 3 and asked.asked == [([k.to_string() for k in keys], False)]
    finally:
        sm.close()


def test_puts_the_daemon_drops_are_counted_not_failed(daemon, captured):
    """Staging takes two more chunks: a put of four keeps its first two (they go out in prefix
    order), the other two finish as not stored, counted, with nothing logged."""
    from conftest import staging_full

    sm = make_storage_manager(daemon.socket)
    try:
        backend = backend_of(sm)
        full = staging_full(backend.link.session(), room=2)
        objs, _ = random_chunks(sm, 4, seed=22)
        keys = [key(80 + i) for i in range(4)]
        done = []
        futures = backend.batched_submit_put_task(keys, objs, on_complete_callback=done.append)
        assert [f.result(30) for f in futures] == [True, True, False, False]
        assert backend.flush(5) and sorted(k.chunk_hash for k in done) == [80, 81]
        assert full.calls == [[k.to_string() for k in keys]]
        assert backend.status()["puts_dropped"] == 2 and captured.messages == []
        assert backend.batched_contains(keys) == 2
        for o in objs:
            o.ref_count_down()
    finally:
        sm.close()
