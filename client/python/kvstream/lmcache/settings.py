"""The LMCache plugin's settings (kvstream.plugin_settings: the kvstream.* keys of LMCache's
extra_config) and the extra_config entries that load the plugin.
"""

from __future__ import annotations

from typing import Any, Dict

from ..plugin_settings import DEFAULT_SOCKET, Settings

# Where LMCache finds the plugin (storage_plugin.<name>.module_path / class_name); the tests load
# the plugin through these, so a rename that forgets them fails there.
PLUGIN_MODULE = "kvstream.lmcache"
PLUGIN_CLASS = "KVStreamBackend"

__all__ = ["DEFAULT_SOCKET", "PLUGIN_CLASS", "PLUGIN_MODULE", "Settings", "extra_config"]


def extra_config(socket_path: str, **settings: Any) -> Dict[str, Any]:
    """LMCache extra_config entries that load this plugin as storage plugin "kvstream", with the
    daemon's socket and any other Settings by attribute name (e.g. arena_bytes=1 << 30)."""
    by_attr = {attr: key for key, (attr, _, _) in Settings.KEYS.items()}
    by_attr.update({attr: key for key, attr in Settings.RECOMPUTE_KEYS.items()})
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
