"""The shared-memory file behind an LMCache CPU memory pool, when it is one.

LMCache allocates its pinned CPU pool from POSIX shared memory when asked to (the in-process
engine's `extra_config: {shm_name: ...}`, the MP server's `--shm-name`); otherwise it is anonymous
memory no other process can map. A shared pool goes to kvstreamd as a client region
(kvstream.shared_region), so the daemon reads chunks straight into LMCache's MemoryObjs (by
O_DIRECT, or through its bounce buffers when a device pinned the pool: pinned_by_a_device).
"""

from __future__ import annotations

from ..shared_region import SharedRegion as SharedPool
from ..shared_region import gpu_present

__all__ = ["SharedPool", "pinned_by_a_device"]


def pinned_by_a_device() -> bool:
    """Whether LMCache pins its pools for an accelerator (cudaHostRegister or its platform's
    equivalent), which it does whenever one is present: the pool then goes to the daemon as
    device-pinned memory, whose pages it must never replace (Client.add_region)."""
    try:
        from lmcache.v1.platform import torch_dev

        return bool(torch_dev.is_available())
    except Exception:  # noqa: BLE001 - an LMCache without its platform layer
        return gpu_present()
