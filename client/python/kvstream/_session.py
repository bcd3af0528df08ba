"""The data socket: proving who this process is; receiving the session arena's memfd and mapping
it; adding client regions.

Each request is one connection and one frame: the operation (b"I" identify, b"A" fetch the arena,
b"R" add a region, b"P" add one a device has pinned, b"U" remove one), the session's 32-byte token and an
8-byte little-endian argument (the region's size for b"R"/b"P", its id for b"U"), with the
region's descriptor attached for b"R"/b"P" (SCM_RIGHTS). The daemon hands the arena's descriptor, once, with one data byte; the arena must be
a memfd sealed against shrinking and growing (so the mapping can never fault with SIGBUS). Region
requests get a reply frame: status code, value, message length (4 bytes each, little-endian) and
the message.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import socket
import struct
from typing import Optional

from .errors import Code, KVStreamError, Unavailable

HANDOVER_TIMEOUT_S = 5.0  # the daemon answers at once or not at all


OP_FETCH_ARENA = b"A"
OP_ADD_REGION = b"R"
OP_ADD_PINNED_REGION = b"P"
OP_REMOVE_REGION = b"U"
OP_IDENTIFY = b"I"
CALLER_METADATA = "kvstream-caller"  # gRPC metadata carrying the caller token (hex)


def _frame(op: bytes, token: bytes, argument: int) -> bytes:
    return op + token + struct.pack("<Q", argument)


def receive_arena_fd(data_socket: str, token: bytes, timeout: float = HANDOVER_TIMEOUT_S) -> int:
    """Presents `token` on `data_socket` and returns the arena descriptor it sends back (close-on-exec)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(data_socket)
            sock.sendall(_frame(OP_FETCH_ARENA, token, 0))
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


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            raise Unavailable("the daemon closed the data socket without answering")
        data += more
    return data


def _receive_reply(sock: socket.socket, data_socket: str) -> tuple[int, int, str]:
    """A reply frame: (status code, value, message). Raises OSError as the socket does."""
    code, value, length = struct.unpack("<iII", _recv_exactly(sock, 12))
    if length > 4096:
        raise KVStreamError(Code.DATA_LOSS, f"malformed reply on the data socket {data_socket}")
    return code, value, _recv_exactly(sock, length).decode("utf-8", "replace")


def region_request(
    data_socket: str, token: bytes, op: bytes, argument: int, fd: int = -1, timeout: float = HANDOVER_TIMEOUT_S
) -> int:
    """One region request (OP_ADD_REGION with `fd`, or OP_REMOVE_REGION); returns the reply's value
    or raises the error the daemon answered with."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(data_socket)
            frame = _frame(op, token, argument)
            if fd >= 0:
                socket.send_fds(sock, [frame], [fd])
            else:
                sock.sendall(frame)
            code, value, message = _receive_reply(sock, data_socket)
        except OSError as e:  # includes socket.timeout
            raise Unavailable(f"cannot reach the daemon's data socket {data_socket}: {e}") from e
    finally:
        sock.close()
    if code != 0:
        raise KVStreamError(Code.of(code), message)
    return value


def identify(data_socket: str, timeout: float = HANDOVER_TIMEOUT_S) -> tuple[socket.socket, str]:
    """Proves who this process is (OP_IDENTIFY): the daemon reads the peer's credentials off the
    connection and answers with a caller token (hex) for gRPC calls. The token is valid while the
    returned connection stays open: keep it, close it when done."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(data_socket)
            sock.sendall(_frame(OP_IDENTIFY, bytes(32), 0))
            code, _, message = _receive_reply(sock, data_socket)
        except OSError as e:  # includes socket.timeout
            raise Unavailable(f"cannot reach the daemon's data socket {data_socket}: {e}") from e
        if code != 0:
            raise KVStreamError(Code.of(code), message)
        if len(message) != 64:
            raise KVStreamError(Code.DATA_LOSS, f"malformed caller token on the data socket {data_socket}")
    except BaseException:
        sock.close()
        raise
    return sock, message


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
