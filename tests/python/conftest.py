"""Fixtures: a real kvstreamd (the built binary) on a temporary socket and two tier directories;
one whose second tier is kvfaultfs (reads that hang on demand); and the two failure cases every
engine integration must answer alike (check_a_refused_call, check_a_kill_inside_a_retrieve)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List, Sequence, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]
KVSTREAMD = os.environ.get("KVSTREAMD", str(REPO / "build" / "daemon" / "kvstreamd"))
KVFAULTFS = os.environ.get("KVFAULTFS", str(Path(KVSTREAMD).parents[1] / "tools" / "kvfaultfs"))


class Daemon:
    """kvstreamd with its state in `root` (kept across restart)."""

    def __init__(self, root: Path, extra_yaml: str = "", sessions: str = "{max_arena: 512MiB}") -> None:
        self.root = root
        self.socket = str(root / "kvstreamd.sock")
        self.config = root / "kvstreamd.yaml"
        self.log = root / "kvstreamd.log"
        self.config.write_text(
            f'socket: {{path: {self.socket}, mode: "0600"}}\n'
            f"sessions: {sessions}\n"
            "block_size: 256KiB\n"
            "logging: {level: warn}\n"
            f"{extra_yaml}"
            "tiers:\n"
            f"  - {{name: fast, path: {root / 't0'}, capacity: 1GiB}}\n"
            f"  - {{name: slow, path: {root / 't1'}, capacity: 1GiB}}\n"
        )
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        if not os.access(KVSTREAMD, os.X_OK):
            pytest.fail(f"kvstreamd not built at {KVSTREAMD} (cmake --build build, or set KVSTREAMD)")
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([KVSTREAMD, "--config", str(self.config)], stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"kvstreamd exited with {self.process.returncode}: {self.log.read_text()}")
            if self.connectable():
                return
            time.sleep(0.01)
        raise RuntimeError(f"kvstreamd did not open {self.socket}: {self.log.read_text()}")

    def stop(self) -> int:
        if self.process is None:
            return -1
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.process = None
        return code

    def restart(self) -> None:
        self.stop()
        self.start()

    def connectable(self) -> bool:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.socket)
            return True
        except OSError:
            return False
        finally:
            s.close()


def until(predicate: Callable[[], object], what: str, timeout: float = 20.0, interval: float = 0.02) -> object:
    """Polls `predicate` until it returns something true (returned); fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} (not within {timeout:g} s)"
        time.sleep(interval)


@contextlib.contextmanager
def daemon_on_faultfs(state_dir: Path, extra_yaml: str = "", **daemon: str) -> Iterator[Tuple[Daemon, Path]]:
    """kvstreamd whose second tier (`slow`) is kvfaultfs, a FUSE file system over a real directory
    whose rules file (re-read at every operation) can make its reads hang until the rule is
    removed; yields the started daemon and the rules file. Skips where FUSE or kvfaultfs is missing."""
    if not os.access(KVFAULTFS, os.X_OK) or not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        pytest.skip("needs kvfaultfs (built with libfuse3-dev), /dev/fuse and fusermount3")
    rules, mount = state_dir / "rules", state_dir / "t1"
    rules.write_text("")
    (state_dir / "back").mkdir()
    mount.mkdir()
    fs = subprocess.Popen([KVFAULTFS, f"--backing={state_dir / 'back'}", f"--rules={rules}", str(mount), "-f"],
                          stderr=subprocess.DEVNULL)
    d = None
    try:
        deadline = time.monotonic() + 5
        while not os.path.ismount(mount):
            if fs.poll() is not None or time.monotonic() > deadline:
                pytest.skip("kvfaultfs could not mount here")
            time.sleep(0.02)
        d = Daemon(state_dir, extra_yaml, **daemon)
        d.start()
        yield d, rules
    finally:
        rules.write_text("")  # releases hung reads
        if d is not None:
            d.stop()
        subprocess.run(["fusermount3", "-u", str(mount)], stderr=subprocess.DEVNULL)
        fs.wait(10)


# A read past its deadline (here 100 to 200 ms) marks its tier stalled; a late read no other tier
# can take over waits (give_up 0) instead of failing its chunk: a retrieve of a chunk only the
# hung tier holds stays inside the daemon until the daemon dies.
READS_WAIT_FOR_A_HUNG_TIER = "reads: {deadline_floor: 100ms, deadline_cap: 200ms, give_up: 0}\n"


