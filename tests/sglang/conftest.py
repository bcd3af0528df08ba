"""Fixtures for the SGLang backend tests (run in the environment of deploy/python-env.sh --sglang):
the real kvstreamd of tests/python/conftest.py (and its daemon on a kvfaultfs tier), SGLang's own
host KV pools built on CPU, and the backend as SGLang's factory creates it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, List, Tuple

import pytest
import torch

_spec = importlib.util.spec_from_file_location("kvstream_daemon_fixtures", Path(__file__).parents[1] / "python" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)
Daemon = _fixtures.Daemon
state_dir = _fixtures.state_dir
daemon = _fixtures.daemon
# The failure cases every integration answers alike (tests/python/conftest.py).
daemon_on_faultfs = _fixtures.daemon_on_faultfs
READS_WAIT_FOR_A_HUNG_TIER = _fixtures.READS_WAIT_FOR_A_HUNG_TIER
MAX_LOOKUP_KEYS = _fixtures.MAX_LOOKUP_KEYS
SESSIONS_WITH_A_LOOKUP_LIMIT = _fixtures.SESSIONS_WITH_A_LOOKUP_LIMIT
check_a_refused_call = _fixtures.check_a_refused_call
check_a_kill_inside_a_retrieve = _fixtures.check_a_kill_inside_a_retrieve
# The daemon's load estimate and staging as a test chooses them (wrappers of the session's client).
estimating = _fixtures.estimating
staging_full = _fixtures.staging_full

from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig, HiCacheStorageExtraInfo  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

from kvstream.sglang import KVStreamHiCache, extra_config  # noqa: E402

EXTRA_INFO = HiCacheStorageExtraInfo(prefix_keys=[])

# A small model: pages of 16 tokens x 4 layers x 2 KV heads x 64 dims, bf16 (16 KiB per K or V piece).
PAGE, LAYERS, HEADS, DIM = 16, 4, 2, 64


def host_pool(layout: str = "page_first", allocator: str = "shm", device_tokens: int = 256) -> Tuple[Any, Any]:
    """SGLang's device pool (on CPU) and its host pool, as SGLang builds them (pin_memory needs CUDA)."""
    device = MHATokenToKVPool(device_tokens, PAGE, torch.bfloat16, HEADS, DIM, LAYERS, "cpu", False,
                              start_layer=0, end_layer=LAYERS)
    host = MHATokenToKVPoolHost(device.get_device_pool_infos()[0].buffer_info, 2.0, 0, PAGE, layout,
                                pin_memory=False, device="cpu", allocator_type=allocator,
                                device_capacity_tokens=device.size, start_layer=device.start_layer,
                                end_layer=device.end_layer, write_back_staging=device.hicache_write_back_staging)
    return device, host


def storage_config(extra: dict, tp_rank: int = 0, tp_size: int = 1, mla: bool = False,
                   layout: str = "page_first") -> HiCacheStorageConfig:
    return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=False,
                                is_page_first_layout=layout == "page_first", model_name="Qwen/Tiny",
                                extra_config=extra)


def fill(host: Any, indices: torch.Tensor, seed: int) -> None:
    """Random bytes in every page at `indices` (token slots, a page each PAGE)."""
    g = torch.Generator().manual_seed(seed)
    for p in range(0, indices.numel(), PAGE):
        page = host.get_data_page(int(indices[p]))
        host.set_from_flat_data_page(int(indices[p]), torch.randn(page.numel(), generator=g).to(page.dtype))


def same_pages(host: Any, a: torch.Tensor, b: torch.Tensor) -> bool:
    return all(torch.equal(host.get_data_page(int(a[i])), host.get_data_page(int(b[i])))
               for i in range(0, a.numel(), PAGE))


def page_keys(n: int, tag: str = "") -> List[str]:
    return [f"{i:02d}{tag}".ljust(64, "a") for i in range(n)]  # SGLang's keys: 64-hex page hashes


def make_backend(daemon: Any, host: Any, **kw: Any) -> KVStreamHiCache:
    """The backend as SGLang's `dynamic` factory creates it (extra config: kw["extra"]; the other
    kw go to storage_config), with `host` registered as SGLang's cache controller does."""
    extra = extra_config(daemon.socket, shm=getattr(host, "fd", None) is not None, retry_interval=0.05)
    extra.update(kw.pop("extra", {}))
    backend = StorageBackendFactory.create_backend("dynamic", storage_config(extra, **kw), host)
    assert isinstance(backend, KVStreamHiCache)
    backend.register_mem_pool_host(host)  # as SGLang's cache controller does right after
    return backend


@pytest.fixture
def pool_factory():
    return host_pool
