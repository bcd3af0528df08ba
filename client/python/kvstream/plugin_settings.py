"""Settings of an engine plugin (LMCache's storage plugin, SGLang's HiCache backend): the kvstream.*
keys of the engine's extra configuration, their types and defaults.

Every key is optional. A value that cannot be read as its type, or a number that is not positive,
is a ValueError naming the key (the engine then fails to load the plugin, with that message).

Load or recompute (kvstream.verdict, kvstream.recompute): `kvstream.verdict` (on | off, default
on), `kvstream.recompute_tflops` (effective TFLOPS per GPU, default 400), `kvstream.recompute_tokens_per_s`
(the prefill rate measured with no cache, 0: not calibrated), `kvstream.model_shape` (a mapping, or its
JSON, of recompute.SHAPE_FIELDS over the shape found in the engine's config); parsed into `recompute`.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import recompute
from .client import CONNECT_TIMEOUT_S

DEFAULT_SOCKET = "/run/kvstream/kvstreamd.sock"
MAX_PIN_LEASE = 3600.0  # kvstreamd's longest lock (LookupRequest.lock_seconds)


def flag(raw: Any) -> bool:
    """A boolean setting: a bool, 0/1, or one of true/false/yes/no/on/off (any case)."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and raw.strip().lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return raw.strip().lower() in ("true", "yes", "on", "1")
    raise ValueError(f"not a boolean: {raw!r}")


class Settings:
    """The plugin's keys in the engine's extra configuration (all optional)."""

    KEYS = {
        "kvstream.socket_path": ("socket_path", str, DEFAULT_SOCKET),
        "kvstream.arena_bytes": ("arena_bytes", int, 1 << 30),  # per session (TP rank)
        "kvstream.io_timeout": ("io_timeout", float, 60.0),  # seconds for one retrieve / persist
        "kvstream.lookup_timeout": ("lookup_timeout", float, 5.0),  # seconds for a lookup / evict
        "kvstream.connect_timeout": ("connect_timeout", float, CONNECT_TIMEOUT_S),
        "kvstream.retry_interval": ("retry_interval", float, 1.0),  # between reconnect attempts
        "kvstream.pin_lease": ("pin_lease", float, 60.0),  # seconds a pin (lookup lock) lasts at most
        # Hand the engine's CPU pool to the daemon when it is shared memory (LMCache's shm_name,
        # SGLang's "allocator": "shm"): reads land in it and persists copy out of it, no copy in Python.
        "kvstream.zero_copy": ("zero_copy", flag, True),
    }
    # Load or recompute: key -> attribute (the values are read by recompute.settings into `recompute`).
    RECOMPUTE_KEYS = {f"kvstream.{k}": k for k in ("verdict", "recompute_tflops", "recompute_tokens_per_s",
                                                   "model_shape")}

    def __init__(self, extra_config: Optional[Dict[str, Any]]) -> None:
        extra = extra_config or {}
        for key, (attr, cast, default) in self.KEYS.items():
            raw = extra.get(key, default)
            try:
                value = cast(raw)
            except (TypeError, ValueError):
                kind = "a boolean" if cast is flag else cast.__name__
                raise ValueError(f"extra_config {key}: cannot read {raw!r} as {kind}") from None
            if cast in (int, float) and value <= 0:
                raise ValueError(f"extra_config {key} must be positive, got {raw!r}")
            setattr(self, attr, value)
        self.recompute = recompute.settings(extra, prefix="kvstream.", where="extra_config")
        if self.pin_lease > MAX_PIN_LEASE:
            raise ValueError(f"extra_config kvstream.pin_lease must be at most {MAX_PIN_LEASE:g} seconds "
                             f"(kvstreamd's longest lock), got {self.pin_lease!r}")