def only_on_the_slow_tier(daemon: Daemon, names: List[str]) -> None:
    """Waits until every chunk is on both tiers, then evicts it from `fast`: `slow` holds the only replica."""
    import kvstream

    with kvstream.Client.connect(daemon.socket) as c:
        until(lambda: all(e.tier_mask == 0b11 for e in c.lookup(names)[0]), "the chunks never reached both tiers")
        for name in names:
            assert c.evict(key=name, tier="fast").replicas == 1
        assert [e.tier_mask for e in c.lookup(names)[0]] == [0b10] * len(names)


def hang_reads(rules: Path) -> None:
    """From the next read on, every read of a chunk file on the faultfs tier hangs."""
    rules.write_text("read *.kvc hang\n")


def wait_until_a_read_hangs(daemon: Daemon) -> None:
    """Until the daemon has marked `slow` stalled: a read it issued there is late (and still hanging)."""
    import kvstream

    def stalled() -> bool:
        with kvstream.Client.connect(daemon.socket) as c:
            return any(t.name == "slow" and t.stalled for t in c.stats().tiers)

    until(stalled, "no read hung on the faultfs tier")


def sigkill(daemon: Daemon, rules: Path) -> None:
    """SIGKILLs the daemon, then releases the hung reads (so that no read it issued keeps the dying
    process in the kernel) and waits until it is gone. Its socket files stay behind."""
    assert daemon.process is not None
    daemon.process.kill()
    rules.write_text("")
    daemon.process.wait(15)
    daemon.process = None


# The failure classification every integration follows (the engine's link to the daemon,
# kvstream.daemon_link): a call the daemon refuses (INVALID_ARGUMENT, OUT_OF_RANGE,
# RESOURCE_EXHAUSTED, PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION, ALREADY_EXISTS,
# ABORTED, UNIMPLEMENTED) fails that call and keeps the session; any other failure drops it. Either
# way the engine sees misses or failed keys, never an exception. The two cases below drive an
# engine through a driver with these members:
#   store()       stores `chunks` chunks (SGLang: pages) of random bytes through the engine;
#                 returns their daemon key names
#   hits(more)    the engine's lookup of those chunks (plus one unknown, past the daemon's
#                 sessions.max_lookup_keys, with more=True): how many it reports present
#   read()        the engine's retrieve of those chunks: per chunk, whether it landed byte-identical
#   sessions()    the sessions of the engine's links to the daemon (None: none now)
#   connected()   whether the link the engine retrieves on holds a session now
#   close()

# A daemon whose lookups name at most 4 keys: each driver's store() and hits() stay within it.
MAX_LOOKUP_KEYS = 4
SESSIONS_WITH_A_LOOKUP_LIMIT = f"{{max_arena: 512MiB, max_lookup_keys: {MAX_LOOKUP_KEYS}}}"


def same_sessions(now: Sequence[Any], before: Sequence[Any]) -> bool:
    return len(now) == len(before) and all(a is b for a, b in zip(now, before))


def check_a_refused_call(driver: Any) -> None:
    """A lookup past sessions.max_lookup_keys, refused with INVALID_ARGUMENT: the engine sees
    misses, nothing is raised, and the same sessions go on serving."""
    driver.store()
    n = driver.chunks
    until(lambda: driver.hits() == n, "the engine never saw the chunks it stored")
    before = driver.sessions()
    assert all(s is not None for s in before), before
    assert driver.hits(more=True) == 0  # refused: a miss
    assert same_sessions(driver.sessions(), before), "a refused call dropped the session"
    assert driver.hits() == n and driver.read() == [True] * n
    assert same_sessions(driver.sessions(), before)


def kill_inside_a_retrieve(daemon: Daemon, rules: Path, retrieve: Callable[[], Any]) -> Any:
    """Runs `retrieve` (an engine call reading chunks only the faultfs tier holds) on a thread
    while that tier's reads hang; once the daemon holds one of its reads hanging, SIGKILLs the
    daemon. Returns what the call returned (it re-raises what the call raised)."""
    hang_reads(rules)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        future = pool.submit(retrieve)
        wait_until_a_read_hangs(daemon)
        assert not future.done(), "the retrieve ended while its read hung"
        sigkill(daemon, rules)
        return future.result(timeout=60)
    finally:
        rules.write_text("")  # should this fail midway, no read stays hung behind it
        pool.shutdown(wait=False)


