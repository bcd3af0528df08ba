"""KVStreamHiCache: SGLang's HiCache storage (its L3) over kvstreamd.

A page of SGLang's host KV pool is stored as the pieces its pool names for it
(`get_page_buffer_meta`: under the page_first layouts its K and its V), each one chunk keyed
"<namespace>/<page hash>/<piece>". The namespace holds the model, the rank (none for MLA models,
whose KV every rank shares and rank 0 writes) and the pool layout (the byte order of a piece).

Two data paths, chosen when SGLang registers its host pool:
- zero copy (`allocator: shm` in the extra config: SGLang's pool is a memfd): the pool is handed to
  the daemon as a client region, reads land in the pool's pages by O_DIRECT and writes are copied
  out of them into staging, by the daemon;
- copy (any other pool, or a region the daemon refuses): pieces go through the session's arena
  (one memmove each way), in waves that fit it.
Both are kvstream.transfer's (each piece takes the path its address allows); this module maps
SGLang's pages to pieces and results back to pages.
The v1 calls take one daemon retrieve (or one lookup and one persist) per SGLang batch. batch_set_v1
returns once the pages are staged: SGLang may reuse them at once; the writes follow in the
background (a page that fails to be written is a miss later, and logged).

A daemon that is down or restarting gives misses and failed sets, never an exception or None into
SGLang; the backend reattaches by itself (DaemonLink) and hands its region over again.

Load or recompute: batch_exists is kvstream.transfer.lookup with the backend's verdict: it asks
the daemon for its load estimate and counts only the leading pages worth loading (a page's tokens
per chunk, the pages before the call's from extra_info.prefix_keys, the model's shape from its
config.json and the host pool's layers and head size, tp_size times recompute_tflops).
Pages are written shallow first (the call's order, after its prefix_keys); a page part the daemon
drops because its staging is full fails its page (SGLang does not have it stored) and counts as
pages_dropped, not pages_failed, with nothing logged.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

from .. import transfer
from ..client import Client
from ..daemon_link import DaemonLink, Session
from ..errors import KVStreamError
from ..plugin_settings import DEFAULT_SOCKET, Settings
from ..shared_region import SharedRegion, gpu_present
from ..verdict import Verdict

logger = logging.getLogger(__name__)

# Where SGLang's `dynamic` backend factory finds this class (extra config module_path / class_name).
BACKEND_MODULE = "kvstream.sglang"
BACKEND_CLASS = "KVStreamHiCache"
# The session's arena (kvstream.arena_bytes overrides both): on the copy path pages pass through it;
# when the pool is a region pages never do.
COPY_ARENA_BYTES = 256 << 20
REGION_ARENA_BYTES = 4 << 20

PagePart = Tuple[int, int]  # (address in this process, bytes)


def namespace(config: HiCacheStorageConfig, layout: str) -> str:
    """The key prefix of one rank's pages: model, rank and pool layout."""
    model = config.model_name or "model"
    if config.is_mla_model:
        rank = "mla"  # one copy for all ranks: every rank reads what rank 0 wrote
    else:
        rank = f"tp{config.tp_rank}of{config.tp_size}"
    if config.pp_size > 1:
        rank += f"-pp{config.pp_rank}of{config.pp_size}"
    if getattr(config, "attn_cp_size", 1) > 1:
        rank += f"-cp{config.attn_cp_rank}of{config.attn_cp_size}"
    return f"sglang/{model}/{rank}/{layout}"


def extra_config(socket_path: str = DEFAULT_SOCKET, shm: bool = True, **settings: Any) -> Dict[str, Any]:
    """SGLang's --hicache-storage-backend-extra-config for this backend (with `dynamic`)."""
    extra: Dict[str, Any] = {
        "backend_name": "kvstream",
        "module_path": BACKEND_MODULE,
        "class_name": BACKEND_CLASS,
        "interface_v1": 1,
        "kvstream.socket_path": socket_path,
    }
    if shm:
        extra["allocator"] = "shm"
    extra.update({f"kvstream.{k}": v for k, v in settings.items()})
    return extra


