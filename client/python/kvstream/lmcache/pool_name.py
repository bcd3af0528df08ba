"""A shared-memory name of its own for each worker's LMCache CPU pool, so zero copy holds at any TP.

The plugin's zero copy needs LMCache's CPU pool in POSIX shared memory (`extra_config.shm_name`).
Every TP worker reads the same LMCache config, and LMCache unlinks a segment of that name before
creating its own, so with one name the ranks take it from each other and all but the last fall
back to copying. `own_pool_name` (called by KVStreamConnectorV1 in each worker process, before
LMCache builds its engine) gives this process `<shm_name or kvstream_lmcache>_<host>_<pid>`, so
that every worker's pool is its own and goes to the daemon in place; the host name tells apart
containers that share /dev/shm (`--ipc=host`), whose pids may be equal. LMCache unlinks the
segment when the engine closes; one left by a process of this host name that died (its pid is
gone, the file is ours) is removed here, so crashed workers do not leave pools in /dev/shm.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import stat
from typing import Any, Optional

from ..plugin_settings import Settings

logger = logging.getLogger(__name__)

DEFAULT_BASE = "kvstream_lmcache"
SHM_DIR = "/dev/shm"


def own_pool_name(config: Any, pid: Optional[int] = None) -> Optional[str]:
    """Sets `config.extra_config["shm_name"]` to this process's own name when the config loads the
    kvstream plugin with zero copy on; returns the name, or None when it left the config alone."""
    if "kvstream" not in (getattr(config, "storage_plugins", None) or []):
        return None
    extra = getattr(config, "extra_config", None)
    if extra is None:
        extra = config.extra_config = {}
    if not Settings(extra).zero_copy:
        return None
    base = str(extra.get("shm_name") or DEFAULT_BASE).lstrip("/")
    pid = os.getpid() if pid is None else pid
    suffix = f"_{host_tag()}_{pid}"
    if base.endswith(suffix):  # named by an earlier call in this process
        return base
    remove_stale(base)
    name = base + suffix
    extra["shm_name"] = name
    logger.info("kvstream: LMCache's CPU pool in this worker is /dev/shm/%s (zero copy)", name)
    return name


def host_tag() -> str:
    """This host's (container's) name, as letters, digits and '-' only, at most 32 of them."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32] or "host"


def remove_stale(base: str, shm_dir: str = SHM_DIR) -> int:
    """Unlinks `<base>_<host>_<pid>` segments of this host name and user whose process is gone;
    returns how many."""
    pattern = re.compile(rf"{re.escape(base)}_{re.escape(host_tag())}_(\d+)")
    removed = 0
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return 0
    for entry in names:
        match = pattern.fullmatch(entry)
        if match is None or _alive(int(match.group(1))):
            continue
        path = os.path.join(shm_dir, entry)
        try:
            st = os.lstat(path)
            if st.st_uid != os.getuid() or not stat.S_ISREG(st.st_mode):
                continue
            os.unlink(path)
            removed += 1
            logger.info("kvstream: removed %s, the pool of a worker that is gone", path)
        except OSError:
            continue
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, another user's
    return True
