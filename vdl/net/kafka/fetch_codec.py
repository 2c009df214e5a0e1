"""Hand-written Fetch codec, v4-v11.

The response is returned as a framed scatter list: small encoded pieces
interleaved with the stored batch buffers themselves, so a fetch of 1 MiB of
records costs no copy in Python (the socket layer sends the list with
sendmsg).  Consecutive small fields are packed into one bytearray so the list
stays short: about one piece per partition plus its record buffers.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from vdl.net.kafka.errors import MalformedRequest, UnsupportedVersion
from vdl.net.kafka.primitives import put_string, read_count, read_string
from vdl.net.kafka.versions import ApiKey

__all__ = [
    "MAX_FETCH_VERSION",
    "MIN_FETCH_VERSION",
    "FetchPartition",
    "FetchPartitionResult",
    "FetchRequest",
    "FetchTopic",
    "ForgottenTopic",
    "decode_fetch_request",
    "encode_fetch_response",
]

MIN_FETCH_VERSION = 4
MAX_FETCH_VERSION = 11

Buffer = bytes | bytearray | memoryview

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64_I64 = struct.Struct(">qq")
_BASE = struct.Struct(">iiiib")  # replica, max_wait, min_bytes, max_bytes, isolation
_SESSION = struct.Struct(">ii")
_P_V4 = struct.Struct(">iqi")  # partition, fetch_offset, partition_max_bytes
_P_V5 = struct.Struct(">iqqi")  # + log_start_offset
_P_V9 = struct.Struct(">iiqqi")  # + current_leader_epoch
_R_V4 = struct.Struct(">ihqq")  # partition, error, high_watermark, last_stable_offset
_R_V5 = struct.Struct(">ihqqq")  # + log_start_offset


@dataclass(slots=True)
class FetchPartition:
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(slots=True)
class FetchTopic:
    name: str
    partitions: list[FetchPartition]


@dataclass(slots=True)
class ForgottenTopic:
    name: str
    partitions: list[int]


@dataclass(slots=True)
class FetchRequest:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten_topics: list[ForgottenTopic]
    rack_id: str


@dataclass(slots=True)
class FetchPartitionResult:
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int = -1
    log_start_offset: int = -1
    # (producer_id, first_offset) pairs; None encodes as a null array.
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    # Stored batch buffers, sent as-is in this order.
    records: Sequence[Buffer] = field(default_factory=list)


def _need(pos: int, size: int, end: int) -> None:
    if pos + size > end:
        raise MalformedRequest("truncated fetch request")


def decode_fetch_request(body: memoryview, version: int) -> FetchRequest:
    """Decode a Fetch body; fields a version lacks get Kafka's schema defaults."""
    if not MIN_FETCH_VERSION <= version <= MAX_FETCH_VERSION:
        raise UnsupportedVersion(ApiKey.FETCH, version)
    end = len(body)
    _need(0, _BASE.size, end)
    replica_id, max_wait_ms, min_bytes, max_bytes, isolation = _BASE.unpack_from(body, 0)
    pos = _BASE.size
    session_id, session_epoch = 0, -1
    if version >= 7:
        _need(pos, 8, end)
        session_id, session_epoch = _SESSION.unpack_from(body, pos)
        pos += 8
    if version >= 9:
        pstruct = _P_V9
    elif version >= 5:
        pstruct = _P_V5
    else:
        pstruct = _P_V4
    psize = pstruct.size
    n_topics, pos = read_count(body, pos, end)
    topics: list[FetchTopic] = []
    for _ in range(n_topics):
        name, pos = read_string(body, pos, end)
        n_parts, pos = read_count(body, pos, end)
        parts: list[FetchPartition] = []
        for _ in range(n_parts):
            _need(pos, psize, end)
            if version >= 9:
                p, epoch, offset, log_start, pmax = _P_V9.unpack_from(body, pos)
            elif version >= 5:
                p, offset, log_start, pmax = _P_V5.unpack_from(body, pos)
                epoch = -1
            else:
                p, offset, pmax = _P_V4.unpack_from(body, pos)
                epoch, log_start = -1, -1
            pos += psize
            parts.append(FetchPartition(p, epoch, offset, log_start, pmax))
        topics.append(FetchTopic(name, parts))
    forgotten: list[ForgottenTopic] = []
    if version >= 7:
        n_forgotten, pos = read_count(body, pos, end)
        for _ in range(n_forgotten):
            name, pos = read_string(body, pos, end)
            n_parts, pos = read_count(body, pos, end)
            _need(pos, 4 * n_parts, end)
            ids = list(struct.unpack_from(f">{n_parts}i", body, pos))
            pos += 4 * n_parts
            forgotten.append(ForgottenTopic(name, ids))
    rack_id = ""
    if version >= 11:
        rack_id, pos = read_string(body, pos, end)
    return FetchRequest(
        replica_id,
        max_wait_ms,
        min_bytes,
        max_bytes,
        isolation,
        session_id,
        session_epoch,
        topics,
        forgotten,
        rack_id,
    )


