"""KVStreamL2Adapter (LMCache multi-process mode) built by LMCache's own --l2-adapter parsing and
adapter factory, on real LMCache L1 memory (L1MemoryManager), against a real kvstreamd."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("lmcache", reason="the LMCache L2 adapter tests need LMCache (tests/run.sh installs it)")

import torch  # noqa: E402
from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey  # noqa: E402
from lmcache.v1.distributed.l2_adapters import create_l2_adapter  # noqa: E402

import kvstream  # noqa: E402
from kvstream.lmcache.l2_adapter import (  # noqa: E402
    KVStreamL2Adapter,
    KVStreamL2AdapterConfig,
    l2_adapter_spec,
    object_key_name,
)
from lmcache_support import (allocate, create_adapter, keys_for, load, lookup, make_l1, parse_spec,  # noqa: E402
                             store, wait_for)


@pytest.fixture(params=["shm", "anonymous"])
def l1(request):
    """LMCache's L1 memory: a POSIX-shm pool (zero copy) or an anonymous one (the copy path)."""
    manager = make_l1(request.param)
    yield manager
    manager.close()


@pytest.fixture
def make_adapter(l1):
    adapters = []

    def make(socket_path: str, **params):
        adapter = create_adapter(socket_path, l1, **params)
        adapters.append(adapter)
        return adapter

    yield make
    for adapter in adapters:
        adapter.close()


def daemon_stats(socket_path):
    with kvstream.Client.connect(socket_path) as c:
        return c.stats()


def test_the_json_config_builds_the_adapter_through_lmcache_plugin_factory(daemon, make_adapter, l1):
    adapter = make_adapter(daemon.socket, lock_seconds=30)
    assert isinstance(adapter, KVStreamL2Adapter)
    assert isinstance(adapter.config, KVStreamL2AdapterConfig)
    assert adapter.config.socket == daemon.socket and adapter.config.lock_seconds == 30
    fds = {adapter.get_store_event_fd(), adapter.get_lookup_and_lock_event_fd(), adapter.get_load_event_fd()}
    assert len(fds) == 3
    status = adapter.report_status()
    assert status["is_healthy"] and status["zero_copy"] == (l1.kind == "shm")
    assert daemon_stats(daemon.socket).sessions == 1
    with pytest.raises(ValueError, match="unknown kvstream adapter_params"):
        create_l2_adapter(parse_spec(l2_adapter_spec(daemon.socket, sockets="x")), None)
    with pytest.raises(ValueError, match="lock_seconds"):
        create_l2_adapter(parse_spec(l2_adapter_spec(daemon.socket, lock_seconds=0)), None)


def test_object_keys_map_to_distinct_stable_daemon_keys():
    base = ObjectKey(chunk_hash=b"\x01\x02", model_name="org/m", kv_rank=0x01020304)
    assert object_key_name(base) == "lmcache/org/m@0x01020304@0@0102"
    variants = [base, ObjectKey(b"\x01\x02", "org/m", 0x01020305), ObjectKey(b"\x01\x02", "org/m2", 0x01020304),
                ObjectKey(b"\x01\x03", "org/m", 0x01020304), ObjectKey(b"\x01\x02", "org/m", 0x01020304, 1),
                ObjectKey(b"\x01\x02", "org/m", 0x01020304, 0, "alice"), ObjectKey(b"\x01\x02", "org/m", 0x01020304, 0, "bob")]
    assert len({object_key_name(k) for k in variants}) == len(variants)
    assert object_key_name(variants[5]).endswith("@alice")


