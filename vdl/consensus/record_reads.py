"""Reading a partition's committed records from a node that holds a replica of it.

A node serves YDB readers every partition of a topic, also those it holds no replica of
(with more nodes than the replication factor): it reads those from a node that does, its
leader or any other replica (every replica holds the same committed records at the same
offsets). Like a snapshot pull (`snapshot_transfer.py`) each read is a one-off connection
to that node's raft port, so it never queues behind, or delays, the raft messages of the
groups; with raft TLS it is TLS too, both ends present a member's certificate and the
dialer checks that it reached the node it meant (`peer_tls.py`).

Protocol (big-endian):

    request (reader -> replica):  u32 magic "VDLF", u16 topic length, u32 partition,
                                  i64 offset, u32 max bytes, u32 wait ms,
                                  i64 timestamp ms (-1: none), topic (UTF-8)
    answer (replica -> reader):   i16 error code (the Kafka protocol's; 0: none),
                                  i64 log start offset, i64 high watermark,
                                  i64 last stable offset,
                                  i64 first offset at or after the timestamp (-1: none),
                                  u32 aborted transactions, u32 body length,
                                  per aborted transaction: i64 producer id,
                                  i64 first offset, i64 offset of its abort marker;
                                  body

The body is the record batches below the last stable offset (KIP-98: what a
read_committed reader may see) from the one holding `offset`, as stored (at least one
batch when there is one, else up to `max bytes`), with the aborted transactions that may
have records among them (the Kafka protocol guide, Fetch `aborted_transactions`); on an
error it is its reason in UTF-8. A reader at or past the last stable offset waits up to
`wait ms` for more (a long poll). Both sides bound what they take: the topic's length,
`max bytes`, the wait, the aborted transactions and the body (`MAX_BODY_BYTES`, as a raft
frame); whatever breaks the layout ends the connection, and the replica carries on
serving.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import Protocol

import trio

from vdl.backends.api import Buffer
from vdl.consensus.peer_tls import PeerTls, open_raft_stream

log = logging.getLogger(__name__)

RECORDS_MAGIC = 0x56444C46  # "VDLF"
REQUEST_HEAD = struct.Struct(">IHIqIIq")
ANSWER_HEAD = struct.Struct(">hqqqqII")
ABORTED = struct.Struct(">qqq")
MAX_TOPIC_BYTES = 249  # Kafka's limit on a topic name
MAX_READ_BYTES = 4 << 20  # what one answer carries at most, beyond its first batch
MAX_WAIT_MS = 10_000
MAX_BODY_BYTES = 64 * 1024 * 1024  # one stored batch may be as large as a raft frame
MAX_ABORTED = 65536
# Kafka protocol error codes (the Kafka protocol guide).
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
_RECEIVE_BYTES = 256 * 1024


class RecordReadError(Exception):
    """The replica could not be reached, or answered with an error (`code`)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class RecordStream(Protocol):
    """A partition replica's committed records (a `vdl.log.stream.LogStream`)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    def read_stable(self, offset: int, max_bytes: int) -> list[Buffer]:
        """The batches below the last stable offset from the one holding `offset`."""
        ...

    def aborted(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """(producer id, first offset, abort marker offset) of the aborted transactions
        that may have records in offsets [start, end)."""
        ...

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None: ...

    def watch(self, event: trio.Event) -> None: ...

    def unwatch(self, event: trio.Event) -> None: ...


class RecordSource(Protocol):
    def record_stream(self, topic: str, partition: int) -> RecordStream | None:
        """This node's replica of the partition, None if it holds none."""
        ...


@dataclass(frozen=True, slots=True)
class RecordRequest:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    wait_ms: int = 0
    timestamp_ms: int = -1  # -1: no timestamp to look up


@dataclass(frozen=True, slots=True)
class Records:
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    timestamp_offset: int | None
    aborted: list[tuple[int, int, int]]
    batches: list[bytes]


def encode_request(request: RecordRequest) -> bytes:
    topic = request.topic.encode()
    if not 0 < len(topic) <= MAX_TOPIC_BYTES:
        raise ValueError(f"topic name of {len(topic)} bytes")
    return (
        REQUEST_HEAD.pack(
            RECORDS_MAGIC,
            len(topic),
            request.partition,
            request.offset,
            min(request.max_bytes, MAX_READ_BYTES),
            min(request.wait_ms, MAX_WAIT_MS),
            request.timestamp_ms,
        )
        + topic
    )


def topic_length(head: bytes) -> int:
    """How many topic bytes follow a request's fixed head (ValueError if too many)."""
    magic, length, *_ = REQUEST_HEAD.unpack(head)
    if magic != RECORDS_MAGIC:
        raise ValueError("not a record read")
    if not 0 < length <= MAX_TOPIC_BYTES:
        raise ValueError(f"topic name of {length} bytes")
    return int(length)


def decode_request(head: bytes, topic: bytes) -> RecordRequest:
    """ValueError (or UnicodeDecodeError) for a request out of bounds."""
    _, _, partition, offset, max_bytes, wait_ms, timestamp_ms = REQUEST_HEAD.unpack(head)
    if offset < 0 or timestamp_ms < -1:
        raise ValueError("a negative offset or timestamp")
    return RecordRequest(
        topic.decode(),
        partition,
        offset,
        min(max_bytes, MAX_READ_BYTES),
        min(wait_ms, MAX_WAIT_MS),
        timestamp_ms,
    )