def encode_fetch_response(
    version: int,
    correlation_id: int,
    throttle_time_ms: int,
    error_code: int,
    session_id: int,
    topics: list[tuple[str, list[FetchPartitionResult]]],
) -> list[bytes | memoryview]:
    """Encode a framed Fetch response as a scatter list (response header v0).

    The first piece starts with the int32 frame size.  Record buffers appear
    in the list unchanged (bytes and memoryviews as given; a bytearray is
    wrapped in a memoryview, not copied), so b"".join(result) is the wire
    image.  ``error_code`` and ``session_id`` exist on the wire from v7 only.
    """
    if not MIN_FETCH_VERSION <= version <= MAX_FETCH_VERSION:
        raise UnsupportedVersion(ApiKey.FETCH, version)
    # Small fields accumulate in `cur`; `parts_out` holds finished small pieces
    # and record buffers in wire order.  parts_out[0] is the head, whose first
    # 8 bytes (frame size, correlation id) are patched once the size is known.
    head = bytearray(8)
    cur = head
    parts_out: list[bytes | bytearray | memoryview] = [head]
    total = 0
    cur += _I32.pack(throttle_time_ms)
    if version >= 7:
        cur += _I16.pack(error_code)
        cur += _I32.pack(session_id)
    cur += _I32.pack(len(topics))
    with_log_start = version >= 5
    with_replica = version >= 11
    for name, parts in topics:
        put_string(cur, name)
        cur += _I32.pack(len(parts))
        for p in parts:
            if with_log_start:
                cur += _R_V5.pack(
                    p.partition,
                    p.error_code,
                    p.high_watermark,
                    p.last_stable_offset,
                    p.log_start_offset,
                )
            else:
                cur += _R_V4.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                cur += b"\xff\xff\xff\xff"
            else:
                cur += _I32.pack(len(aborted))
                for producer_id, first_offset in aborted:
                    cur += _I64_I64.pack(producer_id, first_offset)
            if with_replica:
                cur += _I32.pack(p.preferred_read_replica)
            size = 0
            for buf in p.records:
                size += buf.nbytes if isinstance(buf, memoryview) else len(buf)
            cur += _I32.pack(size)
            if size:
                for buf in p.records:
                    # Only our own small pieces are bytearrays in parts_out.
                    parts_out.append(memoryview(buf) if isinstance(buf, bytearray) else buf)
                total += size
                cur = bytearray()
                parts_out.append(cur)
    out: list[bytes | memoryview] = []
    for piece in parts_out:
        if isinstance(piece, bytearray):
            # One of our small pieces (stored bytearrays were wrapped above).
            # Freezing a few dozen bytes is cheap and keeps the list immutable.
            total += len(piece)
            if piece:
                out.append(b"" if piece is head else bytes(piece))
        elif piece.nbytes if isinstance(piece, memoryview) else len(piece):
            out.append(piece)
    struct.pack_into(">ii", head, 0, total - 4, correlation_id)
    out[0] = bytes(head)
    return out
