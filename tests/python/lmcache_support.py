"""Builds LMCache objects (config, metadata, StorageManager) that load the kvstream plugin."""

from __future__ import annotations

import itertools
import os
from typing import List, Optional

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.event_manager import EventManager
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.storage_manager import StorageManager

from kvstream.lmcache import KVStreamBackend, extra_config

MODEL = "test/model"
KV_SHAPE = (4, 2, 256, 8, 128)  # layers, K/V, chunk tokens, heads, head dim
CHUNK_SHAPE = torch.Size((4, 2, 256, 8 * 128))  # KV_2LTD


def plugin_extra_config(socket_path: str, **overrides: object) -> dict:
    extra = extra_config(socket_path, arena_bytes=64 << 20, retry_interval=0.05, connect_timeout=1.0)
    extra.update(overrides)  # full extra_config keys
    return extra


_pools = itertools.count()


def shm_pool(shared: bool = True) -> dict:
    """extra_config entries that make LMCache allocate its CPU pool in POSIX shared memory (a new
    /dev/shm name each call), or none for its default private pool."""
    return {"shm_name": f"kvstest_{os.getpid()}_{next(_pools)}"} if shared else {}


def make_config(socket_path: str, local_cpu: bool = False, plugins: Optional[List[str]] = None,
                cpu_gb: float = 0.25, **overrides: object) -> LMCacheEngineConfig:
    config = LMCacheEngineConfig.from_defaults(
        chunk_size=256, local_cpu=local_cpu, max_local_cpu_size=cpu_gb, lmcache_instance_id="kvstream-test")
    config.storage_plugins = ["kvstream"] if plugins is None else plugins
    config.extra_config = plugin_extra_config(socket_path, **overrides)
    return config


def make_metadata(role: Optional[str] = None, worker_id: int = 0, world_size: int = 1) -> LMCacheMetadata:
    return LMCacheMetadata(model_name=MODEL, world_size=world_size, local_world_size=world_size,
                           worker_id=worker_id, local_worker_id=worker_id, kv_dtype=torch.bfloat16,
                           kv_shape=KV_SHAPE, role=role)


def make_storage_manager(socket_path: str, **kwargs: object) -> StorageManager:
    role = kwargs.pop("role", None)
    return StorageManager(config=make_config(socket_path, **kwargs), metadata=make_metadata(role=role),
                          event_manager=EventManager())


def key(chunk_hash: int, worker_id: int = 0) -> CacheEngineKey:
    return CacheEngineKey(model_name=MODEL, world_size=1, worker_id=worker_id, chunk_hash=chunk_hash,
                          dtype=torch.bfloat16)


def random_chunks(manager: StorageManager, n: int, seed: int = 0, shape: torch.Size = CHUNK_SHAPE):
    """n MemoryObjs from LMCache's allocator, filled with distinct random values (one ref each)."""
    gen = torch.Generator().manual_seed(seed)
    objs, tensors = [], []
    for _ in range(n):
        obj = manager.allocate(shape, torch.bfloat16)
        assert obj is not None
        values = torch.randn(shape, generator=gen, dtype=torch.float32).to(torch.bfloat16)
        obj.tensor.copy_(values)
        objs.append(obj)
        tensors.append(values)
    return objs, tensors


def free_chunk_buffers(sm: StorageManager) -> int:
    """How many chunk buffers LMCache's CPU allocator can hand out right now (all are given back)."""
    taken = []
    while True:
        obj = sm.allocate(CHUNK_SHAPE, torch.bfloat16, eviction=False, busy_loop=False)
        if obj is None:
            break
        taken.append(obj)
    for obj in taken:
        obj.ref_count_down()
    return len(taken)


def backend_of(sm: StorageManager) -> KVStreamBackend:
    """The kvstream plugin LMCache loaded into `sm`."""
    backend = sm.storage_backends["kvstream"]
    assert isinstance(backend, KVStreamBackend)
    return backend


def put(sm: StorageManager, keys: List[CacheEngineKey], seed: int = 0) -> list:
    """Stores random chunks under `keys` through LMCache and waits until the plugin made them
    durable; returns their tensors."""
    objs, tensors = random_chunks(sm, len(keys), seed)
    sm.batched_put(keys, objs)  # LMCache drops its references right after submitting
    assert backend_of(sm).flush(30)
    return tensors
