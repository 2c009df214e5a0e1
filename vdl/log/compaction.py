"""Log compaction (cleanup.policy=compact), as the Kafka documentation's "Log Compaction"
defines it: the closed part of a partition keeps at least the latest record of every key.

Where it runs: on every replica, in the background, over its own closed segments whose
entries are all committed and durable; nothing is shipped from the leader. The Raft log
stays the Raft log: an entry keeps its index and term, its batch keeps its baseOffset and
lastOffsetDelta, and each record kept keeps its offsetDelta (and its bytes), so a
follower catching up from a cleaned segment, or receiving it whole in a snapshot, gets a
valid log with the same offsets, and consumers see gaps exactly as Kafka consumers expect.
Cleaning is deterministic: its output depends only on the input batches and the settings,
never on a clock, so replicas cleaning the same segments write the same bytes. Each
replica's own choice of when to clean only decides how far it has cleaned, not what the
result is: cleaning up to a later point removes a superset of what an earlier point
removed, whatever passes came before.

Byte for byte: a cleaned segment's log file, raft index and log index on a follower equal
the leader's once both have cleaned through it (tests/integration/test_kafka_segment_roll.py
compares them). That holds because the segments themselves agree: a segment rolls before
the same entry on every replica, by segment.bytes (the size of the entries before it)
and segment.ms (batch timestamps in the log, never a node's clock:
vdl/backends/segment/store.py `time_to_roll`), and its file name is its first entry's
index and offset. Where the segments can differ, the records still agree (the same
records at the same offsets once each replica has cleaned as far), but the files do not:
- with --segment-preallocate, a segment also rolls early when the node's spare file
  becomes ready, which is a matter of each node's timing;
- a replica that caught up from a snapshot holds the leader's files as they were sent,
  and rolls where its own appends start;
- a change of segment.bytes (taken when the partition is opened again) or segment.ms
  (taken when the metadata group's change reaches the node) starts at its own entry on
  each replica, so the segment open at the time may end at another entry on each.

Why per replica and not on the leader: the Raft log is what replication and snapshots
read, and every replica already holds it, so cleaning in place ships nothing; a leader
shipping cleaned segments would need a second transfer path beside Raft's. What the
Raft layer relies on stays put: only closed segments whose entries are all committed and
durable are cleaned (never entries a truncation could still remove), a segment being
sent in a snapshot is skipped, and each entry keeps its index, term and type.

The rules, per pass over the cleanable segments (closed, committed, and every record in
them older than min.compaction.lag.ms, KIP-58; the active segment is never cleaned, and
rolls by segment.ms, for a compacted topic by max.compaction.lag.ms if that is smaller,
as KIP-354 has it):
- The key map is the last offset of every key in the cleanable segments. A record is kept
  if it is the one at its key's last offset; a record without a key is dropped (a
  compacted topic refuses them at produce, so only a topic switched to compact has any).
- A tombstone (a record with a null value) is kept for delete.retention.ms after the
  cleaned point passes it, measured on the log's own clock (the largest batch timestamp
  of the cleaned part, so that replicas agree): once the newest batch the pass cleans is
  delete.retention.ms newer than the tombstone's batch, the tombstone goes.
- A batch that keeps all its records is left byte for byte. A batch that loses some is
  rebuilt with the records kept, their bytes as they were, compressed again with the
  batch's codec; its header keeps every field but the length, count and CRC. A batch that
  loses every record stays as an empty batch (a header, no records), as Kafka's cleaner
  keeps the last batch of a producer so that its sequence survives: here every emptied
  batch stays, because each is a Raft entry whose index cannot leave the log, and its
  offset range keeps the producer state of idempotent producers rebuilt from the headers.
- A pass runs when the part cleaned by no earlier pass is at least
  min.cleanable.dirty.ratio of the cleanable bytes, or when that part's first batch is
  older than max.compaction.lag.ms (KIP-354). With compact,delete the time and size
  retention (retention.ms, retention.bytes) removes whole segments as for delete.

Transactional batches and control batches (KIP-98's markers) are kept as they are, byte
for byte, and their keys do not enter the key map: the records of an aborted transaction
stay in the log with their marker, so the aborted-transaction index rebuilt from the log
still hides them from read_committed readers (Fetch, YDB readers), and no record is ever
removed because an aborted one superseded it. Committed transactional records are
therefore not compacted (Kafka's cleaner compacts them and drops aborted ones).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from vdl.log.batch_header import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_AT,
    BATCH_LENGTH_AT,
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    CRC_AT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    RECORD_COUNT_AT,
    compute_crc,
    read_header,
)
from vdl.log.codecs import CodecError, compress, decompress
from vdl.log.error_codes import ErrorCode
from vdl.log.record_batch import InvalidBatch

Buffer = bytes | bytearray | memoryview

LONG_MAX = 2**63 - 1
POLICY_DELETE = "delete"
POLICY_COMPACT = "compact"
# The values of cleanup.policy, in Kafka's spelling (a list; order does not matter).
CLEANUP_POLICIES = ("delete", "compact", "compact,delete", "delete,compact")


def is_compacted(policy: str) -> bool:
    """Whether cleanup.policy `policy` includes compaction."""
    return POLICY_COMPACT in (part.strip() for part in policy.split(","))


def deletes(policy: str) -> bool:
    """Whether cleanup.policy `policy` includes time and size retention."""
    return POLICY_DELETE in (part.strip() for part in policy.split(","))


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    delete_retention_ms: int = 86_400_000  # Kafka's default: one day
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX  # Kafka's default: no limit (KIP-354)


@dataclass(frozen=True, slots=True)
class RawRecord:
    offset: int
    key: bytes | None
    tombstone: bool
    start: int  # where the record (its length varint) starts in the batch's records
    end: int


def _varint(data: Buffer, pos: int, end: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            raise ValueError("truncated or overlong varint in a record")
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def _records_data(batch: Buffer) -> bytes:
    """The batch's records, decompressed."""
    info = read_header(batch)
    raw = memoryview(batch)[HEADER_SIZE : info.size]
    codec = info.attributes & COMPRESSION_MASK
    return bytes(raw) if codec == COMPRESSION_NONE else decompress(codec, raw)


