"""kvstream: pure-Python client for kvstreamd (gRPC control plane, shared-memory arena for data).

    with kvstream.Client.attach("/run/kvstream/kvstreamd.sock", model="m", rank=0) as c:
        c.arena[0:n] = payload
        c.persist([("m@tp0@h0", 0, n)])
        results, step = c.retrieve([("m@tp0@h0", 0, n)], on_chunk=lambda r: ...)
"""

from .client import CONNECT_TIMEOUT_S, RPC_TIMEOUT_S, Client, PersistError, RetrieveResult
from .errors import Code, KVStreamError, Unavailable
from .types import (
    Chunk,
    ChunkResult,
    EvictResult,
    Health,
    LookupEntry,
    PersistResult,
    Policies,
    Stats,
    StepRecord,
    TierStats,
    TierStep,
)

__version__ = "0.1.0"

__all__ = [
    "CONNECT_TIMEOUT_S",
    "RPC_TIMEOUT_S",
    "Chunk",
    "ChunkResult",
    "Client",
    "Code",
    "EvictResult",
    "Health",
    "KVStreamError",
    "LookupEntry",
    "PersistError",
    "PersistResult",
    "Policies",
    "RetrieveResult",
    "Stats",
    "StepRecord",
    "TierStats",
    "TierStep",
    "Unavailable",
]
