"""Hand-written Produce codec, v3-v8 (the hot path).

Records stay opaque: each partition's ``records`` is a memoryview slice of
the received frame, so a 1 MiB batch is never copied while decoding.  The
library codec copies it; this one only walks the headers.
Batch validation is the caller's job (``vdl.log.record_batch``), per partition,
so that one bad partition fails alone.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from vdl.net.kafka.errors import MalformedRequest, UnsupportedVersion
from vdl.net.kafka.primitives import put_string, read_count, read_nullable_string, read_string
from vdl.net.kafka.versions import SERVED_PRODUCE_MIN, ApiKey

__all__ = [
    "MAX_PRODUCE_VERSION",
    "MIN_PRODUCE_VERSION",
    "PartitionProduceResult",
    "ProducePartition",
    "ProduceRequest",
    "ProduceTopic",
    "decode_produce_request",
    "encode_produce_response",
]

MIN_PRODUCE_VERSION = SERVED_PRODUCE_MIN
MAX_PRODUCE_VERSION = 8

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_HEAD = struct.Struct(">ii")  # size prefix, correlation id
_PART_V3 = struct.Struct(">ihqq")  # index, error, base_offset, log_append_time
_PART_V5 = struct.Struct(">ihqqq")  # ... + log_start_offset


@dataclass(slots=True)
class ProducePartition:
    index: int
    # A slice of the request frame; None when the client sent a null records field.
    records: memoryview | None


@dataclass(slots=True)
class ProduceTopic:
    name: str
    partitions: list[ProducePartition]


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopic]


@dataclass(slots=True)
class PartitionProduceResult:
    index: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    # (batch_index, message or None); v8+ only, ignored below.
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)
    error_message: str | None = None


def decode_produce_request(body: memoryview, version: int) -> ProduceRequest:
    """Decode a Produce body (the frame after the request header)."""
    if not MIN_PRODUCE_VERSION <= version <= MAX_PRODUCE_VERSION:
        raise UnsupportedVersion(ApiKey.PRODUCE, version)
    end = len(body)
    transactional_id, pos = read_nullable_string(body, 0, end)
    if pos + 6 > end:
        raise MalformedRequest("truncated produce request")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(body, pos)
    pos += 6
    n_topics, pos = read_count(body, pos, end)
    topics: list[ProduceTopic] = []
    for _ in range(n_topics):
        name, pos = read_string(body, pos, end)
        assert name is not None
        n_parts, pos = read_count(body, pos, end)
        parts: list[ProducePartition] = []
        for _ in range(n_parts):
            if pos + 8 > end:
                raise MalformedRequest("truncated partition data")
            index, size = _HEAD.unpack_from(body, pos)
            pos += 8
            records: memoryview | None
            if size < 0:
                if size != -1:
                    raise MalformedRequest(f"bad records length {size}")
                records = None
            else:
                if pos + size > end:
                    raise MalformedRequest("records overrun the request")
                records = body[pos : pos + size]
                pos += size
            parts.append(ProducePartition(index, records))
        topics.append(ProduceTopic(name, parts))
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


def encode_produce_response(
    version: int,
    correlation_id: int,
    topics: list[tuple[str, list[PartitionProduceResult]]],
    throttle_time_ms: int = 0,
) -> bytes:
    """Encode a framed Produce response (response header v0: not flexible below v9)."""
    if not MIN_PRODUCE_VERSION <= version <= MAX_PRODUCE_VERSION:
        raise UnsupportedVersion(ApiKey.PRODUCE, version)
    out = bytearray(8)  # size prefix and correlation id, filled in at the end
    out += _I32.pack(len(topics))
    with_log_start = version >= 5
    with_errors = version >= 8
    for name, parts in topics:
        put_string(out, name)
        out += _I32.pack(len(parts))
        for p in parts:
            if with_log_start:
                out += _PART_V5.pack(
                    p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset
                )
            else:
                out += _PART_V3.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            if with_errors:
                out += _I32.pack(len(p.record_errors))
                for batch_index, message in p.record_errors:
                    out += _I32.pack(batch_index)
                    put_string(out, message)
                put_string(out, p.error_message)
    out += _I32.pack(throttle_time_ms)
    _HEAD.pack_into(out, 0, len(out) - 4, correlation_id)
    return bytes(out)
