"""kvstream.sglang.KVStreamHiCache against a real kvstreamd, created by SGLang's own backend factory
from the `dynamic` configuration and driven through SGLang's storage interface (the v1 page calls
its cache controller makes, and the legacy flat-page calls) on SGLang's real host KV pools, on CPU.
HiCacheFile, SGLang's file backend, is driven the same way as the reference."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from conftest import EXTRA_INFO, PAGE, fill, make_backend, page_keys, same_pages, storage_config
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory


def until(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def round_trip(backend: Any, host: Any, n: int = 6, seed: int = 1, tag: str = "") -> None:
    keys = page_keys(n, tag)
    src, dst = host.alloc(n * PAGE), host.alloc(n * PAGE)
    fill(host, src, seed)
    assert backend.batch_exists(keys, EXTRA_INFO) == 0
    assert backend.batch_set_v1(keys, src, EXTRA_INFO) == [True] * n
    assert until(lambda: backend.batch_exists(keys, EXTRA_INFO) == n)  # written in the background
    assert backend.batch_get_v1(keys, dst, EXTRA_INFO) == [True] * n
    assert same_pages(host, src, dst)
    host.free(src)
    host.free(dst)


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct", "layer_first"])
def test_zero_copy_round_trip_through_the_shared_memory_pool(daemon, pool_factory, layout):
    _, host = pool_factory(layout, "shm")
    backend = make_backend(daemon, host, layout=layout)
    try:
        assert backend.zero_copy  # the pool (a memfd) was handed to the daemon as a client region
        round_trip(backend, host)
        assert backend.get_stats()["pages_read"] == 6
    finally:
        backend.close()


def test_zero_copy_off_copies_a_shared_memory_pool_through_the_arena(daemon, pool_factory):
    _, host = pool_factory("page_first", "shm")
    backend = make_backend(daemon, host, extra={"kvstream.zero_copy": False})
    try:
        assert not backend.zero_copy  # kvstream.zero_copy false: the pool is not handed over
        round_trip(backend, host, seed=4, tag="z")
    finally:
        backend.close()


def test_copy_path_for_a_pool_that_is_not_shared_memory_reads_what_zero_copy_wrote(daemon, pool_factory):
    _, shm_host = pool_factory("page_first", "shm")
    _, plain_host = pool_factory("page_first", "default")
    writer, reader = make_backend(daemon, shm_host), make_backend(daemon, plain_host)
    try:
        assert not reader.zero_copy
        round_trip(reader, plain_host, seed=2, tag="c")
        keys = page_keys(4, "x")
        src = shm_host.alloc(4 * PAGE)
        fill(shm_host, src, 3)
        assert writer.batch_set_v1(keys, src, EXTRA_INFO) == [True] * 4
        assert until(lambda: reader.batch_exists(keys, EXTRA_INFO) == 4)
        dst = plain_host.alloc(4 * PAGE)
        assert reader.batch_get_v1(keys, dst, EXTRA_INFO) == [True] * 4
        for i in range(4):
            assert torch.equal(shm_host.get_data_page(int(src[i * PAGE])), plain_host.get_data_page(int(dst[i * PAGE])))
    finally:
        writer.close()
        reader.close()


def test_a_miss_fails_its_page_only_and_exists_counts_the_stored_prefix(daemon, pool_factory):
    _, host = pool_factory()
    backend = make_backend(daemon, host)
    try:
        keys = page_keys(5, "m")
        src = host.alloc(5 * PAGE)
        fill(host, src, 4)
        stored = [keys[0], keys[1], keys[3]]
        idx = torch.cat([src[i * PAGE:(i + 1) * PAGE] for i in (0, 1, 3)])
        assert backend.batch_set_v1(stored, idx, EXTRA_INFO) == [True] * 3
        assert until(lambda: backend.batch_exists(stored, EXTRA_INFO) == 3)
        assert backend.batch_exists(keys, EXTRA_INFO) == 2  # consecutive from the start
        assert not backend.exists(keys[2]) and backend.exists(keys[3])
        dst = host.alloc(5 * PAGE)
        assert backend.batch_get_v1(keys, dst, EXTRA_INFO) == [True, True, False, True, False]
        # Pages already stored are not written again (SGLang may store a prefix twice).
        written = backend.get_stats()["pages_written"]
        assert backend.batch_set_v1(stored, idx, EXTRA_INFO) == [True] * 3
        assert backend.get_stats()["pages_written"] == written
    finally:
        backend.close()


def test_ranks_keep_their_own_pages_and_mla_ranks_share_rank_zeros(daemon, pool_factory):
    keys = page_keys(3, "r")
    hosts = [pool_factory()[1] for _ in range(2)]
    ranks = [make_backend(daemon, hosts[r], tp_rank=r, tp_size=2) for r in range(2)]
    mla = [make_backend(daemon, hosts[r], tp_rank=r, tp_size=2, mla=True) for r in range(2)]
    try:
        src = [h.alloc(3 * PAGE) for h in hosts]
        for r in range(2):
            fill(hosts[r], src[r], 10 + r)
            assert ranks[r].batch_set_v1(keys, src[r], EXTRA_INFO) == [True] * 3
        for r in range(2):
            assert until(lambda: ranks[r].batch_exists(keys, EXTRA_INFO) == 3)
            dst = hosts[r].alloc(3 * PAGE)
            assert ranks[r].batch_get_v1(keys, dst, EXTRA_INFO) == [True] * 3
            assert same_pages(hosts[r], src[r], dst)  # its own bytes, not the other rank's
        # MLA: rank 1 does not write (SGLang's is_storage_writer); it reads what rank 0 stored.
        assert mla[1].batch_set_v1(page_keys(3, "mla"), src[1], EXTRA_INFO) == [True] * 3
        assert mla[0].batch_set_v1(page_keys(3, "mla"), src[0], EXTRA_INFO) == [True] * 3
        assert until(lambda: mla[1].batch_exists(page_keys(3, "mla"), EXTRA_INFO) == 3)
        dst = hosts[1].alloc(3 * PAGE)
        assert mla[1].batch_get_v1(page_keys(3, "mla"), dst, EXTRA_INFO) == [True] * 3
        for i in range(3):
            assert torch.equal(hosts[0].get_data_page(int(src[0][i * PAGE])), hosts[1].get_data_page(int(dst[i * PAGE])))
    finally:
        for b in ranks + mla:
            b.close()


def test_a_daemon_down_gives_misses_and_failed_sets_then_the_backend_reattaches(daemon, pool_factory):
    _, host = pool_factory()
    backend = make_backend(daemon, host)
    try:
        keys = page_keys(4, "d")
        src, dst = host.alloc(4 * PAGE), host.alloc(4 * PAGE)
        fill(host, src, 20)
        assert backend.batch_set_v1(keys, src, EXTRA_INFO) == [True] * 4
        assert until(lambda: backend.batch_exists(keys, EXTRA_INFO) == 4)
        daemon.stop()
        for _ in range(3):  # never an exception, never None into SGLang
            assert backend.batch_exists(keys, EXTRA_INFO) == 0
            assert backend.batch_get_v1(keys, dst, EXTRA_INFO) == [False] * 4
            assert backend.batch_set_v1(page_keys(2, "e"), src[:2 * PAGE], EXTRA_INFO) == [False] * 2
        daemon.start()
        assert until(lambda: backend.batch_exists(keys, EXTRA_INFO) == 4)  # reattached; the pages survived
        assert backend.zero_copy  # the region was handed over again
        assert backend.batch_get_v1(keys, dst, EXTRA_INFO) == [True] * 4
        assert same_pages(host, src, dst)
        round_trip(backend, host, n=2, seed=21, tag="after")
    finally:
        backend.close()


@pytest.mark.parametrize("backend_name", ["file", "kvstream"])
def test_legacy_flat_page_interface_as_hicache_file(daemon, pool_factory, tmp_path, backend_name):
    """The calls SGLang's controller makes without interface_v1 (flat pages), on HiCacheFile and on
    kvstream alike."""
    _, host = pool_factory("page_first", "default")
    if backend_name == "file":
        backend = StorageBackendFactory.create_backend(
            "file", storage_config({"file_storage_path": str(tmp_path)}), host)
        backend.register_mem_pool_host(host)
    else:
        backend = make_backend(daemon, host, extra={"interface_v1": 0})
    try:
        keys = page_keys(4, "l")
        src, dst = host.alloc(4 * PAGE), host.alloc(4 * PAGE)
        fill(host, src, 30)
        assert backend.batch_exists(keys) == 0
        assert backend.batch_set(keys, [host.get_data_page(int(src[i * PAGE])) for i in range(4)])
        assert until(lambda: backend.batch_exists(keys) == 4)
        got = backend.batch_get(keys, [host.get_dummy_flat_data_page() for _ in keys])
        assert all(g is not None for g in got)
        for i, g in enumerate(got):
            host.set_from_flat_data_page(int(dst[i * PAGE]), g)
        assert same_pages(host, src, dst)
        missing = backend.batch_get(page_keys(1, "none"), [host.get_dummy_flat_data_page()])
        assert missing[0] is None
    finally:
        if hasattr(backend, "close"):
            backend.close()


# -- load or recompute, and a daemon whose staging is full ------------------------------------------

RECOMPUTE_A_PAGE = {"kvstream.recompute_tokens_per_s": 10 * PAGE}  # 0.1 s to recompute a page


def page_of(name: str) -> int:
    """The page index page_keys(n) gave a piece's key (<prefix>/<page hash>/<piece>)."""
    return int(name.rsplit("/", 2)[1][:2])