def test_store_lookup_lock_load_unlock_round_trip(daemon, make_adapter, l1):
    adapter = make_adapter(daemon.socket)
    keys = keys_for(8)
    objs = allocate(l1, 8, seed=1)
    result = store(adapter, keys, objs)
    assert result.is_successful() and result.bytes_transferred() == 8 * objs[0].get_size()
    assert adapter.get_usage().total_bytes_used == 8 * objs[0].get_size()
    # A second store of the same keys writes nothing (the daemon holds them) and succeeds.
    again = store(adapter, keys, objs)
    assert again.is_successful() and again.bytes_transferred() == 0

    unknown = keys_for(2, start=100)
    assert lookup(adapter, keys + unknown) == list(range(8))

    # The lookup took one daemon lock per key: a second client can release exactly one.
    names = [object_key_name(k) for k in keys]
    with kvstream.Client.connect(daemon.socket) as c:
        assert lookup(adapter, keys) == list(range(8))  # two locks each now
        assert c.unlock(names) == 8
        adapter.submit_unlock(keys)
        lookup(adapter, unknown)  # the lookup worker runs the unlock before this (FIFO)
        assert c.unlock(names) == 0

    steps_before = daemon_stats(daemon.socket).steps
    fresh = allocate(l1, 8, seed=None)
    assert load(adapter, keys, fresh) == list(range(8))
    assert daemon_stats(daemon.socket).steps == steps_before + 1  # ONE retrieve for the task
    for got, want in zip(fresh, objs):
        assert bytes(got.byte_array) == bytes(want.byte_array)
    status = adapter.report_status()
    assert status["zero_copy"] == (l1.kind == "shm") and status["loaded"] == 8
    l1.free(objs + fresh)


def test_load_tasks_waiting_together_share_one_retrieve_and_are_answered_apart(daemon, make_adapter, l1):
    adapter = make_adapter(daemon.socket)
    keys = keys_for(12)
    objs = allocate(l1, 12, seed=4)
    assert store(adapter, keys[:10], objs[:10]).is_successful()  # the last two are misses
    fresh = allocate(l1, 12, seed=None)
    steps_before = daemon_stats(daemon.socket).steps
    # Hold the load worker with a first task, so the next three wait together behind it.
    tids = [adapter.submit_load_task(keys[i:i + 3], fresh[i:i + 3]) for i in range(0, 12, 3)]
    got = {}
    deadline = time.monotonic() + 30
    while len(got) < len(tids) and time.monotonic() < deadline:
        for tid in tids:
            if tid not in got:
                bitmap = adapter.query_load_result(tid)
                if bitmap is not None:
                    got[tid] = bitmap.get_indices_list()
        time.sleep(0.01)
    assert [got[t] for t in tids] == [[0, 1, 2], [0, 1, 2], [0, 1, 2], [0]]
    assert daemon_stats(daemon.socket).steps - steps_before < len(tids)  # tasks shared retrieves
    for got_obj, want in zip(fresh[:10], objs[:10]):
        assert bytes(got_obj.byte_array) == bytes(want.byte_array)
    l1.free(objs + fresh)


def test_unknown_keys_and_wrong_sizes_are_misses(daemon, make_adapter, l1):
    adapter = make_adapter(daemon.socket)
    keys = keys_for(3)
    objs = allocate(l1, 3, seed=2)
    assert store(adapter, keys[:2], objs[:2]).is_successful()
    assert lookup(adapter, keys) == [0, 1]
    assert lookup(adapter, keys_for(2, start=50)) == []
    fresh = allocate(l1, 3, seed=None)
    assert load(adapter, keys, fresh) == [0, 1]
    assert not any(bytes(fresh[2].byte_array))  # a miss leaves its buffer untouched
    # A chunk stored under another key size is not loaded into a buffer of a different size.
    err, small = l1.allocate(MemoryLayoutDesc([torch.Size((4, 2, 32, 256))], [torch.bfloat16]), 1)
    assert load(adapter, keys[:1], small) == []
    # cache_salt isolates: the same hash under another salt is another key.
    salted = keys_for(1, cache_salt="alice")
    assert lookup(adapter, salted) == []
    assert store(adapter, salted, objs[2:]).is_successful()
    assert lookup(adapter, salted) == [0] and lookup(adapter, keys_for(1, start=2)) == []
    l1.free(objs + fresh + small)


