"""kvstream.vllm_tier.KVStreamTier inside vLLM's own TieringOffloadingManager (vLLM 0.33 on CPU: a
real SharedOffloadRegion in /dev/shm, the tier built by vLLM's factory from `type` + `module_path`)
against a real kvstreamd: store then load byte-identical with no byte copied in Python and one
retrieve per step, miss, retry until the daemon has answered, partial failure, a hung tier, a
stopped daemon, a daemon restart, drain and shutdown, the copy path, bad settings."""

from __future__ import annotations

import logging
import math
import os
import signal
import time

import numpy as np
import pytest

pytest.importorskip("vllm.v1.kv_offload.tiering.spec")

import kvstream  # noqa: E402
from conftest import Daemon, daemon_on_faultfs, wait_stopped  # noqa: E402
from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext  # noqa: E402
from vllm_support import ROW, Engine, finished, keys_and_payloads, submit, wait_written  # noqa: E402


@pytest.fixture
def engine(daemon):
    e = Engine(daemon.socket)
    yield e
    e.close()


def test_store_then_load_byte_identical_with_no_copy_in_python(engine, daemon):
    keys, payloads = keys_and_payloads(6, 1)
    trace = engine.round_trip(daemon, keys, payloads)
    assert engine.tier.status()["stored_bytes"] == 6 * ROW
    # vLLM's sequence for a chunk found in a secondary tier: RETRY while the daemon is asked (on the
    # lookup thread), HIT_PENDING while it is promoted into the primary tier, then HIT.
    assert trace[0] == ["RETRY"] * 6 and trace[-1] == ["HIT"] * 6, trace
    assert "HIT_PENDING" in trace[-2], trace
    status = engine.tier.status()
    assert status["zero_copy"] and status["copied_bytes"] == 0, status
    assert status["loaded_bytes"] == 6 * ROW and status["retrieves"] == 1, status
    # The daemon holds them under the tier's namespace, one chunk per key.
    with kvstream.Client.connect(daemon.socket) as c:
        entries, _ = c.lookup([f"{status['namespace']}/{k.hex()}" for k in keys])
        assert all(e.present and e.size == ROW for e in entries)


def test_every_load_of_a_step_is_one_retrieve(engine, daemon):
    keys, payloads = keys_and_payloads(8, 2)
    engine.store("writer", keys, payloads)
    tier = engine.tier
    wait_written(daemon, tier, keys)
    before = tier.status()["retrieves"]
    # Three requests' loads in one step: one retrieve of all eight chunks.
    ids = [submit(tier, keys[0:3], [8, 9, 10], True), submit(tier, keys[3:5], [11, 12], True),
           submit(tier, keys[5:8], [13, 14, 15], True)]
    engine.rows[8:16] = 0
    results = finished(tier, ids)
    assert all(r.success for r in results.values()), results
    assert tier.status()["retrieves"] == before + 1
    assert [bytes(engine.rows[8 + i]) for i in range(8)] == payloads


def test_a_steps_loads_past_the_per_call_limit_take_as_few_retrieves_as_it_needs(state_dir):
    # A daemon that takes at most 3 chunks per retrieve (sessions.max_chunks_per_call), which it
    # tells the tier's session at attach.
    daemon = Daemon(state_dir, sessions="{max_arena: 512MiB, max_chunks_per_call: 3}")
    daemon.start()
    engine = Engine(daemon.socket)
    try:
        keys, payloads = keys_and_payloads(8, 14)
        engine.store("writer", keys, payloads)
        tier = engine.tier
        wait_written(daemon, tier, keys)
        before = tier.status()["retrieves"]
        ids = [submit(tier, keys[0:5], [8, 9, 10, 11, 12], True), submit(tier, keys[5:8], [13, 14, 15], True)]
        engine.rows[8:16] = 0
        results = finished(tier, ids)
        assert all(r.success for r in results.values()), results
        assert tier.status()["retrieves"] == before + 3  # 3 + 3 + 2
        assert [bytes(engine.rows[8 + i]) for i in range(8)] == payloads
    finally:
        engine.close()
        daemon.stop()


def test_a_store_skips_chunks_the_daemon_already_holds(engine, daemon):
    keys, payloads = keys_and_payloads(3, 12)
    engine.store("writer", keys, payloads)
    wait_written(daemon, engine.tier, keys)
    stored = engine.tier.status()["stored_bytes"]
    new_keys, new_payloads = keys_and_payloads(1, 13)
    for i, p in enumerate(payloads + new_payloads):
        engine.rows[8 + i] = np.frombuffer(p, dtype=np.uint8)
    job = submit(engine.tier, keys + new_keys, [8, 9, 10, 11], False)
    assert finished(engine.tier, [job])[job].success
    assert engine.tier.status()["stored_bytes"] == stored + ROW  # only the new one was written


def test_an_unknown_chunk_is_a_miss_after_one_retry(engine):
    keys, _ = keys_and_payloads(2, 3)
    trace, loaded = engine.load("reader", keys)
    assert trace == [["RETRY", "RETRY"], ["MISS", "MISS"]], trace
    assert loaded == {}


def test_a_lookup_is_retry_until_the_daemon_answers(engine):
    keys, payloads = keys_and_payloads(1, 4)
    ctx = ReqContext(req_id="early")
    tier = engine.tier
    # Stored through the tier but not yet sent (the step has not ended): the tier cannot know yet.
    engine.rows[0] = np.frombuffer(payloads[0], dtype=np.uint8)
    job = submit(tier, keys, [0], False)
    assert tier.lookup(keys[0], ctx) is LookupResult.RETRY
    assert tier.lookup(keys[0], ctx) is LookupResult.RETRY  # still: nothing blocks the scheduler
    assert finished(tier, [job])[job].success
    deadline = time.monotonic() + 10
    while tier.lookup(keys[0], ctx) is LookupResult.RETRY:
        tier.on_schedule_end(ScheduleEndContext((), ()))
        assert time.monotonic() < deadline
        time.sleep(0.005)
    # Its first probe went out with the store's step; whatever it saw, a new request sees the chunk.
    tier.on_request_finished(ctx)
    ctx2 = ReqContext(req_id="late")
    tier.lookup(keys[0], ctx2)
    tier.on_schedule_end(ScheduleEndContext((), ()))
    while (r := tier.lookup(keys[0], ctx2)) is LookupResult.RETRY:
        tier.on_schedule_end(ScheduleEndContext((), ()))  # a step: the answers come in at the next
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert r is LookupResult.HIT


def test_a_partial_failure_names_the_loaded_keys_and_the_rest_turn_misses(engine, daemon):
    keys, payloads = keys_and_payloads(3, 5)
    engine.store("writer", keys, payloads)
    tier = engine.tier
    wait_written(daemon, tier, keys)
    ctx = ReqContext(req_id="looker")
    for k in keys:  # cache a HIT verdict for each
        tier.lookup(k, ctx)
    tier.on_schedule_end(ScheduleEndContext((), ()))
    deadline = time.monotonic() + 10
    while any(tier.lookup(k, ctx) is LookupResult.RETRY for k in keys):
        tier.on_schedule_end(ScheduleEndContext((), ()))
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert all(tier.lookup(k, ctx) is LookupResult.HIT for k in keys)
    with kvstream.Client.connect(daemon.socket) as c:
        c.unlock([f"{tier.status()['namespace']}/{keys[1].hex()}"])  # the lookup's lease
        assert c.evict(key=f"{tier.status()['namespace']}/{keys[1].hex()}").replicas >= 1
    engine.rows[4:7] = 0
    job = submit(tier, keys, [4, 5, 6], True)
    result = finished(tier, [job])[job]
    assert not result.success and set(result.successful_keys) == {keys[0], keys[2]}, result
    assert bytes(engine.rows[4]) == payloads[0] and bytes(engine.rows[6]) == payloads[2]
    # The failed key is a MISS from now on (vLLM would otherwise promote it again and again).
    assert tier.lookup(keys[1], ctx) is LookupResult.MISS
    assert tier.lookup(keys[0], ctx) is LookupResult.HIT
    tier.on_request_finished(ctx)


