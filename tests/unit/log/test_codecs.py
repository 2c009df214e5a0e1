"""Kafka's batch codecs (vdl.log.codecs): round trips, the wire framings Kafka clients use,
and the bound on what a payload may expand to."""

from __future__ import annotations

import gzip
import os
import struct

import cramjam
import pytest

from vdl.log import codecs
from vdl.log.codecs import (
    CorruptPayload,
    PayloadTooLarge,
    UnknownCodec,
    compress,
    decompress,
    xerial_snappy,
)

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
# Compressible but not trivially so: random words, repeated.
DATA = b" ".join(os.urandom(6).hex().encode() for _ in range(200)) * 80


@pytest.mark.parametrize("codec", [0, GZIP, SNAPPY, LZ4, ZSTD])
@pytest.mark.parametrize("size", [0, 1, 1000, len(DATA)])
def test_round_trip(codec: int, size: int) -> None:
    data = DATA[:size]
    encoded = compress(codec, data)
    if codec and size == len(DATA):
        assert len(encoded) < len(data) // 2
    assert decompress(codec, encoded) == data
    assert decompress(codec, memoryview(bytearray(encoded))) == data


def test_what_other_encoders_write() -> None:
    # Python's gzip module (a file name-less header with an mtime), concatenated members.
    assert decompress(GZIP, gzip.compress(DATA, mtime=123)) == DATA
    assert decompress(GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"
    # Raw snappy, as a Java producer may write it, and xerial with many blocks.
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(DATA))) == DATA
    framed = xerial_snappy(DATA, block_size=1000)
    assert framed.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    assert decompress(SNAPPY, framed) == DATA
    # Two zstd frames, the first declaring its size.
    two = bytes(cramjam.zstd.compress(DATA)) + bytes(cramjam.zstd.compress(b"tail"))
    assert codecs._zstd_content_size(two) == len(DATA)
    assert decompress(ZSTD, two) == DATA + b"tail"
    # Two lz4 frames.
    assert decompress(LZ4, compress(LZ4, DATA) + compress(LZ4, b"x")) == DATA + b"x"


def test_xerial_blocks_are_length_prefixed_raw_snappy() -> None:
    framed = xerial_snappy(b"a" * 2500, block_size=1000)
    pos, blocks = 16, []
    while pos < len(framed):
        (length,) = struct.unpack_from(">i", framed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(framed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert [len(b) for b in blocks] == [1000, 1000, 500]


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_expansion_is_bounded(codec: int) -> None:
    bomb = compress(codec, bytes(20 << 20))  # 20 MiB of zeros, a few KiB compressed
    assert len(bomb) < 1 << 20
    with pytest.raises(PayloadTooLarge):
        decompress(codec, bomb, limit=1 << 20)
    assert decompress(codec, bomb, limit=20 << 20) == bytes(20 << 20)
    # The limit is exact.
    small = compress(codec, b"x" * 1000)
    assert decompress(codec, small, limit=1000) == b"x" * 1000
    with pytest.raises(PayloadTooLarge):
        decompress(codec, small, limit=999)


def test_declared_sizes_are_not_trusted() -> None:
    # A zstd frame declaring more than the limit is refused before any decoding.
    frame = bytearray(cramjam.zstd.compress(bytes(100_000)))
    assert codecs._zstd_content_size(bytes(frame)) == 100_000
    with pytest.raises(PayloadTooLarge):
        decompress(ZSTD, bytes(frame), limit=50_000)
    # One declaring less than it holds (single segment, a 4-byte Frame_Content_Size at
    # offset 5) fails in the decoder rather than writing past the buffer it was given.
    assert frame[4] == 0xA0
    frame[5:9] = (1000).to_bytes(4, "little")
    with pytest.raises((PayloadTooLarge, CorruptPayload)):
        decompress(ZSTD, bytes(frame), limit=50_000)
    # A raw snappy block's length prefix is checked against the limit before decoding,
    # and a prefix that lies fails in the decoder.
    block = bytes(cramjam.snappy.compress_raw(bytes(5000)))
    with pytest.raises(PayloadTooLarge):
        decompress(SNAPPY, block, limit=4999)
    assert block[:2] == b"\x88\x27"  # varint 5000
    with pytest.raises(CorruptPayload):
        decompress(SNAPPY, b"\x0a" + block[2:])


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_corrupt_payloads(codec: int) -> None:
    encoded = compress(codec, DATA)
    for bad in (encoded[: len(encoded) // 2], b"garbage" * 10):
        with pytest.raises(CorruptPayload):
            decompress(codec, bad)


def test_truncated_zstd_is_corrupt() -> None:
    encoded = compress(ZSTD, DATA)
    with pytest.raises(CorruptPayload):
        decompress(ZSTD, encoded[:-5], limit=len(DATA))


def test_truncated_xerial_framing() -> None:
    framed = xerial_snappy(DATA)
    for bad in (framed[:12], framed[:18], framed[:-3]):
        with pytest.raises(CorruptPayload):
            decompress(SNAPPY, bad)


def test_unknown_codecs() -> None:
    for codec in (5, 6, 7):
        with pytest.raises(UnknownCodec):
            decompress(codec, b"x")
        with pytest.raises(UnknownCodec):
            compress(codec, b"x")
