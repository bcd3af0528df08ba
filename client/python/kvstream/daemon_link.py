"""DaemonLink: an engine plugin's connection to kvstreamd, which may be down, restart or go away.

The engine (LMCache, SGLang) must keep serving whatever the daemon does: while no daemon answers,
`session()` returns None (the plugin then reports misses and drops puts) and a new attach is tried
at most once per `retry_interval`. Going down and coming back are logged once each, loudly; each failed retry
while down is logged at most every `log_interval` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional, Protocol, Tuple, TypeVar

from .arena_alloc import ArenaAllocator
from .client import Client
from .errors import KVStreamError, Unavailable, is_refusal

T = TypeVar("T")
logger = logging.getLogger(__name__)


class RegionMemory(Protocol):
    """Where the memory of a client region lies in this process (kvstream.shared_region.SharedRegion)."""

    def offset_of(self, address: int, nbytes: int) -> Optional[int]:
        """The region offset of [address, address + nbytes), or None when it is not inside the region."""


class Session:
    """One attached session (or a session-less connection), the allocator of its arena, the client
    region the plugin handed it (0: none) and, with a region, where its memory lies in this process
    (`memory`: kvstream.transfer moves pieces in it in place). `dropped` is set once DaemonLink.fail
    has dropped it."""

    def __init__(self, client: Client, region: int = 0, memory: Optional[RegionMemory] = None) -> None:
        self.client = client
        self.attached = client.arena_size > 0
        self.allocator: Optional[ArenaAllocator] = ArenaAllocator(client.arena_size) if client.arena_size else None
        self.region = region
        self.memory = memory if region else None
        self.dropped = False


def _close_in_background(session: Session) -> None:
    """Ends a dropped session without making the caller wait for a daemon that may not answer.
    Its arena refuses allocations at once (threads still holding the session give up)."""
    if session.allocator is not None:
        session.allocator.close()
    threading.Thread(target=session.client.close, name="kvstream-close", daemon=True).start()


class DaemonLink:
    """Connects lazily and reconnects after failures, without ever making a caller wait for a
    daemon that is down or hung. Thread-safe.

    `connect` opens a Session (attach for a worker, connect for a scheduler). The first attempt
    (`connect_now`) and the one right after the daemon ended the session stream (it stopped or
    restarted, so the attempt is quick either way) run on the caller's thread; every other
    reconnect runs on a background thread at most once per `retry_interval`, and callers get None
    meanwhile. Every call on a session's client goes through `call`, which decides by ONE rule
    whether a failed call drops the session (see `call`).
    """

    def __init__(
        self,
        describe: str,
        connect: Callable[[], Session],
        logger: logging.Logger,
        retry_interval: float = 1.0,
        log_interval: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._describe = describe
        self._connect = connect
        self._log = logger
        self._retry_interval = retry_interval
        self._log_interval = log_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._session: Optional[Session] = None
        self._next_try = 0.0
        self._connecting = False  # an attempt is running (on some thread)
        self._last_log = -float("inf")
        self._down_since: Optional[float] = None
        self._closed = False

    def connect_now(self) -> Optional[Session]:
        """One attempt on the caller's thread (unless connected, or an attempt is under way)."""
        with self._lock:
            if self._session is not None or self._closed or self._connecting:
                return self._session
            self._connecting = True
        self._connect_and_install()
        with self._lock:
            return self._session

    def session(self) -> Optional[Session]:
        """The live session; None while there is none (a reconnect may be under way)."""
        reattach = False
        with self._lock:
            current = self._session
            if current is not None and current.attached and not current.client.session_alive:
                # The daemon ended the session (it stopped or restarted): attach again at once, on
                # this thread (quick either way); other callers see no session meanwhile.
                self._session = None
                current.dropped = True
                self._note_down(self._clock(), "the session stream ended")
                _close_in_background(current)
                reattach = not self._connecting
                if reattach:
                    self._connecting = True
            elif self._session is not None or self._closed:
                return self._session
            elif not self._connecting and self._clock() >= self._next_try:
                self._next_try = self._clock() + self._retry_interval
                self._connecting = True
                threading.Thread(target=self._connect_and_install, name="kvstream-reconnect", daemon=True).start()
                return None
            else:
                return None
        if reattach:
            self._connect_and_install()
        with self._lock:
            return self._session

    def call(self, session: Session, what: str, fn: Callable[[], T], failed: Any = None) -> Any:
        """fn() (a call on `session`'s client, `what` names it in logs), or `failed` when it raised.

        The rule, the same for every engine: a REFUSED call (kvstream.errors.REFUSALS: INVALID_ARGUMENT,
        OUT_OF_RANGE, RESOURCE_EXHAUSTED, PERMISSION_DENIED, UNAUTHENTICATED, FAILED_PRECONDITION,
        ALREADY_EXISTS, ABORTED, UNIMPLEMENTED) fails that call alone and keeps the session: the daemon
        answered, started no I/O for it, and the session is sound. ANYTHING ELSE (UNAVAILABLE,
        CANCELLED, DEADLINE_EXCEEDED, NOT_FOUND of the session, DATA_LOSS, INTERNAL, UNKNOWN, socket
        errors, any other exception) drops the session: the daemon is gone, hung or no longer
        trustworthy, and I/O of the call may still be in flight into the session's memory until the
        session ends. A dropped session is attached again later (see the class). Never raises an
        Exception: engines turn `failed` into misses and failed keys."""
        return call(self, session, what, fn, failed)

    def fail(self, session: Session, error: BaseException) -> None:
        """Drops `session` (a no-op if it was already replaced). REQUIRES: the caller applies call's rule."""
        session.dropped = True
        with self._lock:
            if self._session is not session:
                return
            self._session = None
            self._next_try = self._clock() + self._retry_interval
            self._note_down(self._clock(), str(error))
        _close_in_background(session)

    def _connect_and_install(self) -> None:
        """REQUIRES: this thread set _connecting. One attempt, outside the lock; then installs it."""
        attempt: Tuple[Optional[Session], str] = (None, "not attempted")
        try:
            attempt = self._attempt()
        finally:
            with self._lock:
                self._connecting = False
                self._next_try = self._clock() + self._retry_interval
                install = self._session is None and not self._closed
                if install:
                    self._install(attempt)
        if not install and attempt[0] is not None:  # closed meanwhile
            attempt[0].client.close()

    def _attempt(self) -> Tuple[Optional[Session], str]:
        """Connects: the session, or None and why not. Takes no lock."""
        try:
            return self._connect(), ""
        except Unavailable as e:
            return None, str(e)
        except KVStreamError as e:  # the daemon answered but refused: a configuration error
            return None, f"it refused the session: {e}"
        except Exception as e:  # noqa: BLE001 - e.g. out of descriptors: never into LMCache
            return None, f"{type(e).__name__}: {e}"

    def _install(self, attempt: Tuple[Optional[Session], str]) -> None:
        """REQUIRES: the lock. Makes the attempt's session current, or notes why there is none."""
        session, reason = attempt
        now = self._clock()
        if session is None:
            self._note_down(now, reason)
            return
        self._session = session
        if self._down_since is not None:
            self._log.warning("kvstream: reconnected to %s after %.1f s", self._describe, now - self._down_since)
        else:
            self._log.info("kvstream: connected to %s", self._describe)
        self._down_since = None

    @property
    def connected(self) -> bool:
        with self._lock:
            return self._session is not None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            session, self._session = self._session, None
        if session is not None:
            session.client.close()

    def _note_down(self, now: float, reason: str) -> None:
        if self._down_since is None:
            self._down_since = now
            self._last_log = now
            self._log.error(
                "kvstream: %s is unavailable (%s); serving misses and dropping puts until it is back",
                self._describe, reason,
            )
        elif now - self._last_log >= self._log_interval:
            self._last_log = now
            self._log.warning("kvstream: %s still unavailable after %.0f s (%s)", self._describe,
                              now - self._down_since, reason)


class _Failable(Protocol):
    def fail(self, session: Any, error: BaseException) -> None: ...


def call(link: _Failable, session: Any, what: str, fn: Callable[[], T], failed: Any = None) -> Any:
    """DaemonLink.call's rule for any link that can `fail` a session (a test's stand-in too)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the rule decides; nothing reaches the engine
        if is_refusal(e):
            logger.warning("kvstream: %s refused (%s); the session is kept", what, e)
        else:
            logger.warning("kvstream: %s failed (%s: %s); the session is dropped", what, type(e).__name__, e)
            link.fail(session, e)
        return failed