def test_a_stopped_daemon_holds_its_jobs_until_it_resumes_and_lookups_miss_meanwhile(daemon):
    """A job is never reported while the daemon may still write into its rows (vLLM would reuse
    them): a stopped daemon's load stays pending and lands once it resumes; lookups, on their own
    connection, turn into misses after lookup_timeout instead of RETRY forever."""
    engine = Engine(daemon.socket, lookup_timeout=1)
    try:
        keys, payloads = keys_and_payloads(2, 6)
        engine.store("writer", keys, payloads)
        tier = engine.tier
        wait_written(daemon, tier, keys)
        engine.rows[8:10] = 0
        daemon.process.send_signal(signal.SIGSTOP)
        wait_stopped(daemon.process.pid)
        try:
            job = submit(tier, keys, [8, 9], True)
            tier.on_schedule_end(ScheduleEndContext((), ()))
            time.sleep(2)
            assert list(tier.get_finished_jobs()) == [] and tier.has_pending_work()
            ctx = ReqContext(req_id="blind")
            other = keys_and_payloads(1, 7)[0][0]
            deadline = time.monotonic() + 20
            while (r := tier.lookup(other, ctx)) is LookupResult.RETRY:
                tier.on_schedule_end(ScheduleEndContext((), ()))
                assert time.monotonic() < deadline, "a lookup of a stopped daemon stayed RETRY"
                time.sleep(0.01)
            assert r is LookupResult.MISS
            tier.on_request_finished(ctx)
        finally:
            daemon.process.send_signal(signal.SIGCONT)
        result = finished(tier, [job])[job]
        assert result.success, result
        assert [bytes(engine.rows[8 + i]) for i in range(2)] == payloads
    finally:
        engine.close()


def test_a_daemon_restart_fails_the_batch_in_flight_then_serves_again(daemon):
    engine = Engine(daemon.socket, retry_interval=0.1)
    try:
        keys, payloads = keys_and_payloads(4, 8)
        engine.store("writer", keys, payloads)
        tier = engine.tier
        wait_written(daemon, tier, keys)  # they must survive the restart
        daemon.restart()
        deadline = time.monotonic() + 20
        ok = None
        while ok is None or not all(r.success for r in ok.values()):
            engine.rows[8:12] = 0
            ok = finished(tier, [submit(tier, keys, [8, 9, 10, 11], True)])
            assert time.monotonic() < deadline, "loads never served again after the restart"
            time.sleep(0.1)
        assert [bytes(engine.rows[8 + i]) for i in range(4)] == payloads
        assert tier.status()["connected"]
    finally:
        engine.close()


def test_shutdown_drains_and_releases_the_primary_region(daemon):
    engine = Engine(daemon.socket)
    keys, payloads = keys_and_payloads(4, 9)
    for i, p in enumerate(payloads):
        engine.rows[i] = np.frombuffer(p, dtype=np.uint8)
    tier = engine.tier
    ids = [submit(tier, keys, [0, 1, 2, 3], False)]
    tier.drain_jobs()  # sends the step's store and waits for it
    results = {r.job_id: r for r in tier.get_finished_jobs()}
    assert set(results) == set(ids) and all(r.success for r in results.values())
    assert not tier.has_pending_work()
    shm = engine.shm
    assert os.path.exists(shm)
    engine.close()
    assert not os.path.exists(shm), "vLLM kept the primary region mapped (a buffer export left open)"


