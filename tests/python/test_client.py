"""kvstream.Client against a real kvstreamd."""

from __future__ import annotations

import os
import threading
import time

import pytest

import kvstream
from kvstream import Code, KVStreamError


def fill(client: kvstream.Client, offset: int, n: int, seed: int) -> bytes:
    data = bytes((seed * 131 + i * 7) % 251 for i in range(n))
    client.arena[offset: offset + n] = data
    return data


def test_persist_then_retrieve_round_trip(daemon):
    with kvstream.Client.attach(daemon.socket, model="m", rank=0, arena_bytes=16 << 20) as c:
        assert c.arena_size >= 16 << 20 and c.session_id > 0
        sizes = [1 << 20, 300_000, 4096]
        written = [fill(c, i * (2 << 20), n, i) for i, n in enumerate(sizes)]
        results = c.persist([(f"m@k{i}", i * (2 << 20), n) for i, n in enumerate(sizes)])
        assert all(r.ok and r.tier_mask == 0b11 for r in results)

        c.arena[:] = bytes(c.arena_size)
        landed = []
        chunks = [(f"m@k{i}", 8 << 20 | i * (2 << 20), 2 << 20) for i in range(3)] + [("m@absent", 0, 4096)]
        results, step = c.retrieve(chunks, on_chunk=lambda r: landed.append(r.index))
        assert sorted(landed) == [0, 1, 2, 3]
        assert [r.code for r in results] == [Code.OK, Code.OK, Code.OK, Code.NOT_FOUND]
        for i, n in enumerate(sizes):
            assert results[i].size == n
            off = 8 << 20 | i * (2 << 20)
            assert bytes(c.arena[off: off + n]) == written[i]
        assert step.chunks == 4 and step.hits == 3 and step.misses == 1


@pytest.mark.parametrize("fsync", ["none", "chunk"])
def test_a_persist_is_reported_written_not_synced_under_fsync_none_and_durable_under_chunk(state_dir, fsync):
    """The daemon says, per chunk, which replicas it synced: none under fsync none (written: a power
    cut may lose them), every one under fsync chunk (durable); stats name the policy."""
    from conftest import Daemon

    daemon = Daemon(state_dir, extra_yaml=f"policies: {{fsync: {fsync}}}\n")
    daemon.start()
    try:
        with kvstream.Client.attach(daemon.socket, arena_bytes=4 << 20) as c:
            fill(c, 0, 300_000, 5)
            (result,) = c.persist([("synced?", 0, 300_000)])
            assert result.ok and result.tier_mask == 0b11
            assert result.synced_mask == (0b11 if fsync == "chunk" else 0)
            assert result.durable == (fsync == "chunk")
            assert c.stats().fsync == fsync
    finally:
        daemon.stop()


def test_a_chunk_is_found_and_read_back_as_soon_as_its_persist_is_staged(daemon):
    """persist_async returns once the chunks are STAGED (the clients report a store done then): from
    that moment a lookup finds them and a retrieve returns their bytes, written to a tier or not."""
    with kvstream.Client.attach(daemon.socket, arena_bytes=4 << 20) as c:
        for i in range(20):
            written = fill(c, 0, 256 << 10, i)
            persisted = c.persist_async([(f"staged{i}", 0, 256 << 10)])
            entries, _ = c.lookup([f"staged{i}"], lock_seconds=60)
            assert entries[0].present and entries[0].size == 256 << 10 and entries[0].locked, (i, entries[0])
            results, _ = c.retrieve([(f"staged{i}", 1 << 20, 256 << 10)])
            assert results[0].code == Code.OK and bytes(c.arena[1 << 20:(1 << 20) + (256 << 10)]) == written, i
            persisted.result()
            assert c.unlock([f"staged{i}"]) == 1  # the lookup's lock, held by the chunk on its tiers now


def test_a_4_gib_arena_attaches_within_the_default_deadline_and_again_right_after_close(state_dir):
    """The daemon answers an attach before the arena is faulted in (faulting in takes ~0.75-3 s per
    GiB, past the 2 s deadline), and a closed session's budget is free by the time close() returns."""
    from conftest import Daemon

    daemon = Daemon(state_dir, sessions="{max_arena: 4GiB, arena_budget: 4GiB}")  # room for one
    daemon.start()
    try:
        for i in range(3):
            with kvstream.Client.attach(daemon.socket, arena_bytes=4 << 30) as c:
                assert c.arena_size == 4 << 30
                end = (4 << 30) - (1 << 20)
                written = fill(c, end, 1 << 20, i)
                c.persist([(f"far{i}", end, 1 << 20)])
                c.arena[end:end + (1 << 20)] = bytes(1 << 20)
                results, _ = c.retrieve([(f"far{i}", end, 1 << 20)])
                assert results[0].code == Code.OK and bytes(c.arena[end:end + (1 << 20)]) == written
    finally:
        daemon.stop()


