"""Lookups: the plugin's one way of asking kvstreamd which keys it holds.

Prefix lookups (LMCache's contains), payload sizes for gets and put dedupe all go through
`lookup`, which remembers the payload size of every key found present (an LRU of
SIZE_CACHE_ENTRIES names), so a get right after LMCache's lookup needs no second lookup.
A failed call reads as a miss, never an exception; DaemonLink.call's rule says whether it drops
the session.
"""

from __future__ import annotations

import collections
import threading
from typing import List, Optional, Sequence, Tuple

from lmcache.utils import CacheEngineKey

from ..types import LookupEntry
from ..daemon_link import DaemonLink, Session, call

SIZE_CACHE_ENTRIES = 1 << 16


class Lookups:
    """Daemon lookups and the cache of payload sizes they found. Thread-safe."""

    def __init__(self, link: DaemonLink) -> None:
        self._link = link
        self._lock = threading.Lock()
        self._sizes: "collections.OrderedDict[str, int]" = collections.OrderedDict()  # payload sizes seen in lookups

    def prefix_hits(self, keys: Sequence[CacheEngineKey], lock_seconds: float = 0) -> int:
        """Leading keys present, from ONE daemon lookup (0 while the daemon is unavailable). With
        `lock_seconds`, the keys present are also locked against eviction (LMCache's pin)."""
        session = self._link.session() if keys else None
        if session is None:
            return 0
        found = self.lookup(session, [k.to_string() for k in keys], lock_seconds)
        return found[1] if found is not None else 0

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
