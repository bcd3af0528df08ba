"""Builds LMCache objects (config, metadata, StorageManager) that load the kvstream plugin, and
the kvstream L2 adapter of LMCache's multi-process server as LMCache builds it (its --l2-adapter
parsing and adapter factory, on its L1 memory), with the calls LMCache's controllers make."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import select
import time
from typing import Any, List, Optional

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey
from lmcache.v1.distributed.config import L1MemoryManagerConfig
from lmcache.v1.distributed.l2_adapters import create_l2_adapter
from lmcache.v1.distributed.l2_adapters.config import add_l2_adapters_args, parse_args_to_l2_adapters_config
from lmcache.v1.distributed.memory_manager.l1_memory_manager import L1MemoryManager
from lmcache.v1.event_manager import EventManager
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.storage_manager import StorageManager

from kvstream.lmcache import KVStreamBackend, extra_config
from kvstream.lmcache.l2_adapter import l2_adapter_spec

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
    written; returns their tensors."""
    objs, tensors = random_chunks(sm, len(keys), seed)
    sm.batched_put(keys, objs)  # LMCache drops its references right after submitting
    assert backend_of(sm).flush(30)
    return tensors


# -- the MP server's L2 adapter ---------------------------------------------------------------

LAYOUT = MemoryLayoutDesc([torch.Size((4, 2, 64, 256))], [torch.bfloat16])  # 256 KiB per chunk


def parse_spec(spec: dict):
    """The adapter config exactly as `lmcache server --l2-adapter JSON` parses it."""
    parser = argparse.ArgumentParser()
    add_l2_adapters_args(parser)
    args = parser.parse_args(["--l2-adapter", json.dumps(spec)])
    return parse_args_to_l2_adapters_config(args).adapters[0]


def make_l1(kind: str) -> L1MemoryManager:
    """LMCache's L1 memory: a POSIX-shm pool (as lmcache server --shm-name makes it: zero copy),
    kind "shm", or an anonymous one (the copy path), kind "anonymous"; `kind` is kept on it."""
    shm_name = f"lmcache_l1_pool_kvstest{os.getpid()}" if kind == "shm" else ""
    manager = L1MemoryManager(L1MemoryManagerConfig(size_in_bytes=64 << 20, use_lazy=False, shm_name=shm_name))
    manager.kind = kind
    return manager


def create_adapter(socket_path: str, l1: L1MemoryManager, **params: Any):
    """The adapter built by LMCache's factory from the --l2-adapter JSON, on `l1`."""
    params.setdefault("retry_interval", 0.05)
    params.setdefault("connect_timeout", 1.0)
    params.setdefault("arena_bytes", 32 << 20)
    return create_l2_adapter(parse_spec(l2_adapter_spec(socket_path, **params)), l1.get_l1_memory_desc())


def keys_for(n: int, start: int = 0, **fields: Any) -> List[ObjectKey]:
    fields.setdefault("model_name", MODEL)
    fields.setdefault("kv_rank", 0)
    return [ObjectKey(chunk_hash=(start + i).to_bytes(8, "big") * 2, **fields) for i in range(n)]


def allocate(l1: L1MemoryManager, n: int, seed: Optional[int] = 0) -> list:
    """n L1 objects of LAYOUT, random (from `seed`) or zeroed (seed None)."""
    err, objs = l1.allocate(LAYOUT, n)
    assert objs, err
    if seed is not None:
        gen = torch.Generator().manual_seed(seed)
        for obj in objs:
            obj.tensor.copy_(torch.randn(obj.tensor.shape, generator=gen).to(torch.bfloat16))
    else:
        for obj in objs:
            obj.tensor.zero_()
    return objs


def wait_for(fd: int, poll_result, timeout: float = 30.0):
    """As LMCache's controllers do: poll the eventfd, drain it, then query the result."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        poller.poll(100)
        try:
            os.eventfd_read(fd)
        except BlockingIOError:
            pass
        result = poll_result()
        if result is not None and result != {}:
            return result
    raise TimeoutError("the adapter signalled no completion")


def store(adapter, keys, objs):
    tid = adapter.submit_store_task(keys, objs)
    results = wait_for(adapter.get_store_event_fd(), adapter.pop_completed_store_tasks)
    assert list(results) == [tid]
    return results[tid]


def lookup(adapter, keys) -> List[int]:
    tid = adapter.submit_lookup_and_lock_task(keys, {})
    bitmap = wait_for(adapter.get_lookup_and_lock_event_fd(), lambda: adapter.query_lookup_and_lock_result(tid))
    assert adapter.query_lookup_and_lock_result(tid) is None  # a result is handed out once
    return bitmap.get_indices_list()


def load(adapter, keys, objs) -> List[int]:
    tid = adapter.submit_load_task(keys, objs)
    bitmap = wait_for(adapter.get_load_event_fd(), lambda: adapter.query_load_result(tid))
    return bitmap.get_indices_list()
