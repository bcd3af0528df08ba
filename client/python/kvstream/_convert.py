"""Conversions between the generated protobuf messages and the plain types of kvstream.types."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, List, Sequence, Type, TypeVar, Union

from ._proto import pb
from .errors import Code
from .types import (
    Chunk,
    ChunkResult,
    Health,
    Policies,
    Stats,
    StepRecord,
    TierStats,
    TierStep,
)

T = TypeVar("T")
ChunkLike = Union[Chunk, Sequence[Any]]


def _scalars(cls: Type[T], msg: Any, **overrides: Any) -> T:
    """Builds dataclass `cls` from the equally named fields of `msg` (nested ones in `overrides`)."""
    values = {f.name: getattr(msg, f.name) for f in dataclasses.fields(cls) if f.name not in overrides}
    return cls(**values, **overrides)


def key_bytes(key: "str | bytes") -> bytes:
    """A key as the wire carries it: UTF-8 bytes (a str that is not valid text stays invalid, and
    the daemon refuses it with INVALID_ARGUMENT)."""
    return key.encode("utf-8", "surrogateescape") if isinstance(key, str) else bytes(key)


def chunks_to_proto(chunks: Iterable[ChunkLike]) -> List[Any]:
    """(key, offset, length[, region]) tuples to pb.ChunkRange messages."""
    out = []
    for c in chunks:
        key, offset, length = c[0], c[1], c[2]
        region = int(c[3]) if len(c) > 3 else 0
        out.append(pb.ChunkRange(key=key_bytes(key), offset=int(offset), length=int(length), region=region))
    return out


def chunk_result(msg: Any) -> ChunkResult:
    return ChunkResult(msg.index, Code.of(msg.code), msg.message, msg.size, msg.tier_mask)


def step_record(msg: Any) -> StepRecord:
    return _scalars(StepRecord, msg, tiers=[_scalars(TierStep, t) for t in msg.tiers])


def policies(msg: Any) -> Policies:
    return _scalars(Policies, msg)


def stats(msg: Any) -> Stats:
    return _scalars(
        Stats,
        msg,
        tiers=[_scalars(TierStats, t, counters=dict(t.counters)) for t in msg.tiers],
        policies=policies(msg.policies),
    )


def health(msg: Any) -> Health:
    return Health(msg.serving, msg.version, list(msg.degraded_tiers), list(msg.stalled_tiers),
                  list(msg.unusable_tiers), list(msg.problems))
