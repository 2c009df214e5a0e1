"""Kafka's classic (non-flexible) wire primitives shared by the hand-written codecs:
int16-length strings and int32-length array counts, read from untrusted request bytes."""

from __future__ import annotations

import struct

from vdl.net.kafka.errors import MalformedRequest

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def read_nullable_string(body: memoryview, pos: int, end: int) -> tuple[str | None, int]:
    """A string whose length -1 means null."""
    if pos + 2 > end:
        raise MalformedRequest("truncated string length")
    (n,) = _I16.unpack_from(body, pos)
    pos += 2
    if n == -1:
        return None, pos
    if n < 0:
        raise MalformedRequest(f"bad string length {n}")
    if pos + n > end:
        raise MalformedRequest("truncated string")
    try:
        return bytes(body[pos : pos + n]).decode("utf-8"), pos + n
    except UnicodeDecodeError as exc:
        raise MalformedRequest("string is not UTF-8") from exc


def read_string(body: memoryview, pos: int, end: int) -> tuple[str, int]:
    value, pos = read_nullable_string(body, pos, end)
    if value is None:
        raise MalformedRequest("null where a string is required")
    return value, pos


def read_count(body: memoryview, pos: int, end: int) -> tuple[int, int]:
    """An array's element count; null (-1) arrays are not accepted where this is used."""
    if pos + 4 > end:
        raise MalformedRequest("truncated array length")
    (n,) = _I32.unpack_from(body, pos)
    if n < 0:
        raise MalformedRequest(f"bad array length {n}")
    return n, pos + 4


def put_string(out: bytearray, s: str | None) -> None:
    if s is None:
        out += b"\xff\xff"
        return
    data = s.encode("utf-8")
    out += _I16.pack(len(data))
    out += data
