"""KVStreamL2AdapterConfig: the adapter_params of the kvstream L2 adapter (kvstream.lmcache.l2_adapter),
checked when LMCache builds the adapter. LMCache's plugin factory finds this class in the adapter's
module by name (class_name + "Config"): l2_adapter imports it.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase

from .. import recompute
from ..client import CONNECT_TIMEOUT_S
from ..plugin_settings import DEFAULT_SOCKET, MAX_PIN_LEASE


class KVStreamL2AdapterConfig(L2AdapterConfigBase):
    """adapter_params of the kvstream L2 adapter (all optional)."""

    # param -> (type, default); numbers must be positive unless noted in _NON_NEGATIVE.
    PARAMS: Dict[str, Tuple[type, Any]] = {
        "socket": (str, DEFAULT_SOCKET),  # kvstreamd's socket ("socket_path" is accepted too)
        "arena_bytes": (int, 256 << 20),  # the session arena (copy path), <= the daemon's sessions.max_arena
        "io_timeout": (float, 60.0),  # seconds for one retrieve / persist
        "lookup_timeout": (float, 5.0),  # seconds for a lookup / unlock / evict
        "connect_timeout": (float, CONNECT_TIMEOUT_S),
        "retry_interval": (float, 1.0),  # seconds between reattach attempts while the daemon is down
        "lock_seconds": (float, 60.0),  # lease of a lookup-and-lock (kvstreamd caps it at 3600)
        "zero_copy": (bool, True),  # hand the L1 pool to the daemon when it is shared memory
        "key_prefix": (str, "lmcache"),
        "max_capacity_bytes": (int, 0),  # > 0 enables LMCache's global L2 eviction on this adapter
        "chunk_tokens": (int, 256),  # tokens per chunk: the server's --chunk-size
    }
    _NON_NEGATIVE = {"max_capacity_bytes"}
    # Load or recompute (kvstream.recompute.settings): param -> default, for help().
    RECOMPUTE_PARAMS: Dict[str, Any] = {"verdict": "on", "recompute_tflops": recompute.DEFAULT_TFLOPS,
                                        "recompute_tokens_per_s": 0.0, "model_shape": {}}

    def __init__(self, **values: Any) -> None:
        for name, (_, default) in self.PARAMS.items():
            setattr(self, name, values.get(name, default))
        self.recompute: recompute.RecomputeSettings = values.get("recompute") or recompute.RecomputeSettings()

    @classmethod
    def from_dict(cls, d: dict) -> "KVStreamL2AdapterConfig":
        d = dict(d)
        d.pop("type", None)
        if "socket_path" in d:
            d.setdefault("socket", d.pop("socket_path"))
        unknown = sorted(set(d) - set(cls.PARAMS) - set(cls.RECOMPUTE_PARAMS))
        if unknown:
            raise ValueError(f"unknown kvstream adapter_params {unknown}; "
                             f"known: {sorted(list(cls.PARAMS) + list(cls.RECOMPUTE_PARAMS))}")
        values: Dict[str, Any] = {"recompute": recompute.settings(d, where="kvstream adapter_params")}
        for name, (kind, default) in cls.PARAMS.items():
            raw = d.get(name, default)
            if kind is bool:
                if not isinstance(raw, bool):
                    raise ValueError(f"kvstream adapter_params {name} must be true or false, got {raw!r}")
                value: Any = raw
            else:
                try:
                    value = kind(raw)
                except (TypeError, ValueError):
                    raise ValueError(f"kvstream adapter_params {name}: cannot read {raw!r} as {kind.__name__}") from None
                if kind is str and not value:
                    raise ValueError(f"kvstream adapter_params {name} must be a non-empty string")
                if kind is not str and (value < 0 if name in cls._NON_NEGATIVE else value <= 0):
                    raise ValueError(f"kvstream adapter_params {name} must be positive, got {raw!r}")
            values[name] = value
        if values["lock_seconds"] > MAX_PIN_LEASE:
            raise ValueError(f"kvstream adapter_params lock_seconds must be at most {MAX_PIN_LEASE:g}")
        return cls(**values)

    @classmethod
    def help(cls) -> str:
        return ("kvstream L2 adapter (type plugin, module_path kvstream.lmcache.l2_adapter, class_name "
                "KVStreamL2Adapter); adapter_params, all optional:\n"
                + "\n".join(f"- {n} ({k.__name__}, default {d!r})" for n, (k, d) in cls.PARAMS.items())
                + "\n" + "\n".join(f"- {n} (default {d!r})" for n, d in cls.RECOMPUTE_PARAMS.items()))
