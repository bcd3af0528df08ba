"""DaemonLink.call's one rule against a real kvstreamd: a refused call fails alone and keeps the
session; any other failure drops it (and the link attaches again later)."""

from __future__ import annotations

import logging
import signal
import time
from typing import Iterator

import grpc
import pytest

from conftest import wait_stopped
from kvstream import Client, Code, KVStreamError, Unavailable
from kvstream.daemon_link import DaemonLink, Session
from kvstream.errors import REFUSALS

log = logging.getLogger("test_daemon_link")

REFUSED = [Code.INVALID_ARGUMENT, Code.OUT_OF_RANGE, Code.RESOURCE_EXHAUSTED, Code.PERMISSION_DENIED,
           Code.UNAUTHENTICATED, Code.FAILED_PRECONDITION, Code.ALREADY_EXISTS, Code.ABORTED, Code.UNIMPLEMENTED]
DROPPING = [c for c in Code if c != Code.OK and c not in REFUSED]


def link_to(socket: str, retry_interval: float = 60, rpc_timeout: float = 30) -> DaemonLink:
    link = DaemonLink(f"kvstreamd on {socket}", lambda: Session(Client.attach(
        socket, model="link-test", arena_bytes=1 << 20, rpc_timeout=rpc_timeout)), log, retry_interval=retry_interval)
    assert link.connect_now() is not None
    return link


@pytest.fixture
def link(daemon) -> Iterator[DaemonLink]:
    """A link attached to the daemon that attaches again only after a minute (a dropped session
    stays dropped for the test)."""
    link = link_to(daemon.socket)
    yield link
    link.close()


def raising(error: BaseException):
    def fn():
        raise error
    return fn


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "fake"


def test_the_refusals_are_exactly_the_documented_codes():
    assert REFUSALS == frozenset(REFUSED)
    assert sorted(DROPPING) == sorted([Code.CANCELLED, Code.UNKNOWN, Code.DEADLINE_EXCEEDED, Code.NOT_FOUND,
                                       Code.INTERNAL, Code.UNAVAILABLE, Code.DATA_LOSS])


@pytest.mark.parametrize("code", REFUSED, ids=lambda c: c.name)
def test_a_refused_call_fails_alone_and_keeps_the_session(link, code):
    session = link.session()
    assert link.call(session, "refused", raising(KVStreamError(code, "no")), failed="failed") == "failed"
    assert link.call(session, "refused", raising(FakeRpcError(getattr(grpc.StatusCode, code.name))),
                     failed="failed") == "failed"
    assert link.session() is session and not session.dropped
    assert link.call(session, "lookup", lambda: session.client.lookup(["k"])[1]) == 0  # still serves


@pytest.mark.parametrize("code", DROPPING, ids=lambda c: c.name)
def test_any_other_code_drops_the_session(link, code):
    session = link.session()
    assert link.call(session, "failing", raising(KVStreamError(code, "gone"))) is None
    assert session.dropped and link.session() is None  # attached again only after retry_interval


@pytest.mark.parametrize("error", [ConnectionResetError("reset"), OSError("socket"), ValueError("odd"),
                                   Unavailable("no daemon"), FakeRpcError(grpc.StatusCode.UNAVAILABLE)],
                         ids=lambda e: type(e).__name__)
def test_socket_errors_and_unknown_exceptions_drop_the_session(link, error):
    session = link.session()
    assert link.call(session, "failing", raising(error), failed=False) is False
    assert session.dropped and link.session() is None


def test_a_call_the_daemon_refuses_keeps_the_session(link):
    session = link.session()
    too_many = [f"k{i}" for i in range(20000)]  # over sessions.max_lookup_keys (16384)
    assert link.call(session, "lookup", lambda: session.client.lookup(too_many)) is None
    assert link.session() is session


def test_a_hung_daemon_drops_the_session_and_a_live_one_is_attached_again(daemon):
    link = link_to(daemon.socket, retry_interval=0.1, rpc_timeout=0.5)
    try:
        session = link.session()
        daemon.process.send_signal(signal.SIGSTOP)
        wait_stopped(daemon.process.pid)
        try:
            assert link.call(session, "lookup", lambda: session.client.lookup(["k"])) is None  # DEADLINE_EXCEEDED
        finally:
            daemon.process.send_signal(signal.SIGCONT)
        assert session.dropped
        deadline = time.monotonic() + 10
        while (fresh := link.session()) is None:
            assert time.monotonic() < deadline, "never attached again"
            time.sleep(0.05)
        assert fresh is not session
        assert link.call(fresh, "lookup", lambda: fresh.client.lookup(["k"])[1]) == 0
    finally:
        link.close()


def test_a_daemon_that_is_gone_drops_the_session(daemon, link):
    session = link.session()
    daemon.process.kill()
    daemon.process.wait()
    daemon.process = None
    assert link.call(session, "lookup", lambda: session.client.lookup(["k"]), failed=False) is False
    assert session.dropped and link.session() is None