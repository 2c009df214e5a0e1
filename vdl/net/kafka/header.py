"""Kafka request header parsing (header v1 and v2).

The header has to be read before anything else: its api_key and api_version
pick the body decoder.  Whether the header carries a tagged-field section
(v2) depends on whether that (api_key, version) is flexible; the table is
derived from kafka-python's copy of Kafka's message JSON rather than copied
by hand, so it cannot drift from the codec that encodes the bodies.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Importing these packages defines every ApiMessage subclass; the walk
# below finds them.  kafka-python keeps no request registry of its own.
import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer
import kafka.protocol.sasl  # noqa: F401
from kafka.protocol.api_message import ApiMessage

from vdl.net.kafka.errors import MalformedRequest

__all__ = [
    "FLEXIBLE_FROM",
    "MalformedRequest",
    "RequestHeader",
    "is_flexible",
    "kafka_request_classes",
    "kafka_response_classes",
    "parse_request_header",
    "read_uvarint",
]

_HEAD = struct.Struct(">hhih")


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # Offset of the request body inside the frame the header was parsed from.
    body_offset: int


def _walk(cls: Any) -> Iterator[Any]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _walk(sub)


def _registry(want_request: bool) -> dict[int, Any]:
    found: dict[int, Any] = {}
    for cls in _walk(ApiMessage):
        # Versioned wrappers (Foo_v3) and abstract bases have no schema of their own.
        if getattr(cls, "_class_version", None) is not None:
            continue
        if getattr(cls, "_json", None) is None:
            continue
        if cls.is_request() is want_request:
            found[cls.API_KEY] = cls
    return found


_REQUESTS: dict[int, Any] = _registry(True)
_RESPONSES: dict[int, Any] = _registry(False)


def kafka_request_classes() -> dict[int, Any]:
    """api_key -> kafka-python request class (primary, unversioned)."""
    return dict(_REQUESTS)


def kafka_response_classes() -> dict[int, Any]:
    """api_key -> kafka-python response class (primary, unversioned)."""
    return dict(_RESPONSES)


def _flexible_from() -> dict[int, int]:
    table: dict[int, int] = {}
    for key, cls in _REQUESTS.items():
        flex = cls._flexible_versions
        if flex is not None and flex[0] >= 0:
            table[key] = flex[0]
    return table


# api_key -> first flexible version; keys absent here are never flexible.
FLEXIBLE_FROM: dict[int, int] = _flexible_from()


def is_flexible(api_key: int, api_version: int) -> bool:
    first = FLEXIBLE_FROM.get(api_key)
    return first is not None and api_version >= first


def read_uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    """Unsigned LEB128 varint at pos; returns (value, new_pos)."""
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise MalformedRequest("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        # A uint32 needs at most 5 bytes; longer is garbage, and unbounded
        # shifts would let a peer build huge integers.
        if shift > 28:
            raise MalformedRequest("varint too long")


def skip_tagged_fields(buf: memoryview, pos: int, end: int) -> int:
    """Skip a tagged-field section (KIP-482); unknown tags are ignored by design."""
    count, pos = read_uvarint(buf, pos, end)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos, end)
        size, pos = read_uvarint(buf, pos, end)
        pos += size
        if pos > end:
            raise MalformedRequest("truncated tagged field")
    return pos


def parse_request_header(frame: memoryview) -> RequestHeader:
    """Parse the header at the start of a request frame (size prefix already removed).

    client_id keeps its int16 length even in header v2 (KIP-482), so only the
    trailing tagged fields depend on flexibility.
    """
    end = len(frame)
    if end < _HEAD.size:
        raise MalformedRequest(f"request header truncated ({end} bytes)")
    api_key, api_version, correlation_id, id_len = _HEAD.unpack_from(frame, 0)
    pos = _HEAD.size
    client_id: str | None
    if id_len == -1:
        client_id = None
    elif id_len < 0:
        raise MalformedRequest(f"bad client_id length {id_len}")
    else:
        if pos + id_len > end:
            raise MalformedRequest("client_id truncated")
        # Java decodes with replacement too; a strange client id is not worth
        # dropping the connection over.
        client_id = bytes(frame[pos : pos + id_len]).decode("utf-8", errors="replace")
        pos += id_len
    if is_flexible(api_key, api_version):
        pos = skip_tagged_fields(frame, pos, end)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)
