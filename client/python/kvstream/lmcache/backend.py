"""KVStreamBackend: an LMCache storage plugin that keeps LMCache's chunks in kvstreamd.

Load it from LMCache's configuration (module_path kvstream.lmcache.backend works too):

    storage_plugins: [kvstream]
    extra_config:
      storage_plugin.kvstream.module_path: kvstream.lmcache
      storage_plugin.kvstream.class_name: KVStreamBackend
      kvstream.socket_path: /run/kvstream/kvstreamd.sock

Each LMCache worker (one per tensor-parallel rank) attaches its own session; the daemon pools the
reads of all sessions into one step. Keys are CacheEngineKey.to_string(). A stored chunk is the
MemoryObj's bytes behind a small self-describing header (chunk_codec), so any process can read it.

Data path: a get reads every key of the call in ONE daemon retrieve. When LMCache's CPU pool is
shared memory (LMCache's own `extra_config: {shm_name: <name>}`; kvstream.zero_copy true, the
default), the pool is handed to the daemon as a client region and the chunks land in MemoryObjs
allocated from LocalCPUBackend (by O_DIRECT; through the daemon's bounce buffers when a GPU pinned
the pool): no copy in Python (`zero_copy` says whether this path is live).
Otherwise they land in the session arena and, as each lands (the others still in flight), it is
copied once into a MemoryObj allocated from LocalCPUBackend. A put takes a reference on each MemoryObj and returns at once; a worker
thread copies the chunks into the arena and persists them (the daemon stages them and writes them
while no read is pending), drops the reference once the daemon has staged the bytes, and calls
`on_complete_callback(key)` once the chunk is written to its tiers.

When the daemon is down or restarts, calls report misses and puts are dropped, with loud log
lines, and the backend reconnects by itself (DaemonLink). No exception escapes into LMCache.

Load or recompute: a lookup asks the daemon for its load estimate and contains only the chunks
worth loading (kvstream.verdict through kvstream.transfer.lookup: LMCache's chunk_size tokens a
chunk, the model's shape from its config, its layers and head size from LMCache's metadata, the
engine's world size as its GPUs); settings kvstream.verdict, kvstream.recompute_tflops,
kvstream.recompute_tokens_per_s, kvstream.model_shape.

This class only maps LMCache's interface onto its parts: settings (extra_config), daemon_link
(the session), lookups (lookups and payload sizes), gets (reads and prefetches) and puts (the put
worker). All of them log through this module's logger.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Callable, List, Optional, Sequence

import torch
from lmcache.logging import init_logger
from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryObj
from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface

from ..client import Client
from ..daemon_link import DaemonLink, Session
from ..errors import KVStreamError
from ..verdict import Verdict
from .gets import Gets
from .lookups import Lookups
from .puts import Puts
from .settings import Settings, extra_config
from .shared_pool import SharedPool, pinned_by_a_device

__all__ = ["KVStreamBackend", "Settings", "extra_config"]

logger = init_logger(__name__)


class KVStreamBackend(StoragePluginInterface):
    """LMCache StoragePluginInterface over kvstreamd. Thread-safe."""

    def __init__(self, dst_device: str = "cpu", config: Any = None, metadata: Any = None,
                 local_cpu_backend: Any = None, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        super().__init__(dst_device=dst_device, config=config, metadata=metadata,
                         local_cpu_backend=local_cpu_backend, loop=loop)
        self.settings = Settings(getattr(config, "extra_config", None))
        role = getattr(metadata, "role", None)
        # The scheduler only looks keys up: it has no LocalCPUBackend to allocate into.
        self.with_session = role != "scheduler" and local_cpu_backend is not None
        s = self.settings
        self.pool = _shared_pool(local_cpu_backend) if self.with_session and s.zero_copy else None
        if self.with_session:
            model = getattr(metadata, "model_name", "") or ""
            rank = int(getattr(metadata, "worker_id", 0) or 0)
            world = int(getattr(metadata, "world_size", 1) or 1)

            def connect() -> Session:
                client = Client.attach(s.socket_path, model=model, rank=rank, world_size=world,
                                       arena_bytes=s.arena_bytes, timeout=s.connect_timeout,
                                       rpc_timeout=s.lookup_timeout)
                if self.pool is None:
                    return Session(client)
                try:
                    return Session(client, client.add_region(self.pool.fd, self.pool.size,
                                                             device_pinned=pinned_by_a_device()), self.pool)
                except KVStreamError as e:  # e.g. over the daemon's arena budget: the arena serves
                    logger.warning("kvstream: LMCache's CPU pool (%d bytes) cannot be handed to kvstreamd (%s); "
                                   "chunks are copied through the session arena", self.pool.size, e)
                    return Session(client)
            describe = f"kvstreamd on {s.socket_path} (session for {model or 'model'} rank {rank}/{world})"
        else:
            def connect() -> Session:
                return Session(Client.connect(s.socket_path, timeout=s.connect_timeout, rpc_timeout=s.lookup_timeout))
            describe = f"kvstreamd on {s.socket_path} (lookups only, role {role or 'unknown'})"
        self.link = DaemonLink(describe, connect, logger, retry_interval=s.retry_interval)
        self.verdict, chunk_tokens, keys_per_chunk = _verdict(s, config, metadata)
        self.lookups = Lookups(self.link, self.verdict, chunk_tokens, getattr(metadata, "model_name", "") or "",
                               keys_per_chunk)
        self.gets = Gets(self.link, self.lookups, local_cpu_backend, s.io_timeout, logger, self.pool)
        self.puts = Puts(self.link, self.lookups, s.io_timeout, logger)
        self.link.connect_now()  # connect now if the daemon is up; otherwise say so once and retry later

    def __str__(self) -> str:
        return "KVStreamBackend"

    @property
    def zero_copy(self) -> bool:
        """True while the live session holds LMCache's CPU pool: gets land in MemoryObjs in place."""
        session = self.link.session()
        return session is not None and session.region != 0

    def status(self) -> dict:
        """Which data path serves gets, and how many chunks each delivered (in_place, copied)."""
        return {"zero_copy": self.zero_copy, "pool": self.pool.path if self.pool else None, **self.gets.counts(),
                "puts_dropped": self.puts.dropped, "recomputed_chunks": self.lookups.recomputed_chunks}

    # -- lookups -----------------------------------------------------------------------------

    def contains(self, key: CacheEngineKey, pin: bool = False) -> bool:
        return self.batched_contains([key], pin) == 1

    def batched_contains(self, keys: List[CacheEngineKey], pin: bool = False) -> int:
        """Leading keys present, from ONE daemon lookup; with `pin`, the daemon locks those
        present against eviction (for kvstream.pin_lease seconds at most)."""
        return self.lookups.prefix_hits(keys, self.settings.pin_lease if pin else 0)

    async def batched_async_contains(self, lookup_id: str, keys: List[CacheEngineKey], pin: bool = False) -> int:
        return await asyncio.get_running_loop().run_in_executor(None, self.batched_contains, keys, pin)

    def exists_in_put_tasks(self, key: CacheEngineKey) -> bool:
        return self.puts.in_flight(key)

    # -- gets --------------------------------------------------------------------------------

    def get_blocking(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        return self.batched_get_blocking([key])[0]

    def batched_get_blocking(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        """Every key in ONE daemon retrieve (keys prefetched for the step are taken from there).

        Each returned MemoryObj holds one reference for the caller; None for a key that could not
        be read (miss, daemon down, no CPU memory)."""
        return self.gets.get(keys)

    async def batched_get_non_blocking(self, lookup_id: str, keys: List[CacheEngineKey],
                                       transfer_spec: Any = None) -> List[MemoryObj]:
        """The leading keys that could be read, from one retrieve on an executor thread. Each
        returned MemoryObj holds one reference and no pin, as LocalCPUBackend returns them: the
        engine drops chunks it does not use with ref_count_down alone (a pinned one would stay
        allocated until LMCache's pin timeout)."""
        objs = await asyncio.get_running_loop().run_in_executor(None, self.batched_get_blocking, list(keys))
        leading: List[MemoryObj] = []
        for obj in objs:
            if obj is None:
                break
            leading.append(obj)
        for obj in objs[len(leading):]:
            if obj is not None:
                obj.ref_count_down()
        return leading

    def prefetch(self, keys: Sequence[CacheEngineKey]) -> int:
        """Starts ONE retrieve for every key not already prefetched and returns at once.

        The gets that follow (batched_get_blocking) take these keys' MemoryObjs as they land.
        Step batching: a connector calls this with the chunks of all requests of a step before
        LMCache retrieves them request after request. Returns the number of keys submitted."""
        return self.gets.prefetch(keys)

    def release_prefetched(self) -> int:
        """Drops prefetched chunks no get took (e.g. a request the step did not load after all)."""
        return self.gets.release_prefetched()

    # -- puts --------------------------------------------------------------------------------

    def batched_submit_put_task(self, keys: Sequence[CacheEngineKey], objs: List[MemoryObj],
                                transfer_spec: Any = None,
                                on_complete_callback: Optional[Callable[[CacheEngineKey], None]] = None
                                ) -> Optional[List["concurrent.futures.Future[bool]"]]:
        """Queues the chunks for persisting and returns at once with one future per chunk queued
        (True once written to its tiers, False if it was dropped). Keys already queued are skipped. Each queued
        MemoryObj is referenced (ref_count_up) until the daemon has staged its bytes."""
        if not self.with_session:
            return None
        return self.puts.submit(keys, objs, on_complete_callback)

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Waits until every put queued so far is written or dropped. False on timeout."""
        return self.puts.flush(timeout)

    # -- pins, removal, lifecycle ------------------------------------------------------------

    def pin(self, key: CacheEngineKey) -> bool:
        """Locks the key in the daemon against capacity eviction until unpin, or for
        kvstream.pin_lease seconds: LMCache's async lookups pin keys they never unpin, and a
        crashed worker's pins must end. False if the key is absent or the daemon unavailable."""
        session = self.link.session()
        if session is None:
            return False
        found = self.lookups.lookup(session, [key.to_string()], self.settings.pin_lease)
        return found is not None and found[0][0].locked

    def unpin(self, key: CacheEngineKey) -> bool:
        """Releases one pin of the key; False if it held none (or its lease had ended)."""
        session = self.link.session()
        if session is None:
            return False
        return self.link.call(session, "unlock", lambda: session.client.unlock([key.to_string()]) > 0, failed=False)

    def remove(self, key: CacheEngineKey, force: bool = True) -> bool:
        """Evicts the key from every tier of the daemon."""
        session = self.link.session()
        if session is None:
            return False
        name = key.to_string()
        removed = self.link.call(session, "evict", lambda: session.client.evict(key=name).replicas > 0, failed=None)
        if removed is None:
            return False
        self.lookups.forget(name)
        return removed

    def get_allocator_backend(self) -> Any:
        if self.local_cpu_backend is None:
            raise RuntimeError("KVStreamBackend has no allocator in the scheduler role (no LocalCPUBackend)")
        return self.local_cpu_backend

    def touch_cache(self) -> None:
        """Nothing to do: every daemon read already refreshes the chunk in the daemon's LRU."""

    def close(self) -> None:
        """Persists what is queued (bounded by io_timeout), then ends the session."""
        if not self.puts.close():
            return
        self.release_prefetched()
        self.link.close()
        self.gets.release_held_back()
        if self.pool is not None:
            self.pool.close()


def _verdict(settings: Settings, config: Any, metadata: Any) -> "tuple[Verdict, int, int]":
    """The backend's load-or-recompute verdict, LMCache's tokens per chunk and keys per chunk (one
    per layer when LMCache stores layer by layer)."""
    model = getattr(metadata, "model_name", "") or ""
    world = int(getattr(metadata, "world_size", 1) or 1)
    verdict = Verdict(settings.recompute, f"LMCache plugin ({model or 'model'})", gpus=world, log=logger)
    shape = getattr(metadata, "kv_shape", None)  # (layers, 2 or 1, chunk_size, kv heads per rank, head_size)
    seen = {}
    if isinstance(shape, (tuple, list)) and len(shape) == 5:
        seen = {"layers": int(shape[0])}
        if not getattr(metadata, "use_mla", False):  # MLA stores its latent, not heads
            seen["head_dim"] = int(shape[4])
        verdict.see(seen, model)
    chunk_tokens = int(getattr(config, "chunk_size", 0) or getattr(metadata, "chunk_size", 0) or 256)
    layerwise = bool(getattr(config, "use_layerwise", False)) and seen.get("layers", 0) > 0
    return verdict, chunk_tokens, seen["layers"] if layerwise else 1


def _shared_pool(local_cpu_backend: Any) -> Optional[SharedPool]:
    """The shared-memory file behind LocalCPUBackend's pinned pool (MixedMemoryAllocator.buffer),
    or None when the pool is anonymous memory (no shm_name) or not one buffer."""
    buffer = getattr(getattr(local_cpu_backend, "memory_allocator", None), "buffer", None)
    if not isinstance(buffer, torch.Tensor) or buffer.device.type != "cpu" or not buffer.is_contiguous():
        return None
    pool = SharedPool.find(buffer.data_ptr(), buffer.numel() * buffer.element_size())
    logger.info("kvstream: LMCache's CPU pool %s", f"is shared with the daemon ({pool.path})" if pool
                else "is not handed to the daemon (private memory, or a file that is no longer its own): "
                     "chunks are copied through the session arena (extra_config shm_name gives zero copy)")
    return pool
