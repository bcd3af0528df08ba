"""Step batching (M1) for LMCache: the chunks of all requests of a step in ONE daemon retrieve,
computed with LMCache's own token database and block mapping (what the vLLM connector does)."""

from __future__ import annotations

import pytest

pytest.importorskip("lmcache", reason="the LMCache plugin tests need LMCache (tests/run.sh installs it)")

import torch  # noqa: E402
from lmcache.v1.token_database import ChunkedTokenDatabase  # noqa: E402

import kvstream  # noqa: E402
from kvstream.lmcache.step_batch import StepLoad, find_backend, step_keys  # noqa: E402
from lmcache_support import (  # noqa: E402
    free_chunk_buffers,
    make_config,
    make_metadata,
    make_storage_manager,
    random_chunks,
)

CHUNK = 256


class Engine:
    """The parts of LMCache's LMCacheEngine that step batching uses, built from real LMCache objects."""

    def __init__(self, socket_path: str, cpu_gb: float = 0.25) -> None:
        self.config = make_config(socket_path)
        self.token_database = ChunkedTokenDatabase(self.config, make_metadata())
        self.storage_manager = make_storage_manager(socket_path, cpu_gb=cpu_gb)

    def store(self, tokens, seed):
        """Stores every chunk of `tokens` as LMCache's store would (keys from the token database)."""
        keys = [k for _, _, k in self.token_database.process_tokens(tokens=tokens)]
        objs, tensors = random_chunks(self.storage_manager, len(keys), seed)
        self.storage_manager.batched_put(keys, objs)
        assert find_backend(self.storage_manager)[1].flush(30)
        return dict(zip(keys, tensors))

    def retrieve(self, load: StepLoad):
        """LMCache's blocking retrieve of one request: block mapping, then one batched get per backend."""
        mask = torch.ones(len(load.tokens), dtype=torch.bool)
        mask[: load.vllm_cached_tokens // CHUNK * CHUNK] = False
        infos = [(k, s, e) for s, e, k in self.token_database.process_tokens(tokens=load.tokens, mask=mask)]
        out = {}
        for location, blocks in self.storage_manager.get_block_mapping(infos).items():
            keys = [k for k, _, _ in blocks]
            out.update(zip(keys, self.storage_manager.batched_get(keys, location=location)))
        return out


def daemon_step_count(socket_path):
    with kvstream.Client.connect(socket_path) as c:
        return c.stats().steps, c.steps(1)


@pytest.fixture
def engine(daemon):
    e = Engine(daemon.socket)
    yield e
    e.storage_manager.close()


def requests_of_a_step(engine):
    gen = torch.Generator().manual_seed(0)
    tokens = [torch.randint(0, 32000, (3 * CHUNK,), generator=gen).tolist() for _ in range(3)]
    expected = {}
    for i, t in enumerate(tokens):
        expected.update(engine.store(t, seed=10 + i))
    # The second request has its first chunk in vLLM's own cache already.
    loads = [StepLoad(tokens[0], 0), StepLoad(tokens[1], CHUNK + 17), StepLoad(tokens[2], 0)]
    return loads, expected


def test_step_keys_match_what_lmcache_asks_for(engine):
    loads, expected = requests_of_a_step(engine)
    name, _ = find_backend(engine.storage_manager)
    keys = step_keys(engine.token_database, engine.storage_manager, name, loads, CHUNK)
    assert len(keys) == 3 + 2 + 3
    asked = []
    for load in loads:
        asked.extend(engine.retrieve(load).keys())
    assert keys == asked


def test_one_daemon_retrieve_serves_every_request_of_the_step(daemon, engine):
    loads, expected = requests_of_a_step(engine)
    _, backend = find_backend(engine.storage_manager)
    name, _ = find_backend(engine.storage_manager)

    before, _ = daemon_step_count(daemon.socket)
    assert backend.prefetch(step_keys(engine.token_database, engine.storage_manager, name, loads, CHUNK)) == 8
    for load in loads:
        for k, obj in engine.retrieve(load).items():
            assert obj is not None and torch.equal(obj.tensor, expected[k])
            obj.ref_count_down()
    after, last = daemon_step_count(daemon.socket)
    assert backend.release_prefetched() == 0  # every prefetched chunk was taken
    assert after == before + 1, "all requests of the step read in one daemon retrieve"
    assert last[0].chunks == 8

    # Without the prefetch, LMCache reads request after request: one retrieve each.
    for load in loads:
        for obj in engine.retrieve(load).values():
            obj.ref_count_down()
    assert daemon_step_count(daemon.socket)[0] == after + 3


def test_unclaimed_prefetches_are_released(engine):
    loads, _ = requests_of_a_step(engine)
    name, backend = find_backend(engine.storage_manager)
    keys = step_keys(engine.token_database, engine.storage_manager, name, loads, CHUNK)
    free_before = free_chunk_buffers(engine.storage_manager)
    assert free_before >= 8
    assert backend.prefetch(keys) == 8
    assert backend.prefetch(keys) == 0  # already in flight
    for obj in engine.retrieve(loads[0]).values():
        obj.ref_count_down()
    assert backend.release_prefetched() == 5
    assert free_chunk_buffers(engine.storage_manager) == free_before  # every buffer went back


def test_chunks_a_tight_cpu_pool_could_not_prefetch_are_read_on_demand(daemon):
    """The prefetch allocates the whole step at once; with LMCache's CPU pool too small for that,
    the chunks it could not place are read when their request asks, as without batching."""
    engine = Engine(daemon.socket, cpu_gb=0.02)  # about 5 chunks of 4 MiB
    try:
        gen = torch.Generator().manual_seed(3)
        loads, expected = [], {}
        for i in range(3):
            tokens = torch.randint(0, 32000, (3 * CHUNK,), generator=gen).tolist()
            expected.update(engine.store(tokens, seed=40 + i))
            loads.append(StepLoad(tokens, 0))
        name, backend = find_backend(engine.storage_manager)
        assert backend.prefetch(step_keys(engine.token_database, engine.storage_manager, name, loads, CHUNK)) == 9
        for load in loads:  # request after request, each released before the next, as LMCache does
            got = engine.retrieve(load)
            assert len(got) == 3 and all(obj is not None for obj in got.values())
            for k, obj in got.items():
                assert torch.equal(obj.tensor, expected[k])
                obj.ref_count_down()
        backend.release_prefetched()
    finally:
        engine.storage_manager.close()
