"""kvstream.sglang: SGLang's HiCache storage backend over kvstreamd (needs sglang and torch, which
the base package does not).

SGLang loads it through its `dynamic` backend, one instance per rank:

    --enable-hierarchical-cache --hicache-storage-backend dynamic \\
    --hicache-storage-backend-extra-config '{"backend_name": "kvstream", "module_path": "kvstream.sglang",
        "class_name": "KVStreamHiCache", "interface_v1": 1, "allocator": "shm",
        "kvstream.socket_path": "/run/kvstream/kvstreamd.sock"}'

`interface_v1` selects the page-level zero-copy calls; `"allocator": "shm"` puts SGLang's host pool
in shared memory, which the backend hands to the daemon (without it pages are copied through the
session's arena). `extra_config()` builds that JSON.
"""

from ..engine_versions import check as _check_engine

_check_engine("sglang")

from .backend import BACKEND_CLASS, BACKEND_MODULE, KVStreamHiCache, extra_config, namespace  # noqa: E402

__all__ = ["BACKEND_CLASS", "BACKEND_MODULE", "KVStreamHiCache", "extra_config", "namespace"]
