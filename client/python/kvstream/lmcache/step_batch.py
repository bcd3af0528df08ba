"""Step batching (M1) for LMCache: every chunk that the requests of one step will load from
kvstreamd, submitted as ONE retrieve before LMCache retrieves them request after request.

vLLM's LMCache connector loads a step's requests one after another, and LMCache asks a storage
backend for one request's chunks at a time. `prefetch_step` computes, for all requests of the
step, the keys LMCache is about to ask KVStreamBackend for (same token database, same mask, same
block mapping over the storage backends), and hands them to KVStreamBackend.prefetch: the
per-request gets that follow find their chunks in flight or landed. No vLLM import here, so the
logic is testable with LMCache alone; vllm_connector.py wires it into the connector.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import torch
from lmcache.utils import CacheEngineKey

from .backend import KVStreamBackend


@dataclass(frozen=True)
class StepLoad:
    """One request's load in a step: the tokens LMCache holds KV for (vLLM's
    `token_ids[:lmcache_cached_tokens]`), how many leading ones vLLM already has, its configs."""

    tokens: Any  # list[int] or a 1-D tensor
    vllm_cached_tokens: int
    request_configs: Optional[dict] = None


def find_backend(storage_manager: Any) -> Optional[Tuple[str, KVStreamBackend]]:
    """The (name, backend) of the KVStreamBackend loaded in a StorageManager, if any."""
    for name, backend in getattr(storage_manager, "storage_backends", {}).items():
        if isinstance(backend, KVStreamBackend):
            return name, backend
    return None


def step_keys(token_database: Any, storage_manager: Any, backend_name: str, loads: Sequence[StepLoad],
              chunk_size: int) -> List[CacheEngineKey]:
    """The keys that LMCache's retrieve of each load will ask `backend_name` for, in step order.

    Mirrors LMCache's retrieve: chunks wholly inside vLLM's cached prefix are masked out (the mask
    is False on the leading vllm_cached_tokens rounded down to a chunk), and the block mapping
    assigns each key to the first storage backend holding the prefix."""
    keys: List[CacheEngineKey] = []
    for load in loads:
        n = len(load.tokens)
        if n == 0:
            continue
        mask = torch.ones(n, dtype=torch.bool)
        mask[: load.vllm_cached_tokens // chunk_size * chunk_size] = False
        chunk_infos = [(key, start, end) for start, end, key in token_database.process_tokens(
            tokens=load.tokens, mask=mask, request_configs=load.request_configs)]
        if not chunk_infos:
            continue
        mapping = storage_manager.get_block_mapping(chunk_infos)
        keys.extend(key for key, _, _ in mapping.get(backend_name, []))
    return keys


def prefetch_step(engine: Any, loads: Sequence[StepLoad]) -> int:
    """Submits all chunks of the step's loads that KVStreamBackend serves as one retrieve.

    `engine` is LMCache's LMCacheEngine (token_database, storage_manager, config). Returns the
    number of chunks submitted (0 when KVStreamBackend is not loaded)."""
    storage_manager = getattr(engine, "storage_manager", None)
    found = find_backend(storage_manager)
    if found is None or not loads:
        return 0
    name, backend = found
    keys = step_keys(engine.token_database, storage_manager, name, loads, engine.config.chunk_size)
    return backend.prefetch(keys)


def release_step(engine: Any) -> None:
    """Drops what the step prefetched and no request took."""
    found = find_backend(getattr(engine, "storage_manager", None))
    if found is not None:
        found[1].release_prefetched()
