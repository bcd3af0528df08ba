"""ArenaAllocator: first-fit allocation of aligned ranges of a session arena, shared by threads.

A client that retrieves and persists from several threads at once (LMCache's engine thread, its
event loop, a put worker) needs disjoint arena ranges for each chunk in flight. Ranges are
aligned (4 KiB by default: the daemon then reads straight into them with O_DIRECT) and freed
ranges coalesce with their neighbours. `allocate` waits (up to a timeout) while the arena is full.
"""

from __future__ import annotations

import bisect
import threading
from typing import List, Optional, Tuple

ALIGNMENT = 4096


class ArenaAllocator:
    """Free list of [offset, offset + size) ranges of an arena of `capacity` bytes.

    Thread-safe. A range is returned to the allocator with free(offset); freeing a range that was
    never allocated raises ValueError.
    """

    def __init__(self, capacity: int, alignment: int = ALIGNMENT) -> None:
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment must be a power of two, got {alignment}")
        self.alignment = alignment
        self.capacity = capacity - capacity % alignment
        self._free: List[Tuple[int, int]] = [(0, self.capacity)] if self.capacity else []  # sorted by offset
        self._used: dict[int, int] = {}  # offset -> size
        self._cond = threading.Condition()
        self.closed = False  # set by close(): nothing more is handed out

    def rounded(self, size: int) -> int:
        """`size` rounded up to the alignment (what an allocation of `size` bytes takes)."""
        return max(self.alignment, (size + self.alignment - 1) // self.alignment * self.alignment)

    def try_allocate(self, size: int) -> Optional[int]:
        """The offset of a free aligned range of at least `size` bytes, or None when none is free."""
        need = self.rounded(size)
        with self._cond:
            return None if self.closed else self._take(need)

    def allocate(self, size: int, timeout: Optional[float] = None) -> Optional[int]:
        """Like try_allocate, but waits up to `timeout` seconds (None: forever) for ranges to be freed.

        Returns None at once for a size that can never fit, and on timeout.
        """
        need = self.rounded(size)
        if need > self.capacity:
            return None
        with self._cond:
            offset = None if self.closed else self._take(need)
            if offset is None and not self.closed:
                self._cond.wait_for(lambda: self.closed or self._fits(need), timeout)
                offset = None if self.closed else self._take(need)
            return offset

    def close(self) -> None:
        """Refuses every allocation from now on and wakes those waiting (the arena is gone)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def free(self, offset: int) -> None:
        with self._cond:
            size = self._used.pop(offset, None)
            if size is None:
                raise ValueError(f"arena offset {offset} is not allocated")
            i = bisect.bisect_left(self._free, (offset, 0))
            start, end = offset, offset + size
            if i < len(self._free) and self._free[i][0] == end:  # merge with the next range
                end += self._free.pop(i)[1]
            if i > 0 and sum(self._free[i - 1]) == start:  # merge with the previous range
                start = self._free[i - 1][0]
                self._free[i - 1] = (start, end - start)
            else:
                self._free.insert(i, (start, end - start))
            self._cond.notify_all()

    @property
    def used_bytes(self) -> int:
        with self._cond:
            return sum(self._used.values())

    def _fits(self, need: int) -> bool:
        return any(size >= need for _, size in self._free)

    def _take(self, need: int) -> Optional[int]:
        for i, (offset, size) in enumerate(self._free):
            if size >= need:
                if size == need:
                    del self._free[i]
                else:
                    self._free[i] = (offset + need, size - need)
                self._used[offset] = need
                return offset
        return None