def test_exists_counts_only_the_pages_worth_loading(daemon, pool_factory):
    """Pages 0 and 1 load in a millisecond, 2 and 3 in 10 s a piece, against 0.1 s to recompute a
    page: batch_exists says 2 (and batch_get_v1 loads those); a stalled tier holding page 1 says 1;
    the pages before the call (SGLang's prefix_keys) are the tokens cached before it."""
    from conftest import HiCacheStorageExtraInfo, estimating

    _, host = pool_factory()
    backend = make_backend(daemon, host, extra=RECOMPUTE_A_PAGE)
    try:
        keys = page_keys(4, "v")
        src = host.alloc(4 * PAGE)
        fill(host, src, 5)
        assert backend.batch_set_v1(keys, src, EXTRA_INFO) == [True] * 4
        assert until(lambda: backend.batch_exists(keys, EXTRA_INFO) == 4)
        asked = estimating(backend.link.session(), lambda name: 0.001 if page_of(name) < 2 else 10.0)
        cuts = []
        real_cut = backend.verdict.cut
        backend.verdict.cut = lambda *a, **kw: cuts.append(a[2]) or real_cut(*a, **kw)
        assert backend.batch_exists(keys, HiCacheStorageExtraInfo(prefix_keys=page_keys(3, "p"))) == 2
        assert asked.asked[-1][1] and cuts == [3 * PAGE]
        assert backend.get_stats()["pages_recomputed"] == 2
        estimating(backend.link.session(), lambda name: float("inf") if page_of(name) == 1 else 0.001)
        assert backend.batch_exists(keys, EXTRA_INFO) == 1
    finally:
        backend.close()


