"""The plugin's settings: the kvstream.* keys of LMCache's extra_config, their types and defaults.

Every key is optional. A value that cannot be read as its type, or a number that is not positive,
is a ValueError naming the key (LMCache then fails to load the plugin, with that message).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from ..client import CONNECT_TIMEOUT_S

DEFAULT_SOCKET = "/run/kvstream/kvstreamd.sock"
# Where LMCache finds the plugin (storage_plugin.<name>.module_path / class_name); the tests load
# the plugin through these, so a rename that forgets them fails there.
PLUGIN_MODULE = "kvstream.lmcache"
PLUGIN_CLASS = "KVStreamBackend"


class Settings:
    """The plugin's keys in LMCache's extra_config (all optional)."""

    KEYS = {
        "kvstream.socket_path": ("socket_path", str, DEFAULT_SOCKET),
        "kvstream.arena_bytes": ("arena_bytes", int, 1 << 30),  # per session (TP rank)
        "kvstream.io_timeout": ("io_timeout", float, 60.0),  # seconds for one retrieve / persist
        "kvstream.lookup_timeout": ("lookup_timeout", float, 5.0),  # seconds for a lookup / evict
        "kvstream.connect_timeout": ("connect_timeout", float, CONNECT_TIMEOUT_S),
        "kvstream.retry_interval": ("retry_interval", float, 1.0),  # between reconnect attempts
    }

    def __init__(self, extra_config: Optional[Dict[str, Any]]) -> None:
        extra = extra_config or {}
        for key, (attr, cast, default) in self.KEYS.items():
            raw = extra.get(key, default)
            try:
                value = cast(raw)
            except (TypeError, ValueError):
                raise ValueError(f"extra_config {key}: cannot read {raw!r} as {cast.__name__}") from None
            if cast is not str and value <= 0:
                raise ValueError(f"extra_config {key} must be positive, got {raw!r}")
            setattr(self, attr, value)


def extra_config(socket_path: str, **settings: Any) -> Dict[str, Any]:
    """LMCache extra_config entries that load this plugin as storage plugin "kvstream", with the
    daemon's socket and any other Settings by attribute name (e.g. arena_bytes=1 << 30)."""
    by_attr = {attr: key for key, (attr, _, _) in Settings.KEYS.items()}
    unknown = sorted(set(settings) - set(by_attr))
    if unknown:
        raise ValueError(f"unknown kvstream settings {unknown}; known: {sorted(by_attr)}")
    extra: Dict[str, Any] = {
        "storage_plugin.kvstream.module_path": PLUGIN_MODULE,
        "storage_plugin.kvstream.class_name": PLUGIN_CLASS,
        "kvstream.socket_path": socket_path,
    }
    extra.update({by_attr[attr]: value for attr, value in settings.items()})
    return extra
