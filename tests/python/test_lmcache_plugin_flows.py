"""The storage-plugin flows of LMCache's own plugin tests (tests/v1/storage_backend/test_storage_plugin.py),
run against KVStreamBackend and a real kvstreamd instead of their in-memory mock.

Their checks, here with real data: the plugin is created by CreateStorageBackends from the
configuration; StorageManager.contains / get / remove / batched_contains reach it; it is not
loaded without `storage_plugins`; a wrong module path is skipped without an exception.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("lmcache", reason="the LMCache plugin tests need LMCache (tests/run.sh installs it)")

import torch  # noqa: E402
from lmcache.v1.storage_backend import CreateStorageBackends  # noqa: E402
from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface  # noqa: E402

from kvstream.lmcache import KVStreamBackend  # noqa: E402
from lmcache_support import key, make_config, make_metadata, make_storage_manager, random_chunks  # noqa: E402


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def manager(daemon):
    sm = make_storage_manager(daemon.socket, local_cpu=True)
    yield sm
    sm.close()


def close_all(backends):
    for backend in backends.values():
        backend.close()


def stored(sm, keys, seed):
    objs, tensors = random_chunks(sm, len(keys), seed)
    sm.storage_backends["kvstream"].batched_submit_put_task(keys, objs)
    assert sm.storage_backends["kvstream"].flush(30)
    for o in objs:
        o.ref_count_down()
    return tensors


def test_plugin_is_created_from_the_configuration(daemon, loop):
    backends = CreateStorageBackends(config=make_config(daemon.socket, local_cpu=True), metadata=make_metadata(),
                                     loop=loop, dst_device="cpu")
    try:
        assert "kvstream" in backends, list(backends)
        backend = backends["kvstream"]
        assert isinstance(backend, StoragePluginInterface) and isinstance(backend, KVStreamBackend)
        assert backend.link.connected
        assert backend.get_allocator_backend() is backends["LocalCPUBackend"]
    finally:
        close_all(backends)


def test_storage_manager_contains_reaches_the_plugin(manager):
    assert manager.contains(key(12345)) is None
    stored(manager, [key(12345)], seed=1)
    assert manager.contains(key(12345)) == "kvstream"


def test_storage_manager_get_reads_through_the_plugin(manager):
    tensors = stored(manager, [key(67890)], seed=2)
    obj = manager.get(key(67890))
    assert obj is not None and torch.equal(obj.tensor, tensors[0])
    obj.ref_count_down()


def test_storage_manager_remove_reaches_the_plugin(manager):
    stored(manager, [key(11111)], seed=3)
    assert manager.remove(key(11111)) >= 1
    assert not manager.storage_backends["kvstream"].contains(key(11111))


def test_storage_manager_batched_contains_reaches_the_plugin(manager):
    keys = [key(i) for i in range(1000, 1003)]
    stored(manager, keys, seed=4)
    hits, mapping = manager.batched_contains(keys)
    assert hits == 3 and mapping == {"kvstream": keys}


def test_plugin_is_not_loaded_without_storage_plugins(daemon, loop):
    backends = CreateStorageBackends(config=make_config(daemon.socket, local_cpu=True, plugins=[]),
                                     metadata=make_metadata(), loop=loop, dst_device="cpu")
    try:
        assert "kvstream" not in backends
    finally:
        close_all(backends)


def test_wrong_module_path_is_skipped_without_an_exception(daemon, loop):
    config = make_config(daemon.socket, local_cpu=True, **{"storage_plugin.kvstream.module_path": "kvstream.nonexistent"})
    backends = CreateStorageBackends(config=config, metadata=make_metadata(), loop=loop, dst_device="cpu")
    try:
        assert "kvstream" not in backends
    finally:
        close_all(backends)


def test_the_shipped_lmcache_yaml_loads_the_plugin(daemon, loop):
    """deploy/lmcache-kvstream.yaml, read by LMCache's own config loader, creates a working plugin."""
    from lmcache.v1.config import LMCacheEngineConfig

    from conftest import REPO

    config = LMCacheEngineConfig.from_file(str(REPO / "deploy" / "lmcache-kvstream.yaml"))
    assert config.storage_plugins == ["kvstream"] and config.local_cpu is False
    assert config.extra_config["kvstream.socket_path"] == "/run/kvstream/kvstreamd.sock"
    assert config.extra_config["kvstream.arena_bytes"] == 1 << 30
    config.extra_config["kvstream.socket_path"] = daemon.socket  # the test's daemon,
    config.extra_config["kvstream.arena_bytes"] = 64 << 20  # whose sessions.max_arena is 512 MiB
    config.max_local_cpu_size = 0.25
    backends = CreateStorageBackends(config=config, metadata=make_metadata(), loop=loop, dst_device="cpu")
    try:
        backend = backends["kvstream"]
        assert backend.settings.io_timeout == 60 and backend.settings.retry_interval == 1
        assert backend.settings.recompute.verdict and backend.settings.recompute.tflops == 400
        assert backend.link.connected
    finally:
        close_all(backends)
