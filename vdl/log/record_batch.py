"""Kafka RecordBatch v2: the one batch format VDL stores.

Protocol-neutral: the Kafka front end stores produced batches as they came
(after ``validate_produced_batch`` and ``assign_offsets``), and the YDB front
end builds batches with ``build_batch`` and reads them with ``iter_records``.

The header layout, its attribute bits and the CRC are ``batch_header``'s (re-exported
here for the callers that build, check and decode whole batches); this module adds the
records inside a batch and the rules a produced batch must follow.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, overload

from vdl.log.batch_header import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_LOG_APPEND,
    ATTR_TRANSACTIONAL,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    LOG_OVERHEAD,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchInfo,
    batch_length,
    compute_crc,
    crc32c,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    write_header,
)
from vdl.log.batch_header import HEADER_SIZE as BATCH_HEADER_SIZE
from vdl.log.codecs import (
    MAX_DECOMPRESSED_BYTES,
    CorruptPayload,
    PayloadTooLarge,
    UnknownCodec,
    compress,
    decompress,
)
from vdl.log.error_codes import ErrorCode

__all__ = [
    "ATTR_CONTROL",
    "ATTR_TIMESTAMP_LOG_APPEND",
    "ATTR_TRANSACTIONAL",
    "BATCH_HEADER_SIZE",
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "BatchInfo",
    "DecodedRecord",
    "InvalidBatch",
    "Record",
    "UnsupportedCodec",
    "assign_offsets",
    "build_batch",
    "build_control_batch",
    "check_record_timestamps",
    "control_record",
    "control_type",
    "crc32c",
    "iter_batches",
    "iter_records",
    "parse_batch_header",
    "validate_produced_batch",
]


class InvalidBatch(Exception):
    """A batch broke a format rule; ``error_code`` is the Kafka code to answer with.

    ``record_errors`` names the records that broke it, when the rule is a per-record one:
    (index of the record in its batch, message), which Produce v8 and later carry back to
    the producer (KIP-467), so that it fails exactly those records.
    """

    def __init__(
        self,
        error_code: int,
        message: str,
        record_errors: list[tuple[int, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.record_errors = record_errors or []


class UnsupportedCodec(NotImplementedError):
    """Records compressed with a codec outside Kafka's 0-4 (attributes bits 0-2 hold 5-7)."""


@dataclass(frozen=True, slots=True)
class Record:
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def parse_batch_header(buf: bytes | bytearray | memoryview) -> BatchInfo:
    """Read the 61-byte header at the start of buf (no CRC or size checks)."""
    if len(buf) < BATCH_HEADER_SIZE:
        raise InvalidBatch(ErrorCode.CORRUPT_MESSAGE, f"batch header truncated ({len(buf)} bytes)")
    return read_header(buf)