def raw_records(batch: Buffer, data: bytes | None = None) -> Iterator[RawRecord]:
    """Each record of `batch` (one stored batch): offset, key, whether it is a tombstone
    and its byte span in the decompressed records `data` (decompressed here if None)."""
    info = read_header(batch)
    if data is None:
        data = _records_data(batch)
    pos, end = 0, len(data)
    for _ in range(info.record_count):
        start = pos
        length, pos = _varint(data, pos, end)
        stop = pos + length
        if length < 0 or stop > end:
            raise ValueError("a record overruns its batch")
        pos += 1  # record attributes
        _, pos = _varint(data, pos, stop)  # timestampDelta
        delta, pos = _varint(data, pos, stop)
        key_length, pos = _varint(data, pos, stop)
        key = None if key_length < 0 else bytes(data[pos : pos + key_length])
        pos += max(key_length, 0)
        value_length, pos = _varint(data, pos, stop)
        yield RawRecord(info.base_offset + delta, key, value_length < 0, start, stop)
        pos = stop


def _untouchable(batch: Buffer) -> bool:
    info = read_header(batch)
    return bool(info.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL)) or info.magic != 2


class KeyMap:
    """The last offset of every key in the part being cleaned, and the log time there."""

    def __init__(self) -> None:
        self.last: dict[bytes, int] = {}
        self.newest_ms = -1

    def add(self, batch: Buffer) -> None:
        info = read_header(batch)
        self.newest_ms = max(self.newest_ms, info.max_timestamp)
        if _untouchable(batch):
            return
        last = self.last
        for record in raw_records(batch):
            if record.key is not None:
                last[record.key] = record.offset

    def add_all(self, batches: Iterable[Buffer]) -> None:
        for batch in batches:
            self.add(batch)


def clean_batch(batch: Buffer, keys: KeyMap, delete_retention_ms: int) -> bytes | None:
    """`batch` as the cleaner leaves it, or None if it keeps every record unchanged."""
    if _untouchable(batch):
        return None
    info = read_header(batch)
    data = _records_data(batch)
    # A tombstone goes once the log's time at the cleaned point is delete.retention.ms past
    # its batch; the comparison avoids overflow with Kafka's "forever" (Long.MAX_VALUE).
    tombstones_expire = keys.newest_ms - info.max_timestamp > delete_retention_ms
    kept: list[RawRecord] = []
    total = 0
    for record in raw_records(batch, data):
        total += 1
        if record.key is None or keys.last.get(record.key, -1) != record.offset:
            continue
        if record.tombstone and tombstones_expire:
            continue
        kept.append(record)
    if len(kept) == total:
        return None
    records = b"".join(data[r.start : r.end] for r in kept)
    codec = info.attributes & COMPRESSION_MASK
    attributes = info.attributes
    if not kept:
        codec = COMPRESSION_NONE
        attributes &= ~COMPRESSION_MASK
    payload = compress(codec, records) if records else b""
    out = bytearray(batch[:HEADER_SIZE])
    out += payload
    length = len(out) - LOG_OVERHEAD  # batchLength: the bytes after the field
    out[BATCH_LENGTH_AT : BATCH_LENGTH_AT + 4] = length.to_bytes(4, "big")
    out[ATTRIBUTES_AT : ATTRIBUTES_AT + 2] = attributes.to_bytes(2, "big", signed=True)
    out[RECORD_COUNT_AT : RECORD_COUNT_AT + 4] = len(kept).to_bytes(4, "big", signed=True)
    out[CRC_AT : CRC_AT + 4] = compute_crc(out).to_bytes(4, "big")
    return bytes(out)


def check_record_keys(records: Buffer) -> None:
    """Refuse a batch for a compacted topic holding a record without a key: INVALID_RECORD
    for the batch, naming each keyless record by its index in the batch (Produce v8's
    record_errors, KIP-467), as Kafka does."""
    try:
        keyless = [n for n, record in enumerate(raw_records(records)) if record.key is None]
    except (ValueError, CodecError) as exc:
        raise InvalidBatch(ErrorCode.CORRUPT_MESSAGE, f"records cannot be read: {exc}") from None
    if keyless:
        raise InvalidBatch(
            ErrorCode.INVALID_RECORD,
            f"{len(keyless)} of the batch's records have no key: a compacted topic "
            "cannot accept a record without a key",
            [(n, f"record {n} has no key (the topic is compacted)") for n in keyless],
        )
