"""The Kafka RecordBatch v2 header: the one definition of its layout in VDL.

A leaf module (no project imports) so storage, the log, Kafka and YDB all read the same
layout. The format is Kafka's "Record Batch" (Kafka protocol documentation, section
"Message Format" / "Record Batch"; introduced with magic 2 by KIP-98). Its 61-byte header,
big-endian:

    offset  size  field
         0     8  baseOffset            int64
         8     4  batchLength           int32  (bytes after this field)
        12     4  partitionLeaderEpoch  int32
        16     1  magic                 int8   (2)
        17     4  crc                   uint32 (CRC-32C of bytes [21, end))
        21     2  attributes            int16
        23     4  lastOffsetDelta       int32
        27     8  baseTimestamp         int64  (firstTimestamp in older documentation)
        35     8  maxTimestamp          int64
        43     8  producerId            int64
        51     2  producerEpoch         int16
        53     4  baseSequence          int32
        57     4  recordCount           int32

then the (possibly compressed) records. baseOffset, batchLength and partitionLeaderEpoch
lie before the CRC range, so a broker stamps a batch's offset and epoch without touching
its CRC; changing anything from the attributes on (as LogAppendTime does) means a new CRC.

Attributes bits (same documentation): 0-2 compression codec, 3 timestamp type
(1 = LogAppendTime, KIP-32), 4 transactional, 5 control batch (KIP-98).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c as _crc32c

__all__ = [
    "ATTRIBUTES_AT",
    "ATTR_CONTROL",
    "ATTR_TIMESTAMP_LOG_APPEND",
    "ATTR_TRANSACTIONAL",
    "BASE_OFFSET_AT",
    "BASE_SEQUENCE_AT",
    "BASE_TIMESTAMP_AT",
    "BATCH_LENGTH_AT",
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_MASK",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "CRC_AT",
    "CRC_START",
    "HEADER",
    "HEADER_SIZE",
    "LAST_OFFSET_DELTA_AT",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_AT",
    "MAX_PARTITION_LEADER_EPOCH",
    "MAX_TIMESTAMP_AT",
    "PARTITION_LEADER_EPOCH_AT",
    "PRODUCER_EPOCH_AT",
    "PRODUCER_ID_AT",
    "RECORD_COUNT_AT",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "BatchInfo",
    "attributes",
    "base_offset",
    "batch_length",
    "batch_size",
    "compute_crc",
    "crc32c",
    "crc_is_valid",
    "last_offset_delta",
    "max_timestamp",
    "offset_range",
    "read_header",
    "record_count",
    "set_base_offset",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "write_crc",
    "write_header",
]

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
MAGIC = 2

BASE_OFFSET_AT = 0
BATCH_LENGTH_AT = 8
PARTITION_LEADER_EPOCH_AT = 12
MAX_PARTITION_LEADER_EPOCH = 2**31 - 1  # an int32
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21
LAST_OFFSET_DELTA_AT = 23
BASE_TIMESTAMP_AT = 27
MAX_TIMESTAMP_AT = 35
PRODUCER_ID_AT = 43
PRODUCER_EPOCH_AT = 51
BASE_SEQUENCE_AT = 53
RECORD_COUNT_AT = 57

# batchLength counts the bytes after itself: a batch occupies batchLength + 12 bytes.
LOG_OVERHEAD = BATCH_LENGTH_AT + 4
# The CRC covers the attributes to the end of the batch.
CRC_START = ATTRIBUTES_AT

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_LOG_APPEND = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """Every field of one header, in layout order."""

    base_offset: int
    length: int  # the batchLength field; the batch occupies length + 12 bytes
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int  # baseTimestamp
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & ATTR_TIMESTAMP_LOG_APPEND else 0

    @property
    def size(self) -> int:
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """baseSequence + lastOffsetDelta, wrapping at 2^31-1 as Kafka does."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


def crc32c(data: Buffer) -> int:
    """CRC-32C (Castagnoli), hardware accelerated by the ``crc32c`` package."""
    return int(_crc32c.crc32c(data))


