"""Zero copy at any TP size: every TP worker reads the same LMCache config, so with one `shm_name`
the workers take the segment from each other and all but one copy. kvstream.lmcache.pool_name
(what KVStreamConnectorV1 runs in each worker before LMCache builds its engine) gives each worker
process a pool of its own. Here 2 and 4 worker processes, each a real LMCache StorageManager with
the plugin on one kvstreamd, all created before any reads: every one gets chunks in place."""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module

import pytest

pytest.importorskip("lmcache", reason="needs LMCache (tests/run.sh installs it)")

from kvstream.lmcache.pool_name import host_tag, own_pool_name, remove_stale  # noqa: E402


def worker(socket: str, shm_name: str, rank: int, ranks: int, own: bool, barrier, results) -> None:
    """One TP worker: the config all ranks share, its pool, then puts and gets of its own chunks."""
    import torch
    from lmcache.v1.event_manager import EventManager
    from lmcache.v1.storage_backend.storage_manager import StorageManager

    from lmcache_support import backend_of, key, make_config, make_metadata, put

    # Four processes attaching at once on a busy machine: allow the daemon time to answer each.
    config = make_config(socket, shm_name=shm_name, **{"kvstream.connect_timeout": 30.0})
    if own:
        own_pool_name(config)
    sm = StorageManager(config=config, metadata=make_metadata(worker_id=rank, world_size=ranks),
                        event_manager=EventManager())
    try:
        barrier.wait(240)  # every rank's pool exists before any rank reads
        backend = backend_of(sm)
        keys = [key(1000 * rank + i, worker_id=rank) for i in range(4)]
        tensors = put(sm, keys, seed=rank)
        objs = backend.batched_get_blocking(keys)
        if any(o is None for o in objs):
            intact = "missed"
        else:
            intact = "intact" if all(torch.equal(o.tensor, t) for o, t in zip(objs, tensors)) else "other bytes"
        for o in objs:
            if o is not None:
                o.ref_count_down()
        results.put((rank, config.extra_config["shm_name"], backend.status(), intact))
    finally:
        sm.close()


def run_workers(socket: str, ranks: int, own: bool) -> list:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(ranks), ctx.Queue()
    shm_name = f"kvstest_tp{os.getpid()}"
    procs = [ctx.Process(target=worker, args=(socket, shm_name, r, ranks, own, barrier, results)) for r in range(ranks)]
    for p in procs:
        p.start()
    out = []
    try:
        for _ in procs:
            out.append(results.get(timeout=240))
    except queue_module.Empty:
        pytest.fail(f"{ranks - len(out)} of {ranks} workers reported nothing")
    finally:
        for p in procs:
            p.join(60)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return sorted(out)


@pytest.mark.parametrize("ranks", [2, 4])
def test_every_worker_gets_chunks_in_place_at_tp(daemon, ranks):
    out = run_workers(daemon.socket, ranks, own=True)
    assert len({name for _, name, _, _ in out}) == ranks  # a pool of its own each
    for rank, name, status, intact in out:
        assert intact == "intact", f"rank {rank}: {intact}"
        assert status["zero_copy"] and status["pool"] == f"/dev/shm/{name}", (rank, status)
        assert status["in_place"] == 4 and status["copied"] == 0, (rank, status)
    assert not any(os.path.exists(f"/dev/shm/{name}") for _, name, _, _ in out)  # LMCache unlinked them


def test_pools_of_workers_that_are_gone_are_removed(tmp_path):
    dead = 1
    while True:  # a pid no process has
        dead += 7919
        try:
            os.kill(dead, 0)
        except ProcessLookupError:
            break
        except OSError:
            continue
    host = host_tag()
    (tmp_path / f"kvstest_pool_{host}_{dead}").write_bytes(b"x")
    (tmp_path / f"kvstest_pool_{host}_{os.getpid()}").write_bytes(b"x")  # alive: kept
    (tmp_path / f"kvstest_pool_otherhost_{dead}").write_bytes(b"x")  # another container's: kept
    (tmp_path / "kvstest_pool_other").write_bytes(b"x")  # not a pool name: kept
    os.symlink("/etc/hostname", tmp_path / f"kvstest_pool_{host}_{dead + 1}")  # not a regular file: kept
    assert remove_stale("kvstest_pool", str(tmp_path)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([
        f"kvstest_pool_{host}_{os.getpid()}", f"kvstest_pool_otherhost_{dead}", "kvstest_pool_other",
        f"kvstest_pool_{host}_{dead + 1}"])
    assert os.path.exists("/etc/hostname")


def test_the_name_is_left_alone_without_the_plugin_or_zero_copy():
    from lmcache_support import make_config

    config = make_config("/nonexistent.sock", plugins=[], shm_name="mine")
    assert own_pool_name(config) is None and config.extra_config["shm_name"] == "mine"
    config = make_config("/nonexistent.sock", shm_name="mine", **{"kvstream.zero_copy": False})
    assert own_pool_name(config) is None and config.extra_config["shm_name"] == "mine"
    config = make_config("/nonexistent.sock")
    assert own_pool_name(config, pid=4242) == f"kvstream_lmcache_{host_tag()}_4242"
    assert own_pool_name(config, pid=4242) == f"kvstream_lmcache_{host_tag()}_4242"  # a second call keeps it
