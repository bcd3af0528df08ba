"""KVStreamConnectorV1 as far as a machine without a GPU allows: vLLM's connector factory loads it
by module path, and its start_load_kv submits the chunks of all requests of a step (LMCache's real
connector metadata) as one daemon retrieve before LMCache loads them request after request.

LMCache's connector implementation itself (LMCacheConnectorV1Impl) needs vLLM's GPU KV caches, so
it is stood in for by `LoadByRequest`, which does what its start_load_kv does to storage: one
LMCache retrieve per request, in order. tools/gpu-check.sh runs vLLM for real on a GPU machine.
"""

from __future__ import annotations

import types

import pytest

pytest.importorskip("lmcache", reason="needs LMCache (tests/run.sh installs it)")
pytest.importorskip("vllm", reason="needs vLLM (tests/run.sh installs it)")

import torch  # noqa: E402
from lmcache.integration.vllm.lmcache_connector_v1 import LMCacheConnectorV1Dynamic  # noqa: E402
from lmcache.integration.vllm.vllm_v1_adapter import LMCacheConnectorMetadata, LoadSpec, ReqMeta  # noqa: E402
from vllm.config import KVTransferConfig  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory  # noqa: E402

from lmcache_support import free_chunk_buffers  # noqa: E402
from kvstream.lmcache.vllm_connector import KVStreamConnectorV1, step_loads  # noqa: E402
from test_step_batching import CHUNK, Engine, daemon_step_count  # noqa: E402


def test_vllm_loads_the_connector_by_module_path():
    config = KVTransferConfig(kv_connector="KVStreamConnectorV1",
                              kv_connector_module_path="kvstream.lmcache.vllm_connector", kv_role="kv_both")
    cls = KVConnectorFactory.get_connector_class(config)
    assert cls is KVStreamConnectorV1 and issubclass(cls, LMCacheConnectorV1Dynamic)


class LoadByRequest:
    """Stands in for LMCacheConnectorV1Impl: loads the step's requests one after another."""

    def __init__(self, engine: Engine, parent: KVStreamConnectorV1) -> None:
        self.lmcache_engine = engine
        self.use_layerwise = False
        self.async_loading = False
        self.parent = parent
        self.loaded = []

    def start_load_kv(self, forward_context, **kwargs):
        for load in step_loads(self.parent._get_connector_metadata()):
            for key, obj in self.lmcache_engine.retrieve(load).items():
                self.loaded.append((key, obj))


def request(req_id, tokens, vllm_cached, lmcache_cached, can_load=True):
    return ReqMeta(req_id=req_id, token_ids=tokens, slot_mapping=torch.arange(len(tokens)),
                   load_spec=LoadSpec(vllm_cached_tokens=vllm_cached, lmcache_cached_tokens=lmcache_cached,
                                      can_load=can_load))


@pytest.fixture
def engine(daemon):
    e = Engine(daemon.socket)
    yield e
    e.storage_manager.close()


def test_start_load_kv_reads_the_whole_step_in_one_daemon_retrieve(daemon, engine):
    gen = torch.Generator().manual_seed(1)
    tokens = [torch.randint(0, 32000, (3 * CHUNK + 40,), generator=gen).tolist() for _ in range(4)]
    expected = {}
    for i, t in enumerate(tokens):
        expected.update(engine.store(t[: 3 * CHUNK], seed=20 + i))
    metadata = LMCacheConnectorMetadata()
    metadata.add_request(request("a", tokens[0], 0, 3 * CHUNK))
    metadata.add_request(request("b", tokens[1], CHUNK, 3 * CHUNK))       # first chunk already in vLLM
    metadata.add_request(request("c", tokens[2], 0, 2 * CHUNK))           # LMCache holds 2 chunks of it
    metadata.add_request(request("d", tokens[3], 0, 3 * CHUNK, can_load=False))
    assert [(len(x.tokens), x.vllm_cached_tokens) for x in step_loads(metadata)] == \
        [(3 * CHUNK, 0), (3 * CHUNK, CHUNK), (2 * CHUNK, 0)]

    connector = KVStreamConnectorV1.__new__(KVStreamConnectorV1)  # vLLM's config needs a model: wire by hand
    connector._lmcache_engine = LoadByRequest(engine, connector)
    connector.bind_connector_metadata(metadata)
    free_before = free_chunk_buffers(engine.storage_manager)
    before, _ = daemon_step_count(daemon.socket)
    connector.start_load_kv(types.SimpleNamespace(attn_metadata=object()))
    after, last = daemon_step_count(daemon.socket)

    loaded = connector._lmcache_engine.loaded
    assert len(loaded) == 3 + 2 + 2
    for key, obj in loaded:
        assert obj is not None and torch.equal(obj.tensor, expected[key])
        obj.ref_count_down()
    assert after == before + 1 and last[0].chunks == 7, "one daemon retrieve for the whole step"
    assert free_chunk_buffers(engine.storage_manager) == free_before  # nothing prefetched is left held


def test_layerwise_loading_keeps_lmcache_path(daemon, engine):
    connector = KVStreamConnectorV1.__new__(KVStreamConnectorV1)
    connector._lmcache_engine = LoadByRequest(engine, connector)
    connector._lmcache_engine.use_layerwise = True
    metadata = LMCacheConnectorMetadata()
    for i in range(2):
        tokens = list(range(i * CHUNK, (i + 1) * CHUNK))
        engine.store(tokens, seed=30 + i)
        metadata.add_request(request(str(i), tokens, 0, CHUNK))
    connector.bind_connector_metadata(metadata)
    before, _ = daemon_step_count(daemon.socket)
    connector.start_load_kv(types.SimpleNamespace(attn_metadata=object()))
    for _, obj in connector._lmcache_engine.loaded:
        obj.ref_count_down()
    assert daemon_step_count(daemon.socket)[0] == before + 2  # LMCache's own retrieve per request, no prefetch
