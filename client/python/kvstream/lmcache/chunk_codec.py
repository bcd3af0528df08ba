"""The layout of an LMCache chunk stored in kvstreamd: a small header, then the MemoryObj's bytes.

The header makes a stored chunk self-describing, so that a process that never saw it being put
(another vLLM instance, or this one after a restart) can allocate a MemoryObj of the right shapes,
dtypes and format before copying the bytes in:

    magic "KVSLMC01" (8 bytes) | header length H, uint32 LE | JSON {"fmt", "shapes", "dtypes",
    "nbytes"} | zero padding to H | nbytes of tensor data

H is a multiple of 64. The daemon checksums the whole payload, so the codec only checks shape.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import List

MAGIC = b"KVSLMC01"
_FIXED = struct.Struct("<8sI")
_ALIGN = 64
MAX_HEADER = 64 << 10


class ChunkFormatError(ValueError):
    """A stored payload that is not an LMCache chunk written by this codec."""


@dataclass(frozen=True)
class ChunkLayout:
    """What is needed to allocate the MemoryObj of a chunk: format name, shapes, dtype names, bytes."""

    fmt: str
    shapes: List[List[int]]
    dtypes: List[str]
    nbytes: int

    def encode_header(self) -> bytes:
        body = json.dumps(
            {"fmt": self.fmt, "shapes": self.shapes, "dtypes": self.dtypes, "nbytes": self.nbytes},
            separators=(",", ":"),
        ).encode()
        length = -(-(_FIXED.size + len(body)) // _ALIGN) * _ALIGN
        return _FIXED.pack(MAGIC, length) + body + bytes(length - _FIXED.size - len(body))


def header_length(buf: memoryview) -> int:
    """The header length H of the payload starting at `buf` (which holds at least 12 bytes)."""
    if len(buf) < _FIXED.size:
        raise ChunkFormatError(f"payload of {len(buf)} bytes is shorter than the chunk header")
    magic, length = _FIXED.unpack_from(buf)
    if magic != MAGIC:
        raise ChunkFormatError(f"payload does not start with {MAGIC!r} (not written by kvstream.lmcache)")
    if length < _FIXED.size or length > MAX_HEADER or length % _ALIGN:
        raise ChunkFormatError(f"bad chunk header length {length}")
    return length


def decode(payload: memoryview) -> tuple[ChunkLayout, memoryview]:
    """The layout of a stored chunk and a view of its tensor bytes (no copy)."""
    length = header_length(payload)
    if len(payload) < length:
        raise ChunkFormatError(f"payload of {len(payload)} bytes is shorter than its header ({length})")
    try:
        meta = json.loads(bytes(payload[_FIXED.size:length]).rstrip(b"\0"))
        layout = ChunkLayout(str(meta["fmt"]), [list(map(int, s)) for s in meta["shapes"]],
                             [str(d) for d in meta["dtypes"]], int(meta["nbytes"]))
    except (ValueError, KeyError, TypeError) as e:
        raise ChunkFormatError(f"bad chunk header: {e}") from None
    if len(layout.shapes) != len(layout.dtypes) or not layout.shapes:
        raise ChunkFormatError("chunk header has mismatched shapes and dtypes")
    if len(payload) != length + layout.nbytes:
        raise ChunkFormatError(f"payload holds {len(payload) - length} tensor bytes, the header says {layout.nbytes}")
    return layout, payload[length:]
