"""Errors raised by the kvstream client, with google.rpc status codes."""

from __future__ import annotations

import enum
from typing import Optional

import grpc


class Code(enum.IntEnum):
    """google.rpc.Code, as carried by gRPC statuses and by ChunkDone / PersistEvent codes."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16

    @classmethod
    def of(cls, value: int) -> "Code":
        """The code for an integer; UNKNOWN for values outside google.rpc.Code."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class KVStreamError(Exception):
    """A failed call: `code` (a Code) and the daemon's (or client's) `message`."""

    def __init__(self, code: int, message: str) -> None:
        self.code = Code.of(int(code))
        self.message = message
        super().__init__(f"{self.code.name}: {message}")


# Codes with which the daemon (or this client) refuses one call while the session stays sound: the
# request was wrong, over a limit or not allowed. Every other code, and every other exception, says
# the session itself can no longer be trusted (DaemonLink.call's rule).
REFUSALS = frozenset({
    Code.INVALID_ARGUMENT, Code.OUT_OF_RANGE, Code.RESOURCE_EXHAUSTED, Code.PERMISSION_DENIED,
    Code.UNAUTHENTICATED, Code.FAILED_PRECONDITION, Code.ALREADY_EXISTS, Code.ABORTED, Code.UNIMPLEMENTED,
})


def is_refusal(error: BaseException) -> bool:
    """Whether `error` refused one call (a KVStreamError or grpc.RpcError with a code in REFUSALS)."""
    if isinstance(error, KVStreamError):
        return error.code in REFUSALS
    if isinstance(error, grpc.RpcError) and callable(getattr(error, "code", None)):
        status = error.code()
        return isinstance(status, grpc.StatusCode) and Code.of(status.value[0]) in REFUSALS
    return False


class Unavailable(KVStreamError):
    """No kvstreamd answers (not running, wrong socket, or it went away)."""

    def __init__(self, message: str) -> None:
        super().__init__(Code.UNAVAILABLE, message)


def from_rpc_error(error: grpc.RpcError, socket_path: str, what: Optional[str] = None) -> KVStreamError:
    """Converts a grpc.RpcError into a KVStreamError (Unavailable names the socket)."""
    status = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    code = Code.of(status.value[0]) if isinstance(status, grpc.StatusCode) else Code.UNKNOWN
    prefix = f"{what}: " if what else ""
    if code == Code.UNAVAILABLE:
        return Unavailable(f"{prefix}kvstreamd on {socket_path} is unavailable ({details})")
    return KVStreamError(code, f"{prefix}{details}")