def test_the_copy_path_when_zero_copy_is_off(daemon):
    engine = Engine(daemon.socket, zero_copy=False, arena_bytes=2 * ROW)
    try:
        engine.round_trip(daemon, *keys_and_payloads(5, 10))
        status = engine.tier.status()
        assert not status["zero_copy"] and status["copied_bytes"] == 10 * ROW, status
    finally:
        engine.close()


def test_a_region_a_gpu_pinned_is_read_through_the_daemons_bounce_buffers(daemon):
    """With a GPU, vLLM's workers pin the primary region: it goes over as device-pinned (the
    daemon then never swaps its pages), and chunks still land byte-identical with no copy in Python."""
    engine = Engine(daemon.socket, device_pinned=True)
    try:
        engine.round_trip(daemon, *keys_and_payloads(3, 14))
        assert engine.tier.status()["copied_bytes"] == 0
        with kvstream.Client.connect(daemon.socket) as c:
            assert sum(t.bounce_reads for t in c.stats().tiers) >= 3  # every block through a bounce buffer
    finally:
        engine.close()


@pytest.mark.parametrize("setting, value, message", [
    ("lookup_timeout", 0, "lookup_timeout must be a positive number"),
    ("device_pinned", "yes", "device_pinned must be true or false"),
    ("lease_seconds", 7200, "lease_seconds must be at most 3600"),
    ("zero_copy", "yes", "zero_copy must be true or false"),
    ("arena_bytes", 4096, "smaller than one chunk"),
    ("verdict", "sometimes", "verdict"),
    ("recompute_tflops", 0, "recompute_tflops"),
    ("model_shape", {"layers": 1.5}, "model_shape"),
])
def test_bad_settings_are_clear_errors(daemon, setting, value, message):
    extra = {setting: value} if setting != "arena_bytes" else {"zero_copy": False, setting: value}
    with pytest.raises(ValueError, match=message):
        Engine(daemon.socket, **extra)


@pytest.fixture
def hanging_daemon(state_dir):
    with daemon_on_faultfs(state_dir) as (daemon, rules):
        yield daemon, rules


def test_a_hung_tier_fails_only_what_no_other_tier_holds(hanging_daemon):
    daemon, rules = hanging_daemon
    engine = Engine(daemon.socket)
    try:
        keys, payloads = keys_and_payloads(2, 11)
        engine.store("writer", keys, payloads)
        tier = engine.tier
        wait_written(daemon, tier, keys)
        names = [f"{tier.status()['namespace']}/{k.hex()}" for k in keys]
        with kvstream.Client.connect(daemon.socket) as c:  # keys[0] now lies on the hanging tier alone
            assert c.evict(key=names[0], tier="fast").replicas == 1
            entries, _ = c.lookup(names)
            assert [e.tier_mask for e in entries] == [0b10, 0b11], entries
        rules.write_text("read * hang\n")
        time.sleep(1.5)  # kvfaultfs rereads its rules
        engine.rows[8:10] = 0
        start = time.monotonic()
        job = submit(tier, keys, [8, 9], True)
        result = finished(tier, [job], timeout=50)[job]
        took = time.monotonic() - start
        # keys[1] came from the other tier; keys[0] failed by the daemon's reads.give_up.
        assert not result.success and list(result.successful_keys) == [keys[1]], result
        assert bytes(engine.rows[9]) == payloads[1]
        assert took < 30, took
        tier.drain_jobs()
    finally:
        rules.write_text("")
        engine.close()


# -- load or recompute, and a daemon whose staging is full ------------------------------------------

