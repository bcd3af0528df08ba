"""The shared-memory file behind an engine's host memory pool, when it is one.

An engine's CPU pool may live in POSIX shared memory (LMCache's `shm_name`, vLLM's
SharedOffloadRegion in /dev/shm) or be anonymous memory no other process can map. A pool in a
/dev/shm file or a memfd can be handed to kvstreamd as a client region (Client.add_region), so the
daemon reads chunks straight into it (by O_DIRECT, or through its bounce buffers when a device
pinned it) and copies stored chunks out of it: no byte of a chunk passes through Python.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

logger = logging.getLogger(__name__)


def gpu_present() -> bool:
    """Whether a GPU is there, so that an engine pins its host pool for it (cudaHostRegister): such
    a pool goes to the daemon as device-pinned memory (Client.add_region), whose pages it never swaps."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, or no driver: nothing pins the pool
        return False


class SharedRegion:
    """The file behind a pool: its descriptor (read-write), its size, and where the pool's base
    address lies in it. `find` returns None for a pool that is not shared memory."""

    def __init__(self, fd: int, size: int, base: int, base_offset: int, length: int, path: str) -> None:
        self.fd, self.size, self.base, self.base_offset, self.length, self.path = fd, size, base, base_offset, length, path

    def offset_of(self, address: int, nbytes: int) -> Optional[int]:
        """The file offset of [address, address + nbytes), or None when it is not inside the pool."""
        if self.base <= address and address + nbytes <= self.base + self.length:
            return address - self.base + self.base_offset
        return None

    @classmethod
    def find(cls, ptr: int, size: int) -> Optional["SharedRegion"]:
        """Looks up the mapping holding [ptr, ptr + size) in /proc/self/maps; a /dev/shm file (POSIX
        shm) or a memfd is opened read-write. None for anonymous memory (a pinned or lazy pool), a
        pool split over several mappings, or a file this process cannot open."""
        try:
            with open("/proc/self/maps") as maps:
                lines = maps.readlines()
        except OSError:
            return None
        for line in lines:
            fields = line.split(maxsplit=5)
            if len(fields) < 6:
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if not (start <= ptr < end):
                continue
            path = fields[5].strip()
            if ptr + size > end or "w" not in fields[1] or "s" not in fields[1]:
                return None  # split over several mappings, or not a shared writable mapping
            if path.startswith("/dev/shm/"):
                opener = path
            elif path.startswith("/memfd:"):
                opener = f"/proc/self/map_files/{fields[0]}"
            else:
                return None
            try:
                fd = os.open(opener.removesuffix(" (deleted)"), os.O_RDWR | os.O_CLOEXEC)
            except OSError as e:
                logger.info("kvstream: the pool (%s) cannot be opened for the daemon (%s); copying", path, e)
                return None
            st = os.fstat(fd)
            if st.st_ino != int(fields[4]):
                # The name now belongs to another file (another process created a pool under the same
                # name and unlinked ours): handing that one over would land reads in its memory.
                os.close(fd)
                logger.warning("kvstream: %s is no longer this process's pool (another process "
                               "reused its name?); copying through the arena", path)
                return None
            return cls(fd, st.st_size, ptr, ptr - start + int(fields[2], 16), size, path)
        return None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