# --- reading --------------------------------------------------------------------
# Each reader takes the buffer and where the batch starts in it; the caller has checked
# that the header is there (struct.error otherwise).


def read_header(buf: Buffer, at: int = 0) -> BatchInfo:
    """All header fields of the batch at ``at``; no CRC or size checks."""
    return BatchInfo(*HEADER.unpack_from(buf, at))


def base_offset(buf: Buffer, at: int = 0) -> int:
    return int(_I64.unpack_from(buf, at + BASE_OFFSET_AT)[0])


def batch_length(buf: Buffer, at: int = 0) -> int:
    """The batchLength field: the bytes after it (only the first 12 bytes need be there)."""
    return int(_I32.unpack_from(buf, at + BATCH_LENGTH_AT)[0])


def batch_size(buf: Buffer, at: int = 0) -> int:
    """The bytes the batch occupies: batchLength + 12."""
    return int(_I32.unpack_from(buf, at + BATCH_LENGTH_AT)[0]) + LOG_OVERHEAD


def attributes(buf: Buffer, at: int = 0) -> int:
    return int(_I16.unpack_from(buf, at + ATTRIBUTES_AT)[0])


def last_offset_delta(buf: Buffer, at: int = 0) -> int:
    return int(_I32.unpack_from(buf, at + LAST_OFFSET_DELTA_AT)[0])


def max_timestamp(buf: Buffer, at: int = 0) -> int:
    return int(_I64.unpack_from(buf, at + MAX_TIMESTAMP_AT)[0])


def record_count(buf: Buffer, at: int = 0) -> int:
    return int(_I32.unpack_from(buf, at + RECORD_COUNT_AT)[0])


def offset_range(buf: Buffer, at: int = 0) -> tuple[int, int]:
    """(first, last) record offset: baseOffset and baseOffset + lastOffsetDelta."""
    base = int(_I64.unpack_from(buf, at + BASE_OFFSET_AT)[0])
    return base, base + int(_I32.unpack_from(buf, at + LAST_OFFSET_DELTA_AT)[0])


def compute_crc(batch: Buffer) -> int:
    """The CRC-32C of ``batch`` (exactly one batch) over [21, end), as Kafka defines it."""
    return crc32c(memoryview(batch)[CRC_START:])


def crc_is_valid(batch: Buffer) -> bool:
    """Whether the stored crc field matches the bytes of ``batch`` (exactly one batch)."""
    return int(_U32.unpack_from(batch, CRC_AT)[0]) == compute_crc(batch)


# --- writing --------------------------------------------------------------------


def set_base_offset(batch: bytearray | memoryview, value: int) -> None:
    """Stamp baseOffset; outside the CRC range, so the CRC stays valid."""
    _I64.pack_into(batch, BASE_OFFSET_AT, value)


def set_partition_leader_epoch(batch: bytearray | memoryview, value: int) -> None:
    """Stamp partitionLeaderEpoch; outside the CRC range, so the CRC stays valid."""
    _I32.pack_into(batch, PARTITION_LEADER_EPOCH_AT, value)


def write_crc(batch: bytearray | memoryview) -> None:
    """Recompute the crc field of ``batch`` (exactly one batch) after a change it covers."""
    _U32.pack_into(batch, CRC_AT, compute_crc(batch))


def set_log_append_time(batch: bytearray | memoryview, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` as its maxTimestamp (KIP-32);
    both lie in the CRC range, so the CRC is recomputed."""
    (attrs,) = _I16.unpack_from(batch, ATTRIBUTES_AT)
    _I16.pack_into(batch, ATTRIBUTES_AT, attrs | ATTR_TIMESTAMP_LOG_APPEND)
    _I64.pack_into(batch, MAX_TIMESTAMP_AT, timestamp_ms)
    write_crc(batch)


def write_header(
    batch: bytearray,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
) -> None:
    """Fill the header slot at the start of ``batch``, whose records follow it to its end:
    batchLength from its size, magic 2, then the CRC over what was written."""
    HEADER.pack_into(
        batch,
        0,
        base_offset,
        len(batch) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    write_crc(batch)