def test_a_daemon_restart_gives_failures_not_exceptions_then_recovers(daemon, make_adapter, l1):
    adapter = make_adapter(daemon.socket)
    keys = keys_for(4)
    objs = allocate(l1, 4, seed=3)
    assert store(adapter, keys, objs).is_successful()

    daemon.stop()
    fresh = allocate(l1, 4, seed=None)
    assert lookup(adapter, keys) == []
    assert load(adapter, keys, fresh) == []
    failed = store(adapter, keys_for(2, start=10), allocate(l1, 2, seed=4))
    assert not failed.is_successful() and failed.bytes_transferred() == 0
    adapter.submit_unlock(keys)  # accepted while down; retried, never raised
    assert not adapter.report_status()["is_healthy"]

    daemon.start()  # the tiers keep the chunks: the daemon rebuilds its index from them
    deadline = time.monotonic() + 20
    while lookup(adapter, keys) != list(range(4)):
        assert time.monotonic() < deadline, "the adapter did not reattach"
        time.sleep(0.1)
    assert load(adapter, keys, fresh) == list(range(4))
    for got, want in zip(fresh, objs):
        assert bytes(got.byte_array) == bytes(want.byte_array)
    status = adapter.report_status()
    assert status["is_healthy"] and status["workers_alive"] and status["zero_copy"] == (l1.kind == "shm")
    assert store(adapter, keys_for(2, start=20), allocate(l1, 2, seed=5)).is_successful()


def test_many_concurrent_tasks_from_two_threads(daemon, make_adapter, l1):
    """The store and prefetch controllers call in from two threads at once."""
    import threading

    adapter = make_adapter(daemon.socket, arena_bytes=2 << 20)  # small arena: the copy path goes in waves
    keys = keys_for(16)
    objs = allocate(l1, 16, seed=6)
    errors = []

    def storer():
        try:
            for i in range(0, 16, 4):
                tid = adapter.submit_store_task(keys[i:i + 4], objs[i:i + 4])
                assert isinstance(tid, int)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=storer)
    t.start()
    lookups = [adapter.submit_lookup_and_lock_task(keys, {}) for _ in range(4)]
    t.join()
    assert not errors
    done = {}
    deadline = time.monotonic() + 30
    while len(done) < 4:
        assert time.monotonic() < deadline, (done, adapter.report_status())
        done.update(adapter.pop_completed_store_tasks())
        time.sleep(0.01)
    assert all(r.is_successful() for r in done.values())
    for tid in lookups:
        bitmap = wait_for(adapter.get_lookup_and_lock_event_fd(), lambda: adapter.query_lookup_and_lock_result(tid))
        assert bitmap.size() == 16
    fresh = allocate(l1, 16, seed=None)
    assert load(adapter, keys, fresh) == list(range(16))
    assert all(bytes(a.byte_array) == bytes(b.byte_array) for a, b in zip(fresh, objs))
    l1.free(objs + fresh)


LMCACHE = Path(sys.executable).with_name("lmcache")


@pytest.mark.skipif(not LMCACHE.exists(), reason="no lmcache CLI next to this Python")
def test_a_real_lmcache_server_loads_the_adapter(daemon, state_dir):
    """`lmcache server --l2-adapter` (the MP server, on CPU) loads the adapter from the JSON,
    attaches to kvstreamd and hands it its shared-memory L1 pool."""
    log = state_dir / "lmcache-server.log"
    spec = json.dumps(l2_adapter_spec(daemon.socket))
    port = 20000 + os.getpid() % 20000
    cmd = [str(LMCACHE), "server", "--l1-size-gb", "0.125", "--eviction-policy", "LRU",
           "--supported-transfer-mode", "auto", "--shm-name", f"kvstest{os.getpid()}",
           "--port", str(port), "--http-port", str(port + 1), "--disable-observability", "--l2-adapter", spec]
    with open(log, "wb") as out:
        server = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, LMCACHE_DISABLE_BANNER="1"))
    try:
        deadline = time.monotonic() + 120
        while "cache server is running" not in log.read_text(errors="replace"):
            assert server.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "lmcache server did not start"
            time.sleep(0.5)
        text = log.read_text(errors="replace")
        assert "kvstream: connected to kvstreamd" in text
        assert "L1 pool shared with the daemon" in text
        assert daemon_stats(daemon.socket).sessions == 1
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert "kvstream: L2 adapter closed" in log.read_text(errors="replace")