def test_the_verdict_off_counts_every_stored_page(daemon, pool_factory):
    from conftest import estimating

    _, host = pool_factory()
    backend = make_backend(daemon, host, extra={**RECOMPUTE_A_PAGE, "kvstream.verdict": "off"})
    try:
        keys = page_keys(2, "o")
        src = host.alloc(2 * PAGE)
        fill(host, src, 6)
        assert backend.batch_set_v1(keys, src, EXTRA_INFO) == [True] * 2
        asked = estimating(backend.link.session(), lambda name: float("inf"))
        assert until(lambda: backend.batch_exists(keys, EXTRA_INFO) == 2) and not asked.asked[-1][1]
    finally:
        backend.close()


def test_pages_the_daemon_drops_are_not_stored_and_counted_not_failed(daemon, pool_factory, caplog):
    """Staging takes three more page parts: of three pages (K and V each), page 0 is stored, page 1
    loses its V and page 2 both: batch_set_v1 says [True, False, False], pages_dropped 2, no failure
    counted or logged, and batch_exists sees page 0."""
    import logging

    from conftest import staging_full

    _, host = pool_factory()
    backend = make_backend(daemon, host)
    try:
        keys = page_keys(3, "d")
        src = host.alloc(3 * PAGE)
        fill(host, src, 7)
        full = staging_full(backend.link.session(), room=3)
        with caplog.at_level(logging.INFO, logger="kvstream"):
            assert backend.batch_set_v1(keys, src, EXTRA_INFO) == [True, False, False]
        assert [page_of(name) for name in full.calls[0]] == [0, 0, 1, 1, 2, 2]
        stats = backend.get_stats()
        assert (stats["pages_written"], stats["pages_dropped"], stats["pages_failed"]) == (1, 2, 0), stats
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        assert until(lambda: backend.batch_exists(keys, EXTRA_INFO) == 1)
    finally:
        backend.close()
