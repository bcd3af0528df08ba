"""Lookups: the plugin's one way of asking kvstreamd which keys it holds.

Prefix lookups (LMCache's contains), payload sizes for gets and put dedupe all go through
`lookup`, which remembers the payload size of every key found present (an LRU of
SIZE_CACHE_ENTRIES names), so a get right after LMCache's lookup needs no second lookup.
A failed call reads as a miss, never an exception; DaemonLink.call's rule says whether it drops
the session.

A prefix lookup is kvstream.transfer.lookup with the load-or-recompute verdict: chunks past its
cut are not contained. LMCache asks again when it retrieves what a lookup found (its block
mapping), so chunks a verdict told LMCache to load stay promised for PROMISE_SECONDS: the later
lookup does not cut them again (unless a tier holding one stalled).
"""

from __future__ import annotations

import collections
import threading
import time
from typing import List, Optional, Sequence, Tuple

from lmcache.utils import CacheEngineKey

from .. import transfer
from ..types import LookupEntry
from ..daemon_link import DaemonLink, Session, call
from ..verdict import Verdict

SIZE_CACHE_ENTRIES = 1 << 16
PROMISE_SECONDS = 60.0  # how long a chunk a verdict told LMCache to load stays promised


class Lookups:
    """Daemon lookups and the cache of payload sizes they found. Thread-safe."""

    def __init__(self, link: DaemonLink, verdict: Optional[Verdict] = None, chunk_tokens: int = 0,
                 model: str = "", keys_per_chunk: int = 1, clock=time.monotonic) -> None:
        self._link = link
        self._verdict = verdict
        self._chunk_tokens = chunk_tokens  # tokens per LMCache chunk
        self._model = model
        self._keys_per_chunk = max(1, keys_per_chunk)  # layerwise: one key per layer of a chunk
        self._clock = clock
        self._lock = threading.Lock()
        self._sizes: "collections.OrderedDict[str, int]" = collections.OrderedDict()  # payload sizes seen in lookups
        self._promised: "collections.OrderedDict[str, float]" = collections.OrderedDict()  # name -> until
        self.recomputed_chunks = 0  # hit chunks the verdict left to recomputing

    def prefix_hits(self, keys: Sequence[CacheEngineKey], lock_seconds: float = 0) -> int:
        """Leading keys to load, from ONE daemon lookup (0 while the daemon is unavailable): those
        present, up to the verdict's cut. With `lock_seconds`, the keys present are also locked
        against eviction (LMCache's pin); those past the cut are released."""
        session = self._link.session() if keys else None
        if session is None:
            return 0
        names = [k.to_string() for k in keys]
        per = self._keys_per_chunk
        now = self._clock()
        with self._lock:
            promised = 0
            while promised < len(names) and self._promised.get(names[promised], 0.0) > now:
                promised += 1
        found = transfer.lookup(self._link, session, names, chunk_of=[i // per for i in range(len(names))],
                                lock_seconds=lock_seconds, verdict=self._verdict, chunk_tokens=self._chunk_tokens,
                                model=self._model, promised=promised // per, what=f"lookup of {len(names)} keys")
        if found is None:
            return 0
        hits = found.hits * per
        with self._lock:
            for name, entry in zip(names, found.entries):
                if entry.present:
                    self._remember_size(name, entry.size)
            self.recomputed_chunks += found.recomputed
            if self._verdict is not None and self._verdict.enabled:
                for name in names[:hits]:
                    self._promised[name] = now + PROMISE_SECONDS
                    self._promised.move_to_end(name)
                while len(self._promised) > SIZE_CACHE_ENTRIES:
                    self._promised.popitem(last=False)
        return hits

    def lookup(self, session: Session, names: List[str],
               lock_seconds: float = 0) -> Optional[Tuple[List[LookupEntry], int]]:
        """One daemon lookup (entries, prefix hits), remembering the sizes of the keys present.
        None when the call failed (a miss, never an exception)."""
        # daemon_link.call: DaemonLink.call's rule for any link (the tests hand Lookups a stand-in).
        found = call(self._link, session, f"lookup of {len(names)} keys",
                     lambda: session.client.lookup(names, lock_seconds=lock_seconds))
        if found is None:
            return None
        entries, prefix = found
        with self._lock:
            for name, entry in zip(names, entries):
                if entry.present:
                    self._remember_size(name, entry.size)
        return entries, prefix

    def payload_sizes(self, session: Session, names: List[str]) -> List[Optional[int]]:
        """Payload sizes of the keys: from recent lookups, else from one lookup now (None: absent)."""
        with self._lock:
            sizes: List[Optional[int]] = [self._sizes.get(n) for n in names]
        unknown = [i for i, s in enumerate(sizes) if s is None]
        if unknown:
            found = self.lookup(session, [names[i] for i in unknown])
            if found is None:
                return [None] * len(names)
            for i, entry in zip(unknown, found[0]):
                if entry.present:
                    sizes[i] = entry.size
        return sizes

    def forget(self, name: str) -> None:
        """Drops the remembered size of `name` (it was evicted)."""
        with self._lock:
            self._sizes.pop(name, None)

    def _remember_size(self, name: str, size: int) -> None:
        """REQUIRES: the lock."""
        self._sizes[name] = size
        self._sizes.move_to_end(name)
        if len(self._sizes) > SIZE_CACHE_ENTRIES:
            self._sizes.popitem(last=False)