def test_client_region_round_trip_and_truncation(daemon):
    """Shared memory of the client's own (an unsealed /dev/shm file, as SGLang's host pool) as a
    region: persist from it, retrieve into it; truncated under a retrieve, only its chunks fail."""
    import mmap

    size = 8 << 20
    path = f"/dev/shm/kvs-py-region-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.unlink(path)
    try:
        os.ftruncate(fd, size)
        pool = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        with kvstream.Client.attach(daemon.socket, arena_bytes=1 << 20) as c:
            region = c.add_region(fd, size)
            assert region >= 1
            data = bytes((i * 13) % 251 for i in range(1 << 20))
            pool[0: 1 << 20] = data
            assert c.persist([kvstream.Chunk("r@0", 0, 1 << 20, region)])[0].ok
            results, step = c.retrieve([("r@0", 4 << 20, 1 << 20, region)])
            assert results[0].ok and pool[4 << 20: 5 << 20] == data
            # The client takes its memory away and grows it back: the daemon survives, nothing is lost.
            os.ftruncate(fd, 0)
            results, _ = c.retrieve([("r@0", 0, 1 << 20, region)])
            assert results[0].code == Code.FAILED_PRECONDITION, results[0].message
            with pytest.raises(KVStreamError) as e:
                c.persist([("r@1", 0, 4096, region)])
            assert e.value.code == Code.FAILED_PRECONDITION
            os.ftruncate(fd, size)
            results, _ = c.retrieve([("r@0", 0, 1 << 20, region)])
            assert results[0].ok and pool[0: 1 << 20] == data
            entries, _ = c.lookup(["r@0"])
            assert entries[0].tier_mask == 0b11
            with pytest.raises(KVStreamError) as e:
                c.retrieve([("r@0", 0, 1 << 20, region + 1)])
            assert e.value.code == Code.NOT_FOUND
            c.remove_region(region)
            with pytest.raises(KVStreamError) as e:
                c.remove_region(region)
            assert e.value.code == Code.NOT_FOUND
        pool.close()
    finally:
        os.close(fd)


