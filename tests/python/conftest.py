"""Fixtures: a real kvstreamd (the built binary) on a temporary socket and two tier directories,
and one whose second tier is kvfaultfs (reads that hang on demand)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, Tuple

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