# -- load or recompute, and a daemon whose staging is full ------------------------------------------

def chunk_of_name(name: str) -> int:
    """The chunk index keys_for(n) gave a key (its chunk hash is the index, twice, as 8 bytes each)."""
    return int(name.rsplit("@", 1)[1][-16:], 16)


def test_lookups_answer_only_the_chunks_worth_loading_in_every_row(daemon, make_adapter, l1):
    """A request's rows (two kv ranks of four chunks), listed row by row as LMCache does: the daemon
    is asked chunk by chunk; chunks 0 and 1 load fast, 2 and 3 at 10 s a key against 0.1 s to
    recompute a chunk: both rows answer chunks 0 and 1, and the locks of 2 and 3 are released."""
    from conftest import estimating

    adapter = make_adapter(daemon.socket, recompute_tokens_per_s=2560, chunk_tokens=256)
    rows = [keys_for(4, kv_rank=r) for r in range(2)]
    keys = rows[0] + rows[1]
    objs = allocate(l1, 8, seed=7)
    assert store(adapter, keys, objs).is_successful()
    asked = estimating(adapter.link.session(), lambda name: 0.001 if chunk_of_name(name) < 2 else 10.0)
    assert lookup(adapter, keys) == [0, 1, 4, 5]
    names = [object_key_name(k) for k in keys]
    assert asked.asked[-1] == ([names[i] for i in (0, 4, 1, 5, 2, 6, 3, 7)], True)
    with kvstream.Client.connect(daemon.socket) as c:
        assert c.unlock([names[i] for i in (2, 3, 6, 7)]) == 0  # released past the cut
        assert c.unlock([names[i] for i in (0, 1, 4, 5)]) == 4
    assert adapter.report_status()["lookup_recomputed"] == 4
    estimating(adapter.link.session(), lambda name: math.inf if chunk_of_name(name) == 1 else 0.001)
    assert lookup(adapter, keys) == [0, 4]  # a stalled tier holds chunk 1
    adapter.submit_unlock([keys[0], keys[4]])
    l1.free(objs)


def test_the_verdict_off_answers_every_hit(daemon, make_adapter, l1):
    from conftest import estimating

    adapter = make_adapter(daemon.socket, verdict="off", recompute_tokens_per_s=2560)
    keys = keys_for(3, start=30)
    objs = allocate(l1, 3, seed=8)
    assert store(adapter, keys, objs).is_successful()
    asked = estimating(adapter.link.session(), lambda name: math.inf)
    assert lookup(adapter, keys) == [0, 1, 2] and not asked.asked[-1][1]
    with pytest.raises(ValueError, match="verdict"):
        create_l2_adapter(parse_spec(l2_adapter_spec(daemon.socket, verdict="sometimes")), None)
    l1.free(objs)


def test_stores_the_daemon_drops_are_counted_not_failed(daemon, make_adapter, l1):
    """Staging takes three more chunks: a store of two rows of three goes out chunk by chunk, so
    both rows keep chunk 0 and row 0 chunk 1; the three dropped are store_dropped, not failures,
    and the task reports not stored (LMCache keeps them in L1)."""
    from conftest import staging_full

    adapter = make_adapter(daemon.socket)
    rows = [keys_for(3, start=40, kv_rank=r) for r in range(2)]
    keys = rows[0] + rows[1]
    objs = allocate(l1, 6, seed=9)
    full = staging_full(adapter.link.session(), room=3)
    result = store(adapter, keys, objs)
    names = [object_key_name(k) for k in keys]
    assert full.calls == [[names[i] for i in (0, 3, 1, 4, 2, 5)]]
    assert not result.is_successful()
    status = adapter.report_status()
    assert (status["stored"], status["store_dropped"], status["store_failed"]) == (3, 3, 0)
    assert lookup(adapter, keys) == [0, 1, 3]
    adapter.submit_unlock([keys[i] for i in (0, 1, 3)])
    l1.free(objs)
