"""The session arena: receiving its memfd over the daemon's data socket and mapping it.

After Attached, the daemon hands the arena's file descriptor, once, to the peer that presents the
session's 32-byte token on `data_socket` (SCM_RIGHTS, one data byte). The descriptor must be a
memfd sealed against shrinking and growing (so the mapping can never fault with SIGBUS).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import socket
from typing import Optional

from .errors import Code, KVStreamError, Unavailable

HANDOVER_TIMEOUT_S = 5.0  # the daemon answers at once or not at all


def receive_arena_fd(data_socket: str, token: bytes, timeout: float = HANDOVER_TIMEOUT_S) -> int:
    """Presents `token` on `data_socket` and returns the arena descriptor it sends back (close-on-exec)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(data_socket)
            sock.sendall(token)
            flags = getattr(socket, "MSG_CMSG_CLOEXEC", 0)
            data, fds, _, _ = socket.recv_fds(sock, 1, 1, flags)
        except OSError as e:  # includes socket.timeout
            raise Unavailable(f"cannot receive the arena from the daemon's data socket {data_socket}: {e}") from e
        if len(fds) != 1 or len(data) != 1:
            for fd in fds:
                os.close(fd)
            raise KVStreamError(Code.DATA_LOSS, f"the data socket {data_socket} sent no arena descriptor")
        return fds[0]
    finally:
        sock.close()


class Arena:
    """A mapped session arena (MAP_SHARED, read-write). `view` is a zero-copy memoryview of it."""

    def __init__(self, fd: int) -> None:
        """Maps `fd` (taking ownership: it is closed once mapped, or on failure)."""
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            need = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
            if seals & need != need:
                raise KVStreamError(Code.FAILED_PRECONDITION, "arena descriptor is not a size-sealed memfd")
            size = os.fstat(fd).st_size
            if size <= 0:
                raise KVStreamError(Code.FAILED_PRECONDITION, "arena descriptor has no size")
            self._mmap: Optional[mmap.mmap] = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            raise KVStreamError(Code.INTERNAL, f"mapping the arena: {e}") from e
        finally:
            os.close(fd)  # the mapping keeps the memfd alive
        self.size = size
        self._view: Optional[memoryview] = memoryview(self._mmap)

    @property
    def view(self) -> memoryview:
        if self._view is None:
            raise KVStreamError(Code.FAILED_PRECONDITION, "the arena is unmapped (session closed)")
        return self._view

    def close(self) -> None:
        """Unmaps the arena. If the caller still holds views of it (e.g. numpy arrays), the mapping
        stays valid until the last one goes away."""
        view, mapping = self._view, self._mmap
        self._view = self._mmap = None
        if mapping is None:
            return
        try:
            if view is not None:
                view.release()
            mapping.close()
        except BufferError:
            pass  # exported views remain; the garbage collector unmaps with the last one