class KVStreamHiCache(HiCacheStorage):
    """One per rank: SGLang constructs it as cls(storage_config, kwargs), then registers its host pool."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[Dict[str, Any]] = None) -> None:
        self.config = storage_config
        extra = dict(storage_config.extra_config or {})
        self.settings = Settings(extra)
        self.interface_v1 = bool(extra.get("interface_v1", 0))
        self.mem_pool_host: Any = None
        self.prefix = namespace(storage_config, "unregistered")
        self._shm_fd: Optional[int] = None  # the pool's memfd, when it is one
        self._shm_base = 0
        self._shm_size = 0
        self._counts_lock = threading.Lock()  # SGLang gets and sets on different threads
        self._counts = {"pages_read": 0, "pages_missed": 0, "pages_written": 0, "pages_failed": 0,
                        "pages_dropped": 0, "pages_recomputed": 0}
        s = self.settings
        self._model = storage_config.model_name or ""
        self.verdict = Verdict(s.recompute, f"SGLang {self._model or 'model'}", gpus=storage_config.tp_size or 1,
                               log=logger)
        describe = f"kvstreamd on {s.socket_path} (SGLang {storage_config.model_name or 'model'} {self.prefix})"
        self.link = DaemonLink(describe, self._connect, logger, retry_interval=s.retry_interval)

    # -- setup -------------------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        self.mem_pool_host = mem_pool_host
        self.prefix = namespace(self.config, str(getattr(mem_pool_host, "layout", "flat")))
        fd = getattr(mem_pool_host, "fd", None)
        buffer = getattr(mem_pool_host, "kv_buffer", None)
        if isinstance(fd, int) and fd >= 0 and isinstance(buffer, torch.Tensor):
            self._shm_fd, self._shm_base, self._shm_size = fd, buffer.data_ptr(), os.fstat(fd).st_size
        self.verdict.see(_pool_shape(mem_pool_host, self.config), self._model)
        self.link.connect_now()  # now if the daemon is up; otherwise say so once and retry later

    def _connect(self) -> Session:
        """Attaches this rank's session and hands it the pool (the zero-copy path) when it can."""
        if self._shm_fd is not None and self.settings.zero_copy:
            client = self._attach(REGION_ARENA_BYTES)
            try:
                # With a GPU, SGLang pins its host pool (cudaHostRegister): the daemon must know.
                region = client.add_region(self._shm_fd, self._shm_size, device_pinned=gpu_present())
                # The pool's memfd as SGLang maps it: from its start, its whole size.
                return Session(client, region, SharedRegion(self._shm_fd, self._shm_size, self._shm_base, 0,
                                                            self._shm_size, "SGLang's host pool"))
            except KVStreamError as e:  # e.g. over the daemon's arena budget: the copy path serves
                logger.warning("kvstream: the host pool cannot be handed to kvstreamd (%s); pages are copied "
                               "through the session's arena", e)
                client.close()
        return Session(self._attach(COPY_ARENA_BYTES))

    def _attach(self, default_arena: int) -> Client:
        s, c = self.settings, self.config
        explicit = "kvstream.arena_bytes" in (c.extra_config or {})
        return Client.attach(s.socket_path, model=c.model_name or "", rank=c.tp_rank, world_size=c.tp_size,
                             arena_bytes=s.arena_bytes if explicit else default_arena, timeout=s.connect_timeout,
                             rpc_timeout=s.lookup_timeout)

    @property
    def zero_copy(self) -> bool:
        """True when the live session reads and writes the host pool in place."""
        session = self.link.session()
        return session is not None and session.region != 0

    # -- the v1 interface (zero copy where the pool allows) -------------------------------------

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """How many leading pages to load: stored (every piece of each), up to the verdict's cut.
        Ranks ask for their own keys."""
        try:
            return self._stored_prefix(keys, self._pieces_per_page(), start=_pages_before(extra_info))
        except Exception as e:  # noqa: BLE001 - never into SGLang
            logger.error("kvstream: batch_exists: %s", e)
            return 0

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Any = None) -> List[bool]:
        """Reads the pages into the host pool at `host_indices`; per page, whether it landed."""
        try:
            pages = self._page_pieces(keys, host_indices)
        except Exception as e:  # noqa: BLE001 - never into SGLang
            logger.error("kvstream: batch_get_v1: %s", e)
            return [False] * len(keys)
        ok = self._read(keys, pages)
        hits = sum(ok)
        self._count(pages_read=hits, pages_missed=len(ok) - hits)
        return ok

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Any = None) -> List[bool]:
        """Stores the pages at `host_indices` (those not stored yet); True per page once staged."""
        if not self.config.is_storage_writer:
            return [True] * len(keys)  # an MLA rank other than the writer: rank 0 stores the shared KV
        try:
            pages = self._page_pieces(keys, host_indices)
        except Exception as e:  # noqa: BLE001
            logger.error("kvstream: batch_set_v1: %s", e)
            return [False] * len(keys)
        return self._write(keys, pages, start=_pages_before(extra_info))

    # -- the legacy interface (a flat page tensor per key) --------------------------------------

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Optional[torch.Tensor]:
        got = self.batch_get([key], [target_location] if target_location is not None else None)
        return got[0] if got else None

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> List[Any]:
        try:
            if target_locations is None:
                target_locations = [self.mem_pool_host.get_dummy_flat_data_page() for _ in keys]
            pages = [[_tensor_piece(t)] for t in target_locations]
        except Exception as e:  # noqa: BLE001 - never into SGLang
            logger.error("kvstream: batch_get: %s", e)
            return [None] * len(keys)
        ok = self._read(keys, pages, flat=True)
        return [t if hit else None for t, hit in zip(target_locations, ok)]

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        if values is None or len(values) != len(keys):
            return False
        if not self.config.is_storage_writer:
            return True
        try:
            values = [v.contiguous() for v in values]  # kept alive until staged
            pages = [[_tensor_piece(v)] for v in values]
        except Exception as e:  # noqa: BLE001 - never into SGLang
            logger.error("kvstream: batch_set: %s", e)
            return False
        return all(self._write(keys, pages, flat=True))

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # -- housekeeping ----------------------------------------------------------------------------

    def clear(self) -> None:
        """Nothing to do: the daemon owns eviction (its tiers' capacities); SGLang's clear only
        resets its own view."""

    def _count(self, **counts: int) -> None:
        with self._counts_lock:
            for name, n in counts.items():
                self._counts[name] += n

    def get_stats(self) -> Dict[str, Any]:
        with self._counts_lock:
            stats: Dict[str, Any] = dict(self._counts)
        stats["zero_copy"] = self.zero_copy
        return stats

    def close(self) -> None:
        self.link.close()

    # -- the work ------------------------------------------------------------------------------

    def _keys(self, key: str, pieces: int, flat: bool = False) -> List[str]:
        if flat:
            return [f"{self.prefix}/flat/{key}"]
        return [f"{self.prefix}/{key}/{j}" for j in range(pieces)]

    def _pieces_per_page(self) -> int:
        if not self.interface_v1:
            return 1
        host = self.mem_pool_host
        if host is None:
            return 2
        ptrs, _ = host.get_page_buffer_meta(torch.arange(0, host.page_size, dtype=torch.int64))
        return len(ptrs)

    def _page_pieces(self, keys: Sequence[str], host_indices: torch.Tensor) -> List[List[PagePart]]:
        """Per page, its pieces in the host pool, as the pool names them."""
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if len(keys) == 0 or len(ptrs) % len(keys) != 0:
            raise ValueError(f"{len(keys)} keys but {len(ptrs)} pieces for host indices of {host_indices.numel()} tokens")
        per = len(ptrs) // len(keys)
        return [list(zip(ptrs[i * per:(i + 1) * per], sizes[i * per:(i + 1) * per])) for i in range(len(keys))]

    def _stored_prefix(self, keys: Sequence[str], pieces: int, flat: bool = False, start: int = 0) -> int:
        """Leading pages to load (`start`: pages before the first, cached): ONE daemon lookup of
        every piece of each, with the verdict."""
        session = self.link.session()
        if session is None or not keys:
            return 0
        names = [k for key in keys for k in self._keys(key, pieces, flat or not self.interface_v1)]
        per = 1 if (flat or not self.interface_v1) else pieces
        tokens = self._page_tokens()
        found = transfer.lookup(self.link, session, names, chunk_of=[i // per for i in range(len(names))],
                                verdict=self.verdict, chunk_tokens=tokens, start_tokens=start * tokens,
                                model=self._model, what=f"lookup of {len(names)} keys")
        if found is None:
            return 0
        self._count(pages_recomputed=found.recomputed)
        return found.hits

    def _page_tokens(self) -> int:
        """Tokens per page (per key SGLang hashes)."""
        logical = getattr(self.config, "logical_page_size", None)
        return int(logical or getattr(self.mem_pool_host, "page_size", 0) or 0)

    def _pieces(self, names: List[List[str]], pages: List[List[PagePart]],
                depths: Optional[Sequence[int]] = None) -> List[transfer.Piece]:
        """The pages' parts as pieces; `depths`: each page's index in its request's prefix."""
        return [transfer.Piece(n, address, size, depths[i] if depths is not None else 0)
                for i, (ns, p) in enumerate(zip(names, pages)) for n, (address, size) in zip(ns, p)]

    def _read(self, keys: Sequence[str], pages: List[List[PagePart]], flat: bool = False) -> List[bool]:
        """Reads the pages' parts (kvstream.transfer: in place in the pool, else through the arena);
        per page, whether every part landed."""
        session = self.link.session()
        if session is None:
            return [False] * len(keys)
        names = [self._keys(key, len(p), flat) for key, p in zip(keys, pages)]
        report = transfer.read(self.link, session, self._pieces(names, pages), timeout=self.settings.io_timeout)
        out, at = [], 0
        for p in pages:
            out.append(all(r.ok and r.size == size for r, (_, size) in zip(report.results[at:at + len(p)], p)))
            at += len(p)
        return out

    def _write(self, keys: Sequence[str], pages: List[List[PagePart]], flat: bool = False,
               start: int = 0) -> List[bool]:
        """Stores the pages not stored yet, shallow first (`start`: pages before the first); per
        page, True once every part is staged (or it was stored)."""
        session = self.link.session()
        if session is None:
            self._count(pages_failed=len(keys))
            return [False] * len(keys)
        stored = self._stored_prefix_set(session, keys, pages, flat)
        if stored is None:  # the lookup dropped the session: the write would fail on it too
            self._count(pages_failed=len(keys))
            return [False] * len(keys)
        todo = [i for i in range(len(keys)) if i not in stored]
        names = [self._keys(keys[i], len(pages[i]), flat) for i in todo]
        report = transfer.write(self.link, session, self._pieces(names, [pages[i] for i in todo],
                                                                 [start + i for i in todo]),
                                timeout=self.settings.io_timeout)
        staged = [r.index for r in report.staged if r.ok]
        report.written.add_done_callback(lambda f: self._written_later(staged, f.result()))
        ok = [True] * len(keys)
        dropped = 0  # pages with a part the daemon dropped (staging full) and none failed
        at = 0
        for i in todo:
            parts = report.staged[at:at + len(pages[i])]
            ok[i] = all(r.ok for r in parts)
            dropped += not ok[i] and all(r.ok or r.status is transfer.Status.DROPPED for r in parts)
            at += len(pages[i])
        written = sum(ok[i] for i in todo)
        self._count(pages_written=written, pages_dropped=dropped, pages_failed=len(todo) - written - dropped)
        return ok

    def _stored_prefix_set(self, session: Session, keys: Sequence[str], pages: List[List[PagePart]],
                           flat: bool) -> Optional[set]:
        """Indices of the pages already stored (whole): they are not written again. A refused lookup:
        none (every page is written); None: the lookup dropped the session."""
        names = [n for key, p in zip(keys, pages) for n in self._keys(key, len(p), flat)]
        found = self.link.call(session, f"lookup of {len(names)} keys", lambda: session.client.lookup(names))
        if found is None:
            return None if session.dropped else set()
        stored, at = set(), 0
        for i, p in enumerate(pages):
            if all(e.present for e in found[0][at:at + len(p)]):
                stored.add(i)
            at += len(p)
        return stored

    def _written_later(self, staged: List[int], written: List[bool]) -> None:
        """Counts and logs page parts staged that then failed to be written (they are misses
        later; SGLang is not waiting)."""
        failed = sum(1 for i in staged if not written[i])
        if failed:
            self._count(pages_failed=failed)
            logger.warning("kvstream: %d of %d staged page parts failed to be written", failed, len(staged))

def _pages_before(extra_info: Any) -> int:
    """The pages of the request before a call's keys (SGLang's prefix_keys), 0 when not told."""
    prefix = getattr(extra_info, "prefix_keys", None)
    return len(prefix) if isinstance(prefix, (list, tuple)) else 0


def _pool_shape(host: Any, config: HiCacheStorageConfig) -> Dict[str, int]:
    """What SGLang's host pool says of the model: its layers (a pipeline stage's, times the stages)
    and, for an MHA pool, the head size. Not its KV heads: a rank's, which SGLang replicates when
    there are fewer than ranks (the model's config says how many)."""
    seen: Dict[str, int] = {}
    layers = getattr(host, "target_layer_num", None) or getattr(host, "layer_num", None)
    if isinstance(layers, int) and layers > 0:
        seen["layers"] = layers * max(1, config.pp_size)
    head_dim = getattr(host, "head_dim", None)
    if not config.is_mla_model and isinstance(head_dim, int) and head_dim > 0:
        seen["head_dim"] = head_dim
    return seen


def _tensor_piece(tensor: torch.Tensor) -> PagePart:
    if not tensor.is_contiguous() or tensor.device.type != "cpu":
        raise ValueError("a flat page must be a contiguous CPU tensor")
    return tensor.data_ptr(), tensor.numel() * tensor.element_size()