def _answer(
    code: int,
    offsets: tuple[int, int, int],
    at: int | None,
    aborted: list[tuple[int, int, int]],
    body: list[Buffer] | bytes,
) -> list[Buffer]:
    parts: list[Buffer] = [body] if isinstance(body, bytes) else list(body)
    size = sum(len(p) for p in parts)
    head = ANSWER_HEAD.pack(code, *offsets, -1 if at is None else at, len(aborted), size)
    return [head, b"".join(ABORTED.pack(*a) for a in aborted), *parts]


def _failure(code: int, reason: str) -> list[Buffer]:
    return _answer(code, (-1, -1, -1), None, [], reason.encode()[:4096])


# ---- the replica -----------------------------------------------------------------------


async def serve_records(stream: trio.abc.Stream, source: RecordSource, raw: bytes) -> None:
    """Answer the record read in `raw` (head and topic, its magic checked)."""
    try:
        request = decode_request(raw[: REQUEST_HEAD.size], raw[REQUEST_HEAD.size :])
    except ValueError as exc:
        log.warning("refusing a malformed record read: %s", exc)
        await _send(stream, _failure(INVALID_REQUEST, f"malformed record read: {exc}"))
        return
    records = source.record_stream(request.topic, request.partition)
    if records is None:
        where = f"{request.topic!r} partition {request.partition}"
        await _send(stream, _failure(UNKNOWN_TOPIC_OR_PARTITION, f"no replica of {where} here"))
        return
    if request.wait_ms and request.offset >= records.last_stable_offset:
        event = trio.Event()
        records.watch(event)
        try:
            with trio.move_on_after(request.wait_ms / 1000):
                await event.wait()
        finally:
            records.unwatch(event)
    at = None
    if request.timestamp_ms >= 0:
        at = records.offset_for_timestamp(request.timestamp_ms)
    start, hw = records.log_start_offset, records.high_watermark
    stable = records.last_stable_offset
    batches: list[Buffer] = []
    aborted: list[tuple[int, int, int]] = []
    if request.max_bytes and start <= request.offset < stable:
        batches = records.read_stable(request.offset, request.max_bytes)
    if batches:
        # A transaction starts at a batch's base offset: those with records in the last
        # batch start at or before its base.
        end = int.from_bytes(batches[-1][:8], "big") + 1
        aborted = records.aborted(request.offset, end)[:MAX_ABORTED]
    await _send(stream, _answer(0, (start, hw, stable), at, aborted, batches))


async def _send(stream: trio.abc.Stream, parts: list[Buffer]) -> None:
    for part in parts:
        await stream.send_all(part)


# ---- the reader ------------------------------------------------------------------------


async def fetch_records(
    address: tuple[str, int],
    request: RecordRequest,
    *,
    tls: PeerTls | None = None,
    node_id: int | None = None,
) -> Records:
    """Read from the replica at raft `address` (node `node_id`); RecordReadError if it
    cannot be reached or answers with an error."""
    try:
        stream = await open_raft_stream(address, tls, node_id)
    except OSError as exc:
        raise RecordReadError(f"cannot reach node {node_id}: {exc}") from None
    try:
        await stream.send_all(encode_request(request))
        head = await _receive(stream, ANSWER_HEAD.size)
        code, start, hw, stable, at, count, size = ANSWER_HEAD.unpack(head)
        if size > MAX_BODY_BYTES or count > MAX_ABORTED:
            raise RecordReadError(f"node {node_id} answered a record read out of bounds")
        raw = await _receive(stream, count * ABORTED.size)
        body = await _receive(stream, size)
    except (trio.BrokenResourceError, OSError, EOFError) as exc:
        raise RecordReadError(f"a record read from node {node_id} broke: {exc}") from None
    finally:
        await stream.aclose()
    if code:
        reason = body.decode(errors="replace")
        raise RecordReadError(f"node {node_id}: {reason}", code)
    aborted = [ABORTED.unpack_from(raw, i * ABORTED.size) for i in range(count)]
    return Records(start, hw, stable, None if at < 0 else at, aborted, split_batches(body))


def split_batches(body: bytes) -> list[bytes]:
    """The record batches laid end to end in `body` (Kafka's batch framing: i64 base
    offset, i32 length of the rest); RecordReadError if one is cut short."""
    batches = []
    at = 0
    while at < len(body):
        if len(body) - at < 12:
            raise RecordReadError("a record batch cut short")
        length = int.from_bytes(body[at + 8 : at + 12], "big", signed=True)
        end = at + 12 + length
        if length < 0 or end > len(body):
            raise RecordReadError("a record batch cut short")
        batches.append(body[at:end])
        at = end
    return batches


async def _receive(stream: trio.abc.Stream, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.receive_some(min(n - len(buf), _RECEIVE_BYTES))
        if not chunk:
            raise EOFError("the replica closed the connection")
        buf += chunk
    return bytes(buf)
