"""Kafka's record batch codecs: the one place VDL compresses and decompresses records.

A RecordBatch v2 names its codec in attribute bits 0-2 (Kafka protocol guide, "Record
Batch"): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (zstd since KIP-110). What each means on
the wire, as Kafka clients write it:

* gzip: a gzip stream (RFC 1952); concatenated members are read as one stream, as Java's
  ``GZIPInputStream`` does.
* snappy: either the xerial ``snappy-java`` framing (Kafka's Java client and librdkafka
  write it: the magic ``\\x82SNAPPY\\x00``, two big-endian int32 versions, then blocks, each
  a big-endian int32 length and a raw snappy block) or one raw snappy block.
* lz4: the LZ4 frame format (KIP-57), with independent or linked blocks.
* zstd: one or more Zstandard frames (RFC 8878).

Decompression is bounded: ``decompress`` never returns (or holds) more than ``limit``
bytes, so a small batch built to expand without end (a "decompression bomb") is an error
for the read that meets it, never an out-of-memory. gzip inflates through zlib with an
output cap; raw snappy declares its length up front (the decoder checks it); lz4 and zstd
decode into a buffer of bounded size, grown while the output does not fit, up to ``limit``.

Pure CPU work with no event-loop state: callers with much to decode run it in a worker
thread (``trio.to_thread.run_sync``); zlib and cramjam release the GIL while they work.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam

from vdl.log.batch_header import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)

__all__ = [
    "CODEC_NAMES",
    "MAX_DECOMPRESSED_BYTES",
    "CodecError",
    "CorruptPayload",
    "PayloadTooLarge",
    "UnknownCodec",
    "compress",
    "decompress",
]

#: How far one batch (or one YDB message) may expand when decompressed: far above what a
#: batch of Kafka's default ``max.message.bytes`` (1 MiB) holds at any real compression
#: ratio, far below what a reader could hold many of at once.
MAX_DECOMPRESSED_BYTES = 64 << 20

CODEC_NAMES = {
    COMPRESSION_NONE: "none",
    COMPRESSION_GZIP: "gzip",
    COMPRESSION_SNAPPY: "snappy",
    COMPRESSION_LZ4: "lz4",
    COMPRESSION_ZSTD: "zstd",
}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
_BLOCK_LENGTH = struct.Struct(">i")
# librdkafka and snappy-java both write 32 KiB xerial blocks.
_XERIAL_BLOCK = 32 * 1024
# What one zlib call may inflate to: the overshoot past a limit is at most this.
_GZIP_CHUNK = 1 << 20
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# The first output buffer for lz4 and zstd when the frame does not declare its size.
_FIRST_GUESS_MIN = 64 * 1024
_FIRST_GUESS_RATIO = 4

Data = bytes | bytearray | memoryview
# cramjam's ``decompress_into(input, output) -> bytes written``.
_DecodeInto = Callable[[bytes, bytearray], int]


class CodecError(Exception):
    """A payload that cannot be decompressed."""


class UnknownCodec(CodecError):
    """A codec number outside Kafka's 0-4."""


class CorruptPayload(CodecError):
    """The payload is not valid for its codec."""


class PayloadTooLarge(CodecError):
    """The payload expands beyond the limit it was decompressed with."""


def compress(codec: int, data: Data) -> bytes:
    """``data`` encoded as a Kafka producer encodes a batch's records (snappy: xerial)."""
    if codec == COMPRESSION_NONE:
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        # zlib's own gzip header carries no file name and mtime 0: deterministic output.
        compressor = zlib.compressobj(wbits=31)
        return compressor.compress(data) + compressor.flush()
    if codec == COMPRESSION_SNAPPY:
        return xerial_snappy(data)
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(bytes(data)))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(bytes(data)))
    raise UnknownCodec(f"cannot compress with codec {codec}")


def xerial_snappy(data: Data, block_size: int = _XERIAL_BLOCK) -> bytes:
    view = memoryview(data)
    out = [_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(view), block_size):
        block = bytes(cramjam.snappy.compress_raw(bytes(view[start : start + block_size])))
        out.append(_BLOCK_LENGTH.pack(len(block)))
        out.append(block)
    return b"".join(out)


