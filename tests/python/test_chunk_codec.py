"""The stored layout of LMCache chunks (header + tensor bytes)."""

from __future__ import annotations

import pytest

pytest.importorskip("lmcache", reason="kvstream.lmcache needs LMCache")

from kvstream.lmcache import chunk_codec  # noqa: E402


def test_round_trip_keeps_layout_and_bytes():
    layout = chunk_codec.ChunkLayout("KV_2LTD", [[4, 2, 256, 1024]], ["bfloat16"], 10)
    header = layout.encode_header()
    assert len(header) % 64 == 0
    payload = memoryview(header + bytes(range(10)))
    decoded, data = chunk_codec.decode(payload)
    assert decoded == layout
    assert bytes(data) == bytes(range(10))


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b"XXXXXXXX" + b[8:], "does not start"),
    (lambda b: b[:-1], "tensor bytes"),
    (lambda b: b[:8], "shorter"),
    (lambda b: b[:12] + b"{not json" + b[21:], "bad chunk header"),
])
def test_foreign_or_damaged_payloads_are_refused(mutate, message):
    good = chunk_codec.ChunkLayout("KV_2LTD", [[2, 3]], ["float16"], 12).encode_header() + bytes(12)
    with pytest.raises(chunk_codec.ChunkFormatError, match=message):
        chunk_codec.decode(memoryview(mutate(good)))
