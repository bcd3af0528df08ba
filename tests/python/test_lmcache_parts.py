"""The LMCache plugin's parts on their own (no daemon): how LMCache finds the plugin, and the
lookup helper's size cache and failure handling."""

from __future__ import annotations

import importlib

import pytest

pytest.importorskip("lmcache", reason="the LMCache plugin tests need LMCache (tests/run.sh installs it)")

from kvstream.lmcache import KVStreamBackend, extra_config  # noqa: E402
from kvstream.lmcache import lookups as lookups_module  # noqa: E402
from kvstream.lmcache.lookups import Lookups  # noqa: E402
from kvstream.types import LookupEntry  # noqa: E402


def test_extra_config_names_the_backend_class_at_both_module_paths():
    extra = extra_config("/s")
    class_name = extra["storage_plugin.kvstream.class_name"]
    for module_path in (extra["storage_plugin.kvstream.module_path"], "kvstream.lmcache.backend"):
        assert getattr(importlib.import_module(module_path), class_name) is KVStreamBackend


class FakeClient:
    """Answers lookups from `stored` (name -> payload size), or raises `error`."""

    def __init__(self, stored: dict) -> None:
        self.stored = stored
        self.calls: list[list[str]] = []
        self.error: Exception | None = None

    def lookup(self, names, lock_seconds=0):
        self.calls.append(list(names))
        if self.error is not None:
            raise self.error
        entries = [LookupEntry(n in self.stored, self.stored.get(n, 0), 1 if n in self.stored else 0) for n in names]
        prefix = next((i for i, e in enumerate(entries) if not e.present), len(entries))
        return entries, prefix


class FakeSession:
    def __init__(self, client: FakeClient) -> None:
        self.client = client


class FakeLink:
    def __init__(self, session: FakeSession) -> None:
        self.current = session
        self.failed: list[Exception] = []

    def session(self):
        return self.current

    def fail(self, session, error):
        self.failed.append(error)


class Key:
    def __init__(self, name: str) -> None:
        self.name = name

    def to_string(self) -> str:
        return self.name


def test_lookups_remember_sizes_so_a_get_needs_no_second_lookup():
    client = FakeClient({"a": 10, "b": 20})
    session = FakeSession(client)
    lookups = Lookups(FakeLink(session))
    assert lookups.prefix_hits([Key("a"), Key("b"), Key("c")]) == 2
    assert lookups.payload_sizes(session, ["a", "b"]) == [10, 20]
    assert len(client.calls) == 1  # the sizes came from the prefix lookup
    assert lookups.payload_sizes(session, ["a", "c"]) == [10, None]
    assert client.calls[-1] == ["c"]  # only the unknown key is looked up
    lookups.forget("a")
    assert lookups.payload_sizes(session, ["a"]) == [10]
    assert client.calls[-1] == ["a"]


def test_the_size_cache_keeps_the_most_recent_entries(monkeypatch):
    monkeypatch.setattr(lookups_module, "SIZE_CACHE_ENTRIES", 2)
    client = FakeClient({"a": 1, "b": 2, "c": 3})
    session = FakeSession(client)
    lookups = Lookups(FakeLink(session))
    lookups.lookup(session, ["a", "b"])
    lookups.lookup(session, ["c"])  # evicts "a", the least recently seen
    calls = len(client.calls)
    assert lookups.payload_sizes(session, ["b", "c"]) == [2, 3] and len(client.calls) == calls
    assert lookups.payload_sizes(session, ["a"]) == [1] and client.calls[-1] == ["a"]


def test_a_failed_lookup_is_a_miss_and_drops_the_session():
    client = FakeClient({"a": 10})
    session = FakeSession(client)
    link = FakeLink(session)
    lookups = Lookups(link)
    client.error = ConnectionError("gone")
    assert lookups.lookup(session, ["a"]) is None
    assert lookups.prefix_hits([Key("a")]) == 0
    assert lookups.payload_sizes(session, ["a"]) == [None]
    assert [str(e) for e in link.failed] == ["gone"] * 3
    link.current = None
    assert lookups.prefix_hits([Key("a")]) == 0 and len(client.calls) == 3  # no session: no call
    assert lookups.prefix_hits([]) == 0