def test_a_device_pinned_region_is_read_through_the_daemons_bounce_buffers(daemon):
    """add_region(device_pinned=True): the daemon never replaces its pages (a GPU would keep
    reading the old ones); reads land in its bounce buffers and are copied in, intact."""
    import mmap

    size = 4 << 20
    fd = os.memfd_create("kvs-py-pinned", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        pool = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        with kvstream.Client.attach(daemon.socket, arena_bytes=1 << 20) as c:
            region = c.add_region(fd, size, device_pinned=True)
            data = bytes((i * 7) % 253 for i in range(1 << 20))
            pool[0: 1 << 20] = data
            assert c.persist([kvstream.Chunk("pin@0", 0, 1 << 20, region)])[0].ok
            before = sum(t.bounce_reads for t in c.stats().tiers)
            results, _ = c.retrieve([("pin@0", 2 << 20, 1 << 20, region)])
            assert results[0].ok and pool[2 << 20: 3 << 20] == data
            assert sum(t.bounce_reads for t in c.stats().tiers) > before
            c.remove_region(region)
        pool.close()
    finally:
        os.close(fd)


def test_lookup_prefix_and_sizes(daemon):
    with kvstream.Client.attach(daemon.socket, arena_bytes=4 << 20) as c:
        fill(c, 0, 8192, 1)
        c.persist([("p@0", 0, 8192), ("p@1", 0, 100), ("p@3", 0, 5000)])
        entries, prefix = c.lookup(["p@0", "p@1", "p@2", "p@3"])
        assert prefix == 2
        assert [e.present for e in entries] == [True, True, False, True]
        assert [e.size for e in entries] == [8192, 100, 0, 5000]


def test_lookup_asks_for_the_load_estimate_and_returns_it_per_entry(daemon):
    """estimate_load goes out in the request; each entry carries load_seconds (a daemon without the
    estimate answers 0.0, one with it a number of seconds, +inf or NaN: any float)."""
    with kvstream.Client.attach(daemon.socket, arena_bytes=4 << 20) as c:
        fill(c, 0, 8192, 3)
        c.persist([("est@0", 0, 8192), ("est@1", 0, 8192)])
        sent = []
        lookup = c._stub.Lookup

        def recording(request, **kwargs):
            sent.append(request.estimate_load)
            return lookup(request, **kwargs)

        c._stub.Lookup = recording
        entries, prefix = c.lookup(["est@0", "est@1", "est@2"], estimate_load=True)
        assert prefix == 2 and [e.present for e in entries] == [True, True, False]
        assert all(isinstance(e.load_seconds, float) for e in entries)
        assert c.lookup(["est@0"])[0][0].load_seconds == 0.0  # not asked for: none
        assert sent == [True, False]


def test_lookup_locks_present_keys_and_unlock_releases_them(daemon):
    with kvstream.Client.attach(daemon.socket, arena_bytes=4 << 20) as c:
        fill(c, 0, 8192, 2)
        c.persist([("lk@0", 0, 8192)])
        entries, prefix = c.lookup(["lk@0", "lk@1"], lock_seconds=30)
        assert prefix == 1
        assert [e.locked for e in entries] == [True, False]  # only keys present are locked
        assert not c.lookup(["lk@0"])[0][0].locked  # a plain lookup locks nothing
        c.lookup(["lk@0"], lock_seconds=5)
        assert c.unlock(["lk@0", "lk@1"]) == 1
        assert c.unlock(["lk@0"]) == 1  # locks count: the second is released too
        assert c.unlock(["lk@0"]) == 0
        for bad in (-1, 3601, float("nan")):
            with pytest.raises(KVStreamError) as e:
                c.lookup(["lk@0"], lock_seconds=bad)
            assert e.value.code == Code.INVALID_ARGUMENT
            assert "lock_seconds" in str(e.value)


def test_bad_requests_raise_clear_errors(daemon):
    with kvstream.Client.attach(daemon.socket, arena_bytes=1 << 20) as c:
        with pytest.raises(KVStreamError) as e:
            c.retrieve([("k", c.arena_size - 10, 4096)])
        assert e.value.code == Code.OUT_OF_RANGE
        with pytest.raises(KVStreamError) as e:
            c.persist([("", 0, 10)])
        assert e.value.code == Code.INVALID_ARGUMENT
        with pytest.raises(KVStreamError) as e:
            kvstream.Client.attach(daemon.socket, arena_bytes=1 << 40)
        assert e.value.code == Code.INVALID_ARGUMENT
        # The session survives refused requests.
        fill(c, 0, 4096, 3)
        assert c.persist([("k", 0, 4096)])[0].ok


def test_control_calls_without_session(daemon):
    with kvstream.Client.connect(daemon.socket) as c:
        assert c.health().serving
        policies = c.set_policies(routing="static:0.5")
        assert policies.routing == "static:0.5"
        assert c.stats().policies.routing == "static:0.5"
        assert [t.name for t in c.stats().tiers] == ["fast", "slow"]
        with pytest.raises(KVStreamError) as e:
            c.retrieve([("k", 0, 1)])
        assert e.value.code == Code.FAILED_PRECONDITION
    with kvstream.Client.attach(daemon.socket, arena_bytes=1 << 20) as c:
        fill(c, 0, 4096, 4)
        c.persist([("e@1", 0, 4096)])
        assert c.evict(key="e@1").replicas == 2
        assert not c.lookup(["e@1"])[0][0].present


def test_no_daemon_is_unavailable_quickly(state_dir):
    start = time.monotonic()
    with pytest.raises(kvstream.Unavailable):
        kvstream.Client.connect(str(state_dir / "absent.sock"), timeout=0.5)
    with pytest.raises(kvstream.Unavailable):
        kvstream.Client.attach(str(state_dir / "absent.sock"), timeout=0.5)
    assert time.monotonic() - start < 5


def test_session_ends_when_the_daemon_stops(daemon):
    c = kvstream.Client.attach(daemon.socket, arena_bytes=1 << 20)
    assert c.session_alive
    daemon.stop()
    deadline = time.monotonic() + 5
    while c.session_alive and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not c.session_alive
    with pytest.raises(KVStreamError):
        c.lookup(["k"])
    c.close()


def test_concurrent_retrieves_share_one_session(daemon):
    with kvstream.Client.attach(daemon.socket, arena_bytes=8 << 20) as c:
        fill(c, 0, 256 << 10, 5)
        c.persist([(f"c@{i}", 0, 256 << 10) for i in range(8)])
        errors = []

        def reader(t: int) -> None:
            try:
                results, _ = c.retrieve([(f"c@{i}", (t + 1) << 20, 256 << 10) for i in range(8)])
                assert all(r.ok for r in results)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []


def test_arena_is_a_shared_mapping_and_sessions_leave_no_descriptors(daemon):
    def session_cycle():
        with kvstream.Client.attach(daemon.socket, arena_bytes=1 << 20) as c:
            assert c.arena.nbytes == c.arena_size
            c.arena[0:4] = b"abcd"
            c.persist([("shared", 0, 4)])  # the daemon copies what this process wrote
            c.arena[0:4] = b"\0\0\0\0"
            c.retrieve([("shared", 0, 4096)])
            assert bytes(c.arena[0:4]) == b"abcd"

    session_cycle()  # gRPC's process-wide descriptors exist from here on
    fds = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        session_cycle()
    assert len(os.listdir("/proc/self/fd")) <= fds + 1  # none per session (the memfd is closed once mapped)


def test_an_arena_descriptor_without_size_seals_is_refused():
    from kvstream._session import Arena

    fd = os.memfd_create("unsealed", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 1 << 20)
    with pytest.raises(KVStreamError) as e:
        Arena(fd)  # it could shrink under the mapping (SIGBUS)
    assert e.value.code == Code.FAILED_PRECONDITION


def test_a_dead_daemons_socket_is_unavailable_at_once(state_dir):
    import socket

    path = str(state_dir / "stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)  # the file stays, nobody listens (a daemon killed with SIGKILL leaves this)
    s.close()
    start = time.monotonic()
    with pytest.raises(kvstream.Unavailable, match="no kvstreamd listens"):
        kvstream.Client.attach(path, timeout=10)
    assert time.monotonic() - start < 5  # at once, not after the whole connect timeout


def test_the_gpu_pinned_region_check_runs_without_a_gpu(tmp_path):
    """tools/harness/gpu/gpu_check_pinned.py (run by tools/gpu-check.sh on a GPU machine) keeps
    working: the same persist, retrieve through the bounce buffers and byte comparison, without the GPU."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    from conftest import KVSTREAMD, REPO

    script = REPO / "tools" / "harness" / "gpu" / "gpu_check_pinned.py"
    done = subprocess.run([sys.executable, str(script), str(Path(KVSTREAMD).parent), "--no-gpu"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpu_check_pinned: OK" in done.stdout
    assert list(tmp_path.iterdir()) == []  # its tier directories are removed


def test_the_client_identifies_itself_so_isolation_uid_serves_it(state_dir):
    """Under sessions.isolation uid only callers that proved their uid on the data socket touch
    keys: the Python client does so on connect; a bare gRPC stub without the token is refused."""
    import grpc

    from kvstream._proto import pb, pb_grpc

    from conftest import Daemon

    d = Daemon(state_dir, sessions="{max_arena: 64MiB, isolation: uid, max_lookup_keys: 8}")
    d.start()
    try:
        with kvstream.Client.attach(d.socket, arena_bytes=4 << 20) as c:
            data = fill(c, 0, 8192, 5)
            assert c.persist([("iso@0", 0, 8192)])[0].ok
            c.arena[:8192] = bytes(8192)
            results, _ = c.retrieve([("iso@0", 0, 8192)])
            assert results[0].code == Code.OK and bytes(c.arena[:8192]) == data
            assert c.lookup(["iso@0"])[1] == 1
            with pytest.raises(KVStreamError) as e:  # more keys than sessions.max_lookup_keys
                c.lookup([f"iso@{i}" for i in range(9)])
            assert e.value.code == Code.INVALID_ARGUMENT
            assert c.set_policies(routing="static:0.5").routing == "static:0.5"  # root administers
        channel = grpc.insecure_channel("unix:" + d.socket)
        try:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.KVStreamStub(channel).Lookup(pb.LookupRequest(keys=[b"iso@0"]), timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        finally:
            channel.close()
    finally:
        assert d.stop() == 0