def validate_produced_batch(
    records: memoryview | bytes | None, *, max_batch_bytes: int, allow_zstd: bool
) -> BatchInfo:
    """Check one partition's produced ``records`` field (Kafka's RecordBatch format, KIP-98).

    Only the header and the CRC are examined: the CRC covers the compressed
    payload, so integrity is proven without decompressing, and per-record
    work stays off the produce path.  ``allow_zstd`` is Produce version >= 7.
    """
    if records is None or len(records) == 0:
        raise InvalidBatch(ErrorCode.INVALID_RECORD, "records must hold exactly one batch")
    total = len(records)
    if total < LOG_OVERHEAD:
        raise InvalidBatch(ErrorCode.CORRUPT_MESSAGE, f"batch framing truncated ({total} bytes)")
    length = batch_length(records)
    size = length + LOG_OVERHEAD
    if size < BATCH_HEADER_SIZE:
        raise InvalidBatch(ErrorCode.CORRUPT_MESSAGE, f"batch length {length} too small")
    if size > max_batch_bytes:
        raise InvalidBatch(
            ErrorCode.MESSAGE_TOO_LARGE, f"batch of {size} bytes exceeds {max_batch_bytes}"
        )
    if size > total:
        raise InvalidBatch(
            ErrorCode.CORRUPT_MESSAGE, f"batch claims {size} bytes, only {total} present"
        )
    if size < total:
        raise InvalidBatch(
            ErrorCode.INVALID_RECORD, "records must hold exactly one batch (extra bytes follow)"
        )
    info = read_header(records)
    if info.magic != 2:
        raise InvalidBatch(ErrorCode.INVALID_RECORD, f"magic {info.magic}, only 2 is accepted")
    actual = compute_crc(records)
    if actual != info.crc:
        raise InvalidBatch(
            ErrorCode.CORRUPT_MESSAGE, f"CRC mismatch: stored {info.crc:#010x}, got {actual:#010x}"
        )
    if info.base_offset != 0:
        raise InvalidBatch(ErrorCode.INVALID_RECORD, f"base offset {info.base_offset}, not 0")
    if info.record_count < 1:
        raise InvalidBatch(ErrorCode.INVALID_RECORD, f"record count {info.record_count}")
    if info.last_offset_delta != info.record_count - 1:
        raise InvalidBatch(
            ErrorCode.INVALID_RECORD,
            f"lastOffsetDelta {info.last_offset_delta} != count-1 ({info.record_count - 1})",
        )
    if info.is_control:
        raise InvalidBatch(ErrorCode.INVALID_RECORD, "clients may not send control batches")
    if info.is_transactional and info.producer_id < 0:
        raise InvalidBatch(ErrorCode.INVALID_RECORD, "transactional batch without producer id")
    if info.producer_id >= 0 and (info.producer_epoch < 0 or info.base_sequence < 0):
        raise InvalidBatch(
            ErrorCode.INVALID_RECORD,
            f"producer id {info.producer_id} with epoch {info.producer_epoch}, "
            f"sequence {info.base_sequence}",
        )
    codec = info.compression
    if codec > COMPRESSION_ZSTD:
        raise InvalidBatch(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown codec {codec}")
    if codec == COMPRESSION_ZSTD and not allow_zstd:
        raise InvalidBatch(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7 or later")
    return info


# A record's timestamp field when it has none (Kafka's RecordBatch.NO_TIMESTAMP).
NO_TIMESTAMP = -1


def check_record_timestamps(
    records: memoryview | bytes, *, now_ms: int, before_max_ms: int, after_max_ms: int
) -> None:
    """Refuse a CreateTime batch holding a record stamped more than ``before_max_ms`` before
    ``now_ms`` or more than ``after_max_ms`` after it (Kafka's topic configs
    message.timestamp.before.max.ms and message.timestamp.after.max.ms, KIP-937, which
    replace message.timestamp.difference.max.ms).

    Every record is checked (decompressing the batch if need be), and the refusal names each
    one out of range, by its index in the batch, with INVALID_TIMESTAMP for the batch
    (KIP-467). A record without a timestamp is not checked, as in Kafka.
    """
    low, high = now_ms - before_max_ms, now_ms + after_max_ms
    errors: list[tuple[int, str]] = []
    for index, record in enumerate(iter_records(records)):
        stamp = record.timestamp_ms
        if stamp != NO_TIMESTAMP and not low <= stamp <= high:
            errors.append(
                (
                    index,
                    f"timestamp {stamp} of record {index} is out of range: "
                    f"it must be within [{low}, {high}]",
                )
            )
    if errors:
        raise InvalidBatch(
            ErrorCode.INVALID_TIMESTAMP,
            f"{len(errors)} of the batch's records have a timestamp out of range [{low}, {high}]",
            errors,
        )


@overload
def assign_offsets(
    records: memoryview | bytes | bytearray,
    base_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None = None,
    *,
    in_place: Literal[False] = False,
) -> bytearray: ...


@overload
def assign_offsets(
    records: memoryview | bytes | bytearray,
    base_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None = None,
    *,
    in_place: bool,
) -> bytearray | memoryview: ...


def assign_offsets(
    records: memoryview | bytes | bytearray,
    base_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None = None,
    *,
    in_place: bool = False,
) -> bytearray | memoryview:
    """Return the batch stamped with its log position: a copy, or with ``in_place`` (the
    caller owns a writable ``records`` and gives it up) ``records`` itself, stamped.

    baseOffset and partitionLeaderEpoch lie outside the CRC, so the CRC is
    only recomputed when LogAppendTime changes attributes and maxTimestamp.
    """
    if len(records) < BATCH_HEADER_SIZE:
        raise InvalidBatch(ErrorCode.CORRUPT_MESSAGE, "batch shorter than its header")
    out: bytearray | memoryview
    if in_place and not isinstance(records, bytes) and not memoryview(records).readonly:
        out = records
    else:
        out = bytearray(records)
    set_base_offset(out, base_offset)
    set_partition_leader_epoch(out, leader_epoch)
    if log_append_time_ms is not None:
        set_log_append_time(out, log_append_time_ms)
    return out


# --- record encoding ------------------------------------------------------


def _put_varint(out: bytearray, value: int) -> None:
    """Zigzag varint, as every length and delta inside a v2 record uses."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _put_varint(out, -1)
    else:
        _put_varint(out, len(data))
        out += data


def _encode_record(out: bytearray, offset_delta: int, ts_delta: int, rec: Record) -> None:
    body = bytearray(b"\x00")  # record attributes: unused, always 0
    _put_varint(body, ts_delta)
    _put_varint(body, offset_delta)
    _put_bytes(body, rec.key)
    _put_bytes(body, rec.value)
    _put_varint(body, len(rec.headers))
    for hkey, hvalue in rec.headers:
        _put_bytes(body, hkey.encode("utf-8"))
        _put_bytes(body, hvalue)
    _put_varint(out, len(body))
    out += body


def build_batch(
    records: list[Record],
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = COMPRESSION_NONE,
    *,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """Encode records as one CreateTime batch, compressed with any Kafka codec."""
    if not records:
        raise ValueError("a batch needs at least one record")
    first_ts = records[0].timestamp_ms
    max_ts = max(r.timestamp_ms for r in records)
    body = bytearray()
    for i, rec in enumerate(records):
        _encode_record(body, i, rec.timestamp_ms - first_ts, rec)
    try:
        payload = body if compression == COMPRESSION_NONE else compress(compression, body)
    except UnknownCodec as exc:
        raise UnsupportedCodec(str(exc)) from None
    attributes = compression | (ATTR_TRANSACTIONAL if is_transactional else 0)
    attributes |= ATTR_CONTROL if is_control else 0
    out = bytearray(BATCH_HEADER_SIZE)
    out += payload
    write_header(
        out,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=len(records) - 1,
        base_timestamp=first_ts,
        max_timestamp=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=len(records),
    )
    return bytes(out)


# --- control records (KIP-98) ----------------------------------------------
# A transaction marker is a control batch (attributes: transactional + control) holding one
# control record, as the Kafka protocol guide's "Control Batches" defines it: key =
# version int16 (0) + type int16 (0 abort, 1 commit); value = version int16 (0) +
# coordinator epoch int32. The batch carries the producer's id and epoch in its header and
# no sequence (-1).

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def build_control_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int
) -> bytes:
    """One commit or abort marker of `producer_id`'s transaction, at base offset 0."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [Record(key, value, timestamp_ms)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def control_record(batch: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """(type, coordinator epoch) of a control batch's record: the type CONTROL_ABORT,
    CONTROL_COMMIT or another Kafka control type, the epoch -1 if the value holds none.
    None for a data batch or a control record without a key."""
    info = parse_batch_header(batch)
    if not info.is_control:
        return None
    for record in iter_records(batch):
        if record.key is None or len(record.key) < _CONTROL_KEY.size:
            return None
        kind = int(_CONTROL_KEY.unpack_from(record.key)[1])
        value = record.value
        if value is None or len(value) < _CONTROL_VALUE.size:
            return kind, -1
        return kind, int(_CONTROL_VALUE.unpack_from(value)[1])
    return None


def control_type(batch: bytes | bytearray | memoryview) -> int | None:
    """The type of a control batch's record (see control_record), or None."""
    found = control_record(batch)
    return None if found is None else found[0]


# --- record decoding ------------------------------------------------------


def _corrupt(msg: str) -> InvalidBatch:
    return InvalidBatch(ErrorCode.CORRUPT_MESSAGE, msg)


def _get_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    while True:
        if pos >= end:
            raise _corrupt("truncated varint in record")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise _corrupt("varint too long in record")
    return (raw >> 1) ^ -(raw & 1), pos


def _get_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = _get_varint(buf, pos, end)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise _corrupt("record field overruns its record")
    return buf[pos : pos + n], pos + n


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[memoryview]:
    """Split concatenated batches; a truncated trailing batch is dropped, as clients do."""
    view = memoryview(buf)
    pos = 0
    end = len(view)
    while pos + LOG_OVERHEAD <= end:
        length = batch_length(view, pos)
        size = length + LOG_OVERHEAD
        if size < BATCH_HEADER_SIZE:
            raise _corrupt(f"batch length {length} too small")
        if pos + size > end:
            return
        yield view[pos : pos + size]
        pos += size


def iter_records(
    batch: bytes | bytearray | memoryview,
    *,
    max_uncompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
) -> Iterator[DecodedRecord]:
    """Decode the records of one batch, whatever its Kafka codec (see ``codecs``).

    ``max_uncompressed_bytes`` bounds decompression, so a small batch cannot expand without
    limit in memory: beyond it the batch is an InvalidBatch (MESSAGE_TOO_LARGE).
    """
    info = parse_batch_header(batch)
    if info.magic != 2:
        raise InvalidBatch(ErrorCode.INVALID_RECORD, f"magic {info.magic}")
    size = info.size
    if size > len(batch) or size < BATCH_HEADER_SIZE:
        raise _corrupt("batch truncated")
    raw = memoryview(batch)[BATCH_HEADER_SIZE:size]
    codec = info.compression
    data: bytes
    if codec == COMPRESSION_NONE:
        data = bytes(raw)
    else:
        try:
            data = decompress(codec, raw, max_uncompressed_bytes)
        except UnknownCodec as exc:
            raise UnsupportedCodec(str(exc)) from None
        except PayloadTooLarge as exc:
            raise InvalidBatch(ErrorCode.MESSAGE_TOO_LARGE, str(exc)) from None
        except CorruptPayload as exc:
            raise _corrupt(str(exc)) from None
    log_append = info.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    pos = 0
    end = len(data)
    for _ in range(info.record_count):
        length, pos = _get_varint(data, pos, end)
        rec_end = pos + length
        if length < 0 or rec_end > end:
            raise _corrupt("record overruns its batch")
        pos += 1  # record attributes, unused
        ts_delta, pos = _get_varint(data, pos, rec_end)
        off_delta, pos = _get_varint(data, pos, rec_end)
        key, pos = _get_bytes(data, pos, rec_end)
        value, pos = _get_bytes(data, pos, rec_end)
        n_headers, pos = _get_varint(data, pos, rec_end)
        if n_headers < 0:
            raise _corrupt("negative header count")
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(n_headers):
            hkey, pos = _get_bytes(data, pos, rec_end)
            hvalue, pos = _get_bytes(data, pos, rec_end)
            if hkey is None:
                raise _corrupt("null header key")
            headers.append((hkey.decode("utf-8", errors="replace"), hvalue))
        if pos != rec_end:
            raise _corrupt("record length disagrees with its fields")
        yield DecodedRecord(
            offset=info.base_offset + off_delta,
            timestamp_ms=info.max_timestamp if log_append else info.first_timestamp + ts_delta,
            key=key,
            value=value,
            headers=headers,
        )
