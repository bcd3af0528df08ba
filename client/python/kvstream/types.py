"""Plain result types of the client API (mirroring include/kvstream/types.h and the proto)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple

from .errors import Code


class Chunk(NamedTuple):
    """A chunk in the arena (region 0) or in a client region (Client.add_region): retrieve writes up
    to `length` bytes at `offset`; persist stores [offset, offset + length). Plain (key, offset,
    length) and (key, offset, length, region) tuples are accepted wherever a Chunk is."""

    key: str
    offset: int
    length: int
    region: int = 0


class LookupEntry(NamedTuple):
    """Presence of one key: its payload size, the tiers holding it (bit i = tier i), whether the
    lookup locked it (lookup with lock_seconds) and, with lookup(estimate_load=True), the daemon's
    load estimate: the seconds, from now, to read this key's chunk and every present key before it
    in the request (cumulative); +inf when only stalled or unreachable tiers hold one of them, NaN
    when the daemon has no estimate yet. 0.0 when not asked for (or from a daemon without one)."""

    present: bool
    size: int
    tier_mask: int
    locked: bool = False
    load_seconds: float = 0.0


@dataclass(frozen=True)
class ChunkResult:
    """One chunk of a retrieve: `code` OK (landed, `size` bytes at its offset), NOT_FOUND (miss),
    DATA_LOSS, ...; `index` is its position in the request."""

    index: int
    code: Code
    message: str = ""
    size: int = 0
    tier_mask: int = 0

    @property
    def ok(self) -> bool:
        return self.code == Code.OK


@dataclass(frozen=True)
class PersistResult:
    """Final state of one persisted chunk: `code` OK when written to the tiers in `tier_mask`;
    `lost_mask` names the targeted tiers whose replica failed (why: `message`). `synced_mask`: the
    tiers of `tier_mask` whose replica the daemon synced (fsync: chunk); the others are written but
    may still be in the page cache, and a power cut may lose them."""

    index: int
    code: Code
    message: str = ""
    tier_mask: int = 0
    lost_mask: int = 0
    synced_mask: int = 0

    @property
    def ok(self) -> bool:
        """Written to at least one tier."""
        return self.code == Code.OK

    @property
    def durable(self) -> bool:
        """Written and synced on at least one tier: a power cut does not lose it."""
        return self.ok and self.synced_mask != 0


@dataclass(frozen=True)
class TierStep:
    tier: str
    blocks: int
    bytes: int
    busy_seconds: float
    bandwidth_bps: float
    eligible: bool


@dataclass(frozen=True)
class StepRecord:
    """What one retrieval step did: chunks, hits, time, the bound D / sum(b_k), the gap, per tier."""

    id: int
    start_unix_ns: int
    chunks: int
    hits: int
    misses: int
    failed: int
    bytes: int
    wall_seconds: float
    bound_seconds: float
    gap: float
    routing: str
    batching: str
    tiers: List[TierStep] = field(default_factory=list)

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Policies:
    routing: str
    batching: str
    writes: str
    pending: bool = False  # set_policies' reply: the requested ones wait for pending steps
    replication: str = "all"


@dataclass(frozen=True)
class TierStats:
    """One tier's state and counters. Every per-tier counter (bytes_read, blocks_read, hedged_reads,
    ...: the daemon's include/kvstream/tier_counters.h) is in `counters` by name and reads as an
    attribute too (`t.bytes_read`)."""

    name: str
    path: str
    direct_io: bool
    mem_alignment: int
    offset_alignment: int
    fixed_buffers: bool
    queue_depth: int
    capacity_bytes: int
    used_bytes: int
    chunks: int
    resubmits: int
    fixed_ops: int
    reference_bandwidth_bps: float
    stalled: bool = False
    readable: bool = True
    writable: bool = True
    condition: str = ""
    shared: bool = False  # other nodes publish chunks into the same directory
    foreign_chunks: int = 0  # shared: indexed chunks other nodes published (not in chunks/used_bytes)
    discovered: int = 0  # shared: keys this node's index lacked, found on the file system
    group: str = ""  # the configured tier this is a drive of (its own name for one directory)
    io_engine: str = ""  # "io_uring" or "threads"
    counters: Dict[str, int] = field(default_factory=dict)

    def __getattr__(self, name: str) -> int:
        counters = self.__dict__.get("counters")
        if counters is not None and name in counters:
            return counters[name]
        raise AttributeError(f"TierStats has no field or counter '{name}'")


@dataclass(frozen=True)
class Stats:
    tiers: List[TierStats]
    chunks: int
    staged_bytes: int
    staged_chunks: int
    staging_limit_bytes: int
    steps: int
    retrieve_hits: int
    retrieve_misses: int
    retrieve_failures: int
    persists: int
    persist_failures: int
    writes_under_pressure: int
    sessions: int
    policies: Policies
    process_cpu_seconds: float = 0.0  # the daemon's user + system CPU time
    verify_threads: int = 0           # threads verifying blocks off the I/O loop
    write_stall_seconds: float = 0.0  # time persists spent waiting for staging space
    shared_copies: int = 0  # chunks read from another node's file on a shared tier, staged for local tiers
    shared_copies_skipped: int = 0  # ... not staged: staging was full
    staging_kept_bytes: int = 0  # staging memory kept for reuse, beyond what staged chunks hold
    # The fsync policy: "chunk" (persists are synced: durable), "none" (written, not synced: a
    # power cut may lose them), "" (a daemon that does not say).
    fsync: str = ""

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class EvictResult:
    replicas: int
    bytes: int


@dataclass(frozen=True)
class Health:
    serving: bool
    version: str
    degraded_tiers: List[str]
    stalled_tiers: List[str] = field(default_factory=list)
    unusable_tiers: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
