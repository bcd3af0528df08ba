"""One failure classification in every integration: a call the daemon refuses fails that call and
keeps the session; the daemon dying inside a retrieve drops the session, and a daemon started
again serves the engine again. Both cases (conftest.check_a_refused_call,
check_a_kill_inside_a_retrieve) run here through the LMCache storage plugin (in-process mode),
the L2 adapter of LMCache's multi-process server and vLLM's own tiering; tests/sglang runs them
through the SGLang HiCache backend. Each engine's imports are its own: an engine that is not
installed skips only its cases."""

from __future__ import annotations

import importlib
import itertools
import time
from types import ModuleType
from typing import Any, List

import pytest
from conftest import (MAX_LOOKUP_KEYS, READS_WAIT_FOR_A_HUNG_TIER, SESSIONS_WITH_A_LOOKUP_LIMIT, Daemon,
                      check_a_kill_inside_a_retrieve, check_a_refused_call, daemon_on_faultfs)

_requests = itertools.count()


def support(module: str, engine: str) -> ModuleType:
    """A support module of this folder, once `engine` imports (else the case is skipped)."""
    pytest.importorskip(engine)
    return importlib.import_module(module)


class LMCachePlugin:
    """LMCache's StorageManager with the kvstream storage plugin loaded (its private CPU pool:
    gets are copied through the session arena)."""

    chunks = MAX_LOOKUP_KEYS

    def __init__(self, daemon: Daemon) -> None:
        self.lm = support("lmcache_support", "lmcache")
        self.sm = self.lm.make_storage_manager(daemon.socket)
        self.backend = self.lm.backend_of(self.sm)
        self.keys = [self.lm.key(7000 + i) for i in range(self.chunks)]

    def store(self) -> List[str]:
        self.tensors = self.lm.put(self.sm, self.keys, seed=70)
        return [k.to_string() for k in self.keys]

    def hits(self, more: bool = False) -> int:
        return self.backend.batched_contains(self.keys + ([self.lm.key(7999)] if more else []))

    def read(self) -> List[bool]:
        objs = self.backend.batched_get_blocking(self.keys)
        landed = [obj is not None and obj.tensor.equal(t) for obj, t in zip(objs, self.tensors)]
        for obj in objs:
            if obj is not None:
                obj.ref_count_down()
        return landed

    def sessions(self) -> tuple:
        return (self.backend.link.session(),)

    def connected(self) -> bool:
        return self.backend.link.connected

    def close(self) -> None:
        self.sm.close()


class LMCacheMPAdapter:
    """The kvstream L2 adapter of LMCache's MP server, built by LMCache's factory on a shared-memory
    L1 pool (zero copy), driven as LMCache's controllers drive it."""

    chunks = MAX_LOOKUP_KEYS

    def __init__(self, daemon: Daemon) -> None:
        self.lm = support("lmcache_support", "lmcache")
        self.l1 = self.lm.make_l1("shm")
        self.adapter = self.lm.create_adapter(daemon.socket, self.l1)
        self.keys = self.lm.keys_for(self.chunks, start=700)

    def store(self) -> List[str]:
        from kvstream.lmcache.l2_adapter import object_key_name

        self.objs = self.lm.allocate(self.l1, self.chunks, seed=70)
        assert self.lm.store(self.adapter, self.keys, self.objs).is_successful()
        return [object_key_name(k) for k in self.keys]

    def hits(self, more: bool = False) -> int:
        return len(self.lm.lookup(self.adapter, self.keys + (self.lm.keys_for(1, start=799) if more else [])))

    def read(self) -> List[bool]:
        fresh = self.lm.allocate(self.l1, self.chunks, seed=None)
        try:
            loaded = self.lm.load(self.adapter, self.keys, fresh)
            return [i in loaded and bytes(got.byte_array) == bytes(want.byte_array)
                    for i, (got, want) in enumerate(zip(fresh, self.objs))]
        finally:
            self.l1.free(fresh)

    def sessions(self) -> tuple:
        return (self.adapter.link.session(),)

    def connected(self) -> bool:
        return self.adapter.link.connected

    def close(self) -> None:
        self.adapter.close()
        self.l1.close()


