"""DaemonLink: the plugin's connection to kvstreamd, which may be down, restart or go away.

LMCache must keep serving whatever the daemon does: while no daemon answers, `session()` returns
None (the backend then reports misses and drops puts) and a new attach is tried at most once per
`retry_interval`. Going down and coming back are logged once each, loudly; each failed retry
while down is logged at most every `log_interval` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional

from ..arena_alloc import ArenaAllocator
from ..client import Client
from ..errors import KVStreamError, Unavailable


class Session:
    """One attached session (or a session-less connection) and the allocator of its arena."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.attached = client.arena_size > 0
        self.allocator: Optional[ArenaAllocator] = ArenaAllocator(client.arena_size) if client.arena_size else None


class DaemonLink:
    """Connects lazily and reconnects after failures. Thread-safe.

    `connect` opens a Client (attach for a worker, connect for a scheduler); `fail(session, error)`
    is called by users of a session whose call failed for a reason other than the request itself,
    and drops that session so that the next `session()` reconnects.
    """

    def __init__(
        self,
        describe: str,
        connect: Callable[[], Client],
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
        self._last_log = -float("inf")
        self._down_since: Optional[float] = None
        self._closed = False

    def session(self) -> Optional[Session]:
        """The live session, connecting first if it is time to try; None while the daemon is down."""
        stale: Optional[Session] = None
        try:
            with self._lock:
                current = self._session
                if current is not None and current.attached and not current.client.session_alive:
                    # The daemon ended the session (it stopped or restarted): attach again now.
                    stale, self._session, self._next_try = current, None, 0.0
                    self._note_down(self._clock(), "the session stream ended")
                if self._session is not None or self._closed:
                    return self._session
                now = self._clock()
                if now < self._next_try:
                    return None
                self._next_try = now + self._retry_interval
                try:
                    self._session = Session(self._connect())
                except Unavailable as e:
                    self._note_down(now, str(e))
                    return None
                except KVStreamError as e:  # the daemon answered but refused: a configuration error
                    self._note_down(now, f"it refused the session: {e}")
                    return None
                if self._down_since is not None:
                    self._log.warning("kvstream: reconnected to %s after %.1f s", self._describe, now - self._down_since)
                else:
                    self._log.info("kvstream: connected to %s", self._describe)
                self._down_since = None
                return self._session
        finally:
            if stale is not None:
                stale.client.close()

    def fail(self, session: Session, error: BaseException) -> None:
        """Drops `session` after a failed call (a no-op if it was already replaced)."""
        with self._lock:
            if self._session is not session:
                return
            self._session = None
            self._next_try = self._clock() + self._retry_interval
            self._note_down(self._clock(), str(error))
        # Closing waits for the daemon to end the stream (bounded): do it outside the lock.
        session.client.close()

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