def check_a_kill_inside_a_retrieve(driver: Any, daemon: Daemon, rules: Path) -> None:
    """The daemon SIGKILLed while a retrieve waits inside it on a hung read: the engine sees
    misses, nothing is raised, the session is dropped; a daemon started again on the same socket
    serves the engine again, byte-identical."""
    names = driver.store()
    n = driver.chunks
    only_on_the_slow_tier(daemon, names)
    until(lambda: driver.hits() == n, "the engine never saw the chunks it stored")
    before = driver.sessions()
    assert driver.connected() and all(s is not None for s in before), before
    assert kill_inside_a_retrieve(daemon, rules, driver.read) == [False] * n
    assert not driver.connected(), "the session outlived its daemon"
    daemon.start()  # the same config, state and socket path
    until(lambda: driver.read() == [True] * n, "the engine was not served again", timeout=30)
    assert driver.connected() and driver.sessions()[0] is not before[0]


# The daemon's load estimate and its staging, as a test chooses them: wrappers of a real Client
# (the engine's session keeps talking to the real daemon for everything else).


class Estimating:
    """A Client whose lookups with estimate_load answer the load estimate the test chooses:
    `seconds(name)` per present key (a number, +inf or NaN; None: the daemon's own answer),
    cumulative over the request's present keys as kvstreamd's is. Records each lookup's keys and
    whether it asked for the estimate (`asked`)."""

    def __init__(self, client: Any, seconds: Callable[[str], float] | None) -> None:
        self._client = client
        self._seconds = seconds
        self.asked: List[Tuple[List[str], bool]] = []

    def lookup(self, keys: Sequence[str], lock_seconds: float = 0, estimate_load: bool = False) -> Any:
        self.asked.append((list(keys), estimate_load))
        entries, prefix = self._client.lookup(keys, lock_seconds=lock_seconds, estimate_load=estimate_load)
        if estimate_load and self._seconds is not None:
            total, answered = 0.0, []
            for key, entry in zip(keys, entries):
                if entry.present:
                    total += self._seconds(key)
                answered.append(entry._replace(load_seconds=total))
            entries = answered
        return entries, prefix

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def estimating(session: Any, seconds: Callable[[str], float] | None) -> Estimating:
    """Makes `session`'s client answer load estimates from `seconds` (see Estimating)."""
    session.client = Estimating(session.client, seconds)
    return session.client


STAGING_FULL = "staging is full: dropped"  # how kvstreamd answers a persist it dropped


class StagingFull:
    """A Client whose daemon has staging room for `room` more chunks: a persist admits its chunks
    in call order while there is room and answers the others as kvstreamd does once its staging is
    full (STAGED and WRITTEN with RESOURCE_EXHAUSTED, "staging is full: dropped ..."), without
    sending them. Records each persist's keys, in call order (`calls`)."""

    def __init__(self, client: Any, room: int) -> None:
        self._client = client
        self.room = room
        self.calls: List[List[str]] = []

    def persist_async(self, chunks: Sequence[Any], on_written: Callable[[Any], None] | None = None,
                      check: bool = True, timeout: float | None = None,
                      on_staged: Callable[[Any], None] | None = None) -> Any:
        from kvstream import Code, PersistResult

        chunks = list(chunks)
        self.calls.append([c[0] for c in chunks])
        admitted = min(self.room, len(chunks))
        self.room -= admitted
        done: concurrent.futures.Future = concurrent.futures.Future()
        results: List[Any] = [PersistResult(i, Code.RESOURCE_EXHAUSTED, f"{STAGING_FULL} (test)")
                              for i in range(len(chunks))]
        if admitted:  # the leading chunks: the real daemon stages them (indices unchanged)
            inner = self._client.persist_async(chunks[:admitted], on_written=on_written, check=False,
                                               timeout=timeout, on_staged=on_staged)

            def merge(f: concurrent.futures.Future) -> None:
                if f.exception() is not None:
                    done.set_exception(f.exception())
                else:
                    done.set_result(f.result() + results[admitted:])
        for r in results[admitted:]:
            if on_staged is not None:
                on_staged(r)
            if on_written is not None:
                on_written(r)
        if admitted:
            inner.add_done_callback(merge)
        else:
            done.set_result(results)
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def staging_full(session: Any, room: int) -> StagingFull:
    """Makes `session`'s daemon stage only `room` more chunks (see StagingFull)."""
    session.client = StagingFull(session.client, room)
    return session.client


def wait_stopped(pid: int, timeout: float = 5.0) -> None:
    """Waits until every thread of `pid` is stopped (state T), as SIGSTOP is delivered asynchronously."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                continue
        if states and all(s in ("T", "t") for s in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not stop")


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A short temporary directory (Unix socket paths are limited to 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="kvs-py-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(state_dir: Path) -> Iterator[Daemon]:
    d = Daemon(state_dir)
    d.start()
    yield d
    d.stop()