def test_lookups_answer_miss_past_the_point_where_loading_stops_paying(daemon):
    """Six chunks of 16 tokens, 0.1 s to recompute each: the first three load in a millisecond,
    the others take 10 s each: vLLM sees HIT for three, MISS for the rest, and loads the three."""
    from conftest import estimating

    engine = Engine(daemon.socket, recompute_tokens_per_s=160)
    try:
        keys, payloads = keys_and_payloads(6, 20)
        engine.store("writer", keys, payloads)
        wait_written(daemon, engine.tier, keys)
        engine.forget_primary()
        chunk = {f"{engine.tier.status()['namespace']}/{k.hex()}": i for i, k in enumerate(keys)}
        asked = estimating(engine.tier._lookup_link.session(), lambda name: 0.001 if chunk[name] < 3 else 10.0)
        trace, loaded = engine.load("reader", keys)
        assert trace[-1] == ["HIT"] * 3 + ["MISS"] * 3, trace
        assert [loaded.get(k) for k in keys[:3]] == payloads[:3] and len(loaded) == 3
        assert asked.asked and all(estimate for _, estimate in asked.asked)
        assert engine.tier.status()["recomputed_keys"] == 3
        with kvstream.Client.connect(daemon.socket) as c:  # the lease of the three past the cut is released
            assert c.unlock(list(chunk)[3:]) == 0
    finally:
        engine.close()


def test_lookups_and_stores_place_keys_by_the_positions_the_scheduler_recorded(engine):
    keys, _ = keys_and_payloads(3, 21)
    ctx = ReqContext(req_id="positions")
    for i, k in enumerate(keys):
        ctx.set_offload_key_position(k, (10 + i + 1) * 16)  # chunks 10..12 of the request (16 tokens each)
    assert engine.tier._chunks(keys, ctx) == ([0, 1, 2], 160)
    assert engine.tier._chunks(keys, ReqContext(req_id="unknown")) == ([0, 1, 2], 0)
    # A store's chunks go out by the same positions: their depth in the request.
    from kvstream.vllm.jobs import batch_of
    from vllm.v1.kv_offload.tiering.base import TransferJob

    job = TransferJob(job_id=1, keys=keys[::-1], chunk_ids=np.array([0, 1, 2]), is_promotion=False, req_context=ctx)
    assert batch_of([job], 16).depths == [12, 11, 10]
    assert batch_of([job]).depths == [0, 1, 2]  # no tokens per chunk known: the job's order


def test_the_verdict_off_answers_every_hit_without_asking_for_an_estimate(daemon):
    from conftest import estimating

    engine = Engine(daemon.socket, verdict="off", recompute_tokens_per_s=160)
    try:
        keys, payloads = keys_and_payloads(2, 22)
        engine.store("writer", keys, payloads)
        wait_written(daemon, engine.tier, keys)
        engine.forget_primary()
        asked = estimating(engine.tier._lookup_link.session(), lambda name: math.inf)
        trace, loaded = engine.load("reader", keys)
        assert trace[-1] == ["HIT", "HIT"] and len(loaded) == 2
        assert asked.asked and not any(estimate for _, estimate in asked.asked)
    finally:
        engine.close()


def test_stores_the_daemon_drops_are_back_pressure_not_failed_keys(engine, daemon, caplog):
    """Two requests' stores in one step, staging room for two chunks: each request's chunk 0 goes
    out first and is stored; both chunks 1 are dropped: their jobs fail (vLLM's back-pressure),
    they count as dropped_keys, not failed keys, and nothing is logged."""
    from conftest import staging_full

    keys, payloads = keys_and_payloads(4, 23)
    tier = engine.tier
    for i, p in enumerate(payloads):
        engine.rows[i] = np.frombuffer(p, dtype=np.uint8)
    full = staging_full(tier._link.session(), room=2)
    with caplog.at_level(logging.INFO, logger="kvstream"):
        ids = [submit(tier, keys[0:2], [0, 1], False), submit(tier, keys[2:4], [2, 3], False)]
        results = finished(tier, ids)
    names = [f"{tier.status()['namespace']}/{k.hex()}" for k in keys]
    assert full.calls == [[names[0], names[2], names[1], names[3]]]
    assert [results[i].success for i in ids] == [False, False]
    status = tier.status()
    assert status["dropped_keys"] == 2 and status["failed_keys:store"] == 0, status
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    with kvstream.Client.connect(daemon.socket) as c:
        assert [e.present for e in c.lookup(names)[0]] == [True, False, True, False]