class VLLMTier:
    """vLLM's own tiering manager with KVStreamTier as its secondary tier, the tier called as
    vLLM's scheduler calls it. Its lookups go over a session-less link of their own: sessions()
    names both links, the data link first."""

    chunks = MAX_LOOKUP_KEYS
    FIRST_ROW = 8  # loads land in primary rows the stores did not use

    def __init__(self, daemon: Daemon) -> None:
        self.v = support("vllm_support", "vllm.v1.kv_offload.tiering.spec")
        self.daemon = daemon
        self.engine = self.v.Engine(daemon.socket, retry_interval=0.05)
        self.tier = self.engine.tier
        self.keys, self.payloads = self.v.keys_and_payloads(self.chunks, 70)
        self.unknown = self.v.keys_and_payloads(1, 71)[0]

    def store(self) -> List[str]:
        self.engine.store("writer", self.keys, self.payloads)
        self.v.wait_written(self.daemon, self.tier, self.keys)
        namespace = self.tier.status()["namespace"]
        return [f"{namespace}/{k.hex()}" for k in self.keys]

    def hits(self, more: bool = False) -> int:
        """A new request's lookups, step after step until none is RETRY (vLLM asks the daemon on
        its lookup thread, one lookup per request)."""
        v = self.v
        ctx = v.ReqContext(req_id=f"asker{next(_requests)}")
        keys = self.keys + (self.unknown if more else [])
        deadline = time.monotonic() + 20
        while v.LookupResult.RETRY in (results := [self.tier.lookup(k, ctx) for k in keys]):
            assert time.monotonic() < deadline, "lookups stayed RETRY"
            self.tier.on_schedule_end(v.ScheduleEndContext((), ()))
            time.sleep(0.005)
        self.tier.on_request_finished(ctx)
        return results.count(v.LookupResult.HIT)

    def read(self) -> List[bool]:
        rows = range(self.FIRST_ROW, self.FIRST_ROW + self.chunks)
        self.engine.rows[rows.start:rows.stop] = 0
        job = self.v.submit(self.tier, self.keys, list(rows), True)
        result = self.v.finished(self.tier, [job])[job]
        loaded = set(self.keys) if result.success else set(result.successful_keys or ())
        return [k in loaded and bytes(self.engine.rows[row]) == p for k, row, p in zip(self.keys, rows, self.payloads)]

    def sessions(self) -> tuple:
        # No public accessor: the tier's two DaemonLinks.
        return (self.tier._link.session(), self.tier._lookup_link.session())

    def connected(self) -> bool:
        return self.tier.status()["connected"]

    def close(self) -> None:
        self.engine.close()


ENGINES = {"lmcache_plugin": LMCachePlugin, "lmcache_mp_adapter": LMCacheMPAdapter, "vllm_tier": VLLMTier}


@pytest.fixture(params=list(ENGINES))
def engine_kind(request) -> Any:
    return ENGINES[request.param]


def drive(kind: Any, daemon: Daemon, case: Any, *args: Any) -> None:
    driver = kind(daemon)
    try:
        case(driver, *args)
    finally:
        driver.close()


def test_a_refused_call_is_a_miss_and_keeps_the_session(state_dir, engine_kind):
    daemon = Daemon(state_dir, sessions=SESSIONS_WITH_A_LOOKUP_LIMIT)
    daemon.start()
    try:
        drive(engine_kind, daemon, check_a_refused_call)
    finally:
        daemon.stop()


def test_a_daemon_killed_inside_a_retrieve_misses_drops_the_session_then_serves_again(state_dir, engine_kind):
    with daemon_on_faultfs(state_dir, READS_WAIT_FOR_A_HUNG_TIER) as (daemon, rules):
        drive(engine_kind, daemon, check_a_kill_inside_a_retrieve, daemon, rules)