def decompress(codec: int, data: Data, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """The decoded ``data`` of a batch compressed with Kafka ``codec``, at most ``limit``
    bytes of it (PayloadTooLarge beyond)."""
    if codec == COMPRESSION_NONE:
        if len(data) > limit:
            raise PayloadTooLarge(f"payload of {len(data)} bytes exceeds {limit}")
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        return gunzip(data, limit)
    if codec == COMPRESSION_SNAPPY:
        return _snappy(data, limit)
    if codec == COMPRESSION_LZ4:
        return _bounded(cramjam.lz4.decompress_into, "lz4", data, limit, _lz4_content_size(data))
    if codec == COMPRESSION_ZSTD:
        return _bounded(cramjam.zstd.decompress_into, "zstd", data, limit, _zstd_content_size(data))
    raise UnknownCodec(f"cannot decompress codec {codec}")


def gunzip(data: Data, limit: int) -> bytes:
    """A gzip stream of one or more members, inflated to at most ``limit`` bytes.

    Inflated a chunk at a time (zlib's ``max_length``), so a stream that expands beyond
    ``limit`` fails holding about ``limit`` bytes, never what it would expand to."""
    if not data:
        raise CorruptPayload("gzip payload empty")
    parts: list[bytes] = []
    size = 0
    rest: Data = data
    while rest:
        inflater = zlib.decompressobj(wbits=31)
        pending: Data = rest
        while True:
            try:
                part = inflater.decompress(pending, _GZIP_CHUNK)
            except zlib.error as exc:
                raise CorruptPayload(f"gzip payload: {exc}") from None
            size += len(part)
            if size > limit:
                raise PayloadTooLarge(f"gzip payload inflates beyond {limit} bytes")
            if part:
                parts.append(part)
            pending = inflater.unconsumed_tail
            if inflater.eof or not (part or pending):
                break
        if not inflater.eof:
            raise CorruptPayload("gzip payload truncated")
        rest = inflater.unused_data
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _snappy(data: Data, limit: int) -> bytes:
    raw = bytes(data)
    if raw[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return _snappy_block(raw, limit, limit)
    if len(raw) < _XERIAL_HEADER.size:
        raise CorruptPayload("snappy payload: xerial header truncated")
    parts: list[bytes] = []
    size = 0
    pos = _XERIAL_HEADER.size
    while pos < len(raw):
        if pos + _BLOCK_LENGTH.size > len(raw):
            raise CorruptPayload("snappy payload: xerial block length truncated")
        (length,) = _BLOCK_LENGTH.unpack_from(raw, pos)
        pos += _BLOCK_LENGTH.size
        if length < 0 or pos + length > len(raw):
            raise CorruptPayload(f"snappy payload: xerial block of {length} bytes overruns")
        block = _snappy_block(raw[pos : pos + length], limit - size, limit)
        parts.append(block)
        size += len(block)
        pos += length
    return b"".join(parts)


def _snappy_block(raw: bytes, room: int, limit: int) -> bytes:
    # A raw snappy block starts with its decoded length, which the decoder holds it to:
    # checking it first bounds the output before any of it is made.
    try:
        length = int(cramjam.snappy.decompress_raw_len(raw))
    except cramjam.DecompressionError as exc:
        raise CorruptPayload(f"snappy payload: {exc}") from None
    if length > room:
        raise PayloadTooLarge(f"snappy payload inflates beyond {limit} bytes")
    out = bytearray(length)
    try:
        written = int(cramjam.snappy.decompress_raw_into(raw, out))
    except cramjam.DecompressionError as exc:
        raise CorruptPayload(f"snappy payload: {exc}") from None
    if written != length:
        raise CorruptPayload(f"snappy payload: {written} bytes decoded, {length} declared")
    return bytes(out)


def _bounded(
    decode_into: _DecodeInto, name: str, data: Data, limit: int, hint: int | None
) -> bytes:
    """Decode into a buffer of bounded size: cramjam's ``decompress_into`` fails instead of
    writing past the buffer's end, so a payload larger than the buffer costs the buffer and
    no more. The buffer starts at the size the frame declares (else a guess) and doubles
    while the output does not fit, up to ``limit`` (at most twice the decoding work of one
    pass over the output)."""
    raw = bytes(data)
    if hint is not None and hint > limit:
        raise PayloadTooLarge(f"{name} payload declares {hint} bytes, more than {limit}")
    size = hint if hint else max(_FIRST_GUESS_MIN, _FIRST_GUESS_RATIO * len(raw))
    size = min(size, limit)
    while True:
        out = bytearray(size)
        try:
            written = int(decode_into(raw, out))
        except cramjam.DecompressionError as exc:
            if size < limit:
                # Most likely the buffer was too small; a corrupt payload fails again.
                del out
                size = min(limit, size * 2)
                continue
            if "whole buffer" in str(exc):
                raise PayloadTooLarge(f"{name} payload inflates beyond {limit} bytes") from None
            raise CorruptPayload(f"{name} payload: {exc}") from None
        del out[written:]
        return bytes(out)


def _lz4_content_size(data: Data) -> int | None:
    """The content size an LZ4 frame declares (FLG bit 3), if it does."""
    if len(data) < 14 or bytes(data[:4]) != _LZ4_MAGIC or not data[4] & 0x08:
        return None
    return int.from_bytes(data[6:14], "little")


def _zstd_content_size(data: Data) -> int | None:
    """The Frame_Content_Size of the first Zstandard frame (RFC 8878, 3.1.1.1), if set."""
    if len(data) < 5 or bytes(data[:4]) != _ZSTD_MAGIC:
        return None
    descriptor = data[4]
    fcs_flag = descriptor >> 6
    single_segment = bool(descriptor & 0x20)
    fcs_size = (0, 2, 4, 8)[fcs_flag] if fcs_flag else (1 if single_segment else 0)
    if not fcs_size:
        return None
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
    if len(data) < pos + fcs_size:
        return None
    size = int.from_bytes(data[pos : pos + fcs_size], "little")
    return size + 256 if fcs_size == 2 else size
