"""Kafka record batches (the bytes of a Fetch response) to Arrow columns, in bulk.

A Fetch response carries each partition's RecordBatch v2 bytes exactly as the log stores
them (Kafka protocol guide, "Record Batch" and "Record"). This module turns them into the
source's Arrow columns without a Python object per record:

1. Python walks the batches: one 61-byte header each (``vdl.log.batch_header``), skipping
   control batches (attributes bit 5, KIP-98) and, for ``read_committed``, the data of
   aborted transactions (the Fetch response's ``AbortedTransactions``, as Kafka's consumer
   filters them), and decompressing compressed records with ``vdl.log.codecs``.
2. A compiled loop walks the records of all kept batches twice: first to validate every
   varint and length against the buffer and count rows and bytes, then to fill preallocated
   numpy arrays (offsets, timestamps, Arrow offsets and validity of keys, values and
   headers) and copy key, value and header bytes into contiguous data buffers.
3. ``pa.Array.from_buffers`` wraps those arrays as Arrow arrays without copying them again.

Why numba: the per-record work is a few dozen byte reads, so any per-record Python (an object,
a call, a loop iteration) costs more than the whole rest of the read (about 1.7 us a row was
the confluent-kafka path, almost all of it Python). ``@njit(cache=True)`` compiles the loop
with LLVM once per machine and caches it beside the module, ships as wheels for Linux and
macOS (no C compiler at install, so the two-command install keeps working), and keeps the
decoder in Python that mypy and the tests see, instead of a C extension to build.

Corrupt input never reads out of bounds: every length is checked against the enclosing
record, batch and buffer first, and a bad one raises ``CorruptBatchError`` naming the offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from numba import njit

from vdl.adapters.spark.schema import (
    CREATE_TIME,
    HEADER_TYPE,
    LOG_APPEND_TIME,
    source_arrow,
)
from vdl.log import codecs
from vdl.log.batch_header import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_LOG_APPEND,
    ATTR_TRANSACTIONAL,
    COMPRESSION_MASK,
    COMPRESSION_NONE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchInfo,
    batch_size,
    read_header,
)

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

# What the compiled walk reports, in its ``counts`` array.
_ERROR, _ERROR_AT, _ROWS, _KEY_BYTES, _VALUE_BYTES, _HEADERS, _HKEY_BYTES, _HVALUE_BYTES = range(8)
_ERRORS = {
    1: "a varint runs past its record",
    2: "a record length is negative or runs past its batch",
    3: "a key, value or header length is invalid or runs past its record",
    4: "a record's fields do not end where its length says",
    5: "the batch holds a different number of records than its header says",
}


class CorruptBatchError(ValueError):
    """Record batch bytes that do not follow the RecordBatch v2 format."""


class _Batches(NamedTuple):
    """The kept batches of one Fetch response, as the compiled walk reads them: their
    records' bytes and, one entry per batch, where its records lie in ``buf`` and what its
    header says. A named tuple of arrays, which numba takes as it is."""

    buf: U8
    begin: I64  # where the batch's records start in ``buf``
    end: I64  # and end
    records: I64  # the record count in its header
    base_offset: I64
    base_ts: I64  # its first timestamp
    append_ts: I64  # its max timestamp if LogAppendTime, else -1


@njit(cache=True)
def _varint(buf: U8, pos: int, limit: int, max_bytes: int) -> tuple[int, int]:
    """A zigzag varint at ``pos`` (Protocol Buffers encoding); position -1 when malformed."""
    raw = np.uint64(0)
    shift = 0
    for _ in range(max_bytes):
        if pos >= limit:
            return 0, -1
        byte = buf[pos]
        pos += 1
        raw |= np.uint64(byte & 0x7F) << np.uint64(shift)
        if byte < 0x80:
            value = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
            return int(value), pos
        shift += 7
    return 0, -1


@njit(cache=True)
def _walk(
    batches: _Batches,
    start: int,
    end: int,
    with_headers: bool,
    fill: bool,
    counts: I64,
    offsets: I64,
    stamps: I64,
    key_offsets: I32,
    key_valid: U8,
    key_data: U8,
    value_offsets: I32,
    value_valid: U8,
    value_data: U8,
    header_offsets: I32,
    header_valid: U8,
    hkey_offsets: I32,
    hkey_data: U8,
    hvalue_offsets: I32,
    hvalue_valid: U8,
    hvalue_data: U8,
) -> None:
    buf, batch_from, batch_to, batch_records, batch_base_offset, batch_base_ts, batch_append_ts = (
        batches
    )
    row = 0
    kbytes = 0
    vbytes = 0
    nheaders = 0
    hkbytes = 0
    hvbytes = 0
    if fill:
        key_offsets[0] = 0
        value_offsets[0] = 0
        header_offsets[0] = 0
        hkey_offsets[0] = 0
        hvalue_offsets[0] = 0
    for b in range(batch_from.shape[0]):
        pos = batch_from[b]
        limit = batch_to[b]
        seen = 0
        while pos < limit:
            length, pos = _varint(buf, pos, limit, 5)
            if pos < 0:
                counts[_ERROR] = 1
                counts[_ERROR_AT] = batch_base_offset[b] + seen
                return
            if length < 0 or pos + length > limit:
                counts[_ERROR] = 2
                counts[_ERROR_AT] = batch_base_offset[b] + seen
                return
            rec_end = pos + length
            pos += 1  # attributes (unused)
            ts_delta, pos = _varint(buf, pos, rec_end, 10)
            if pos < 0:
                counts[_ERROR] = 1
                counts[_ERROR_AT] = batch_base_offset[b] + seen
                return
            offset_delta, pos = _varint(buf, pos, rec_end, 5)
            if pos < 0:
                counts[_ERROR] = 1
                counts[_ERROR_AT] = batch_base_offset[b] + seen
                return
            offset = batch_base_offset[b] + offset_delta
            bad = 0
            klen, pos = _varint(buf, pos, rec_end, 5)
            kat = pos
            if pos < 0 or klen < -1 or pos + max(klen, 0) > rec_end:
                bad = 1
            else:
                pos += max(klen, 0)
                vlen, pos = _varint(buf, pos, rec_end, 5)
                vat = pos
                if pos < 0 or vlen < -1 or pos + max(vlen, 0) > rec_end:
                    bad = 1
                else:
                    pos += max(vlen, 0)
                    hcount, pos = _varint(buf, pos, rec_end, 5)
                    if pos < 0 or hcount < 0 or hcount > rec_end - pos:
                        bad = 1
            if bad:
                counts[_ERROR] = 3
                counts[_ERROR_AT] = offset
                return
            keep = offset >= start and offset < end
            if keep and fill:
                offsets[row] = offset
                if batch_append_ts[b] >= 0:
                    stamps[row] = batch_append_ts[b] * 1000
                else:
                    stamps[row] = (batch_base_ts[b] + ts_delta) * 1000
                if klen >= 0:
                    key_data[kbytes : kbytes + klen] = buf[kat : kat + klen]
                    key_valid[row] = 1
                else:
                    key_valid[row] = 0
                key_offsets[row + 1] = kbytes + max(klen, 0)
                if vlen >= 0:
                    value_data[vbytes : vbytes + vlen] = buf[vat : vat + vlen]
                    value_valid[row] = 1
                else:
                    value_valid[row] = 0
                value_offsets[row + 1] = vbytes + max(vlen, 0)
            for _ in range(hcount):
                hklen, pos = _varint(buf, pos, rec_end, 5)
                hkat = pos
                if pos < 0 or hklen < 0 or pos + hklen > rec_end:
                    bad = 1
                    break
                pos += hklen
                hvlen, pos = _varint(buf, pos, rec_end, 5)
                hvat = pos
                if pos < 0 or hvlen < -1 or pos + max(hvlen, 0) > rec_end:
                    bad = 1
                    break
                pos += max(hvlen, 0)
                if keep and with_headers:
                    if fill:
                        hkey_data[hkbytes : hkbytes + hklen] = buf[hkat : hkat + hklen]
                        hkey_offsets[nheaders + 1] = hkbytes + hklen
                        if hvlen >= 0:
                            hvalue_data[hvbytes : hvbytes + hvlen] = buf[hvat : hvat + hvlen]
                            hvalue_valid[nheaders] = 1
                        else:
                            hvalue_valid[nheaders] = 0
                        hvalue_offsets[nheaders + 1] = hvbytes + max(hvlen, 0)
                    nheaders += 1
                    hkbytes += hklen
                    hvbytes += max(hvlen, 0)
            if bad:
                counts[_ERROR] = 3
                counts[_ERROR_AT] = offset
                return
            if pos != rec_end:
                counts[_ERROR] = 4
                counts[_ERROR_AT] = offset
                return
            if keep:
                if fill and with_headers:
                    header_offsets[row + 1] = nheaders
                    header_valid[row] = 1 if hcount > 0 else 0
                kbytes += max(klen, 0)
                vbytes += max(vlen, 0)
                row += 1
            seen += 1
        if seen != batch_records[b]:
            counts[_ERROR] = 5
            counts[_ERROR_AT] = batch_base_offset[b]
            return
    counts[_ROWS] = row
    counts[_KEY_BYTES] = kbytes
    counts[_VALUE_BYTES] = vbytes
    counts[_HEADERS] = nheaders
    counts[_HKEY_BYTES] = hkbytes
    counts[_HVALUE_BYTES] = hvbytes


@dataclass
class AbortedTransactions:
    """``read_committed`` filtering of one Fetch response's records (KIP-98).

    The response lists (producerId, firstOffset) of the aborted transactions its records
    overlap; a transactional batch of a producer whose aborted transaction began at or before
    the batch is dropped, until that producer's ABORT control batch ends it. One per
    response, as Kafka's consumer does: each response lists every aborted transaction its
    range overlaps, including those begun before it.
    """

    pending: list[tuple[int, int]] = field(default_factory=list)  # (first offset, producer)
    active: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, aborted: Sequence[tuple[int, int]]) -> AbortedTransactions:
        """From a response's (producer id, first offset) pairs."""
        return cls(sorted((first, pid) for pid, first in aborted))


@dataclass
class Decoded:
    """One Fetch response's records in ``[start, end)`` and where the next fetch begins."""

    batch: pa.RecordBatch | None
    next_offset: int  # past the last complete batch seen (kept or skipped)


def _empty_u8() -> U8:
    return np.zeros(0, np.uint8)


def _empty_i32() -> I32:
    return np.zeros(0, np.int32)


def _bitmap(valid: U8, rows: int) -> tuple[pa.Buffer | None, int]:
    """An Arrow validity bitmap (LSB first) and null count; no bitmap when nothing is null."""
    nulls = rows - int(np.count_nonzero(valid[:rows]))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid[:rows], bitorder="little")), nulls


def _binary(kind: pa.DataType, offsets: I32, valid: U8, data: U8, rows: int, size: int) -> pa.Array:
    bitmap, nulls = _bitmap(valid, rows)
    return pa.Array.from_buffers(
        kind,
        rows,
        [bitmap, pa.py_buffer(offsets[: rows + 1]), pa.py_buffer(data[:size])],
        null_count=nulls,
    )


def decode(
    records: bytes | bytearray | memoryview,
    *,
    topic: str,
    partition: int,
    start: int,
    end: int,
    fetch_offset: int,
    include_headers: bool,
    aborted: AbortedTransactions | None = None,
) -> Decoded:
    """The records at ``start <= offset < end`` in ``records`` (whole batches, then perhaps
    a truncated one, as a Fetch response may end), as one Arrow batch of the source schema.

    ``aborted`` filters aborted transactional data (``read_committed``); None reads it all.
    """
    view = memoryview(records).cast("B")
    total = len(view)
    next_offset = fetch_offset
    base_offsets: list[int] = []
    base_stamps: list[int] = []
    append_stamps: list[int] = []
    record_counts: list[int] = []
    spans: list[tuple[int, int]] = []  # each kept batch's records, in ``records``
    parts: list[memoryview | bytes] = []  # and as bytes (decompressed where compressed)
    copied = False
    at = 0
    while at + LOG_OVERHEAD <= total:
        size = batch_size(view, at)
        if size < HEADER_SIZE:
            raise CorruptBatchError(
                f'"{topic}" partition {partition}: the batch at byte {at} of a Fetch response '
                f"declares {size} bytes, less than a batch header"
            )
        if at + size > total:
            break  # a truncated last batch: the next fetch starts at it
        info = read_header(view, at)
        if info.magic != MAGIC:
            raise CorruptBatchError(
                f'"{topic}" partition {partition}: the batch at offset {info.base_offset} has '
                f"magic {info.magic}; only RecordBatch v2 (magic 2) is read"
            )
        if info.record_count < 0 or info.last_offset_delta < 0:
            raise CorruptBatchError(
                f'"{topic}" partition {partition}: the batch at offset {info.base_offset} '
                "has a negative record count or last offset delta"
            )
        body = view[at + HEADER_SIZE : at + size]
        at += size
        if info.next_offset <= next_offset:
            continue  # wholly before the fetch position or a batch already read
        next_offset = max(next_offset, info.next_offset)
        if info.next_offset <= start or info.base_offset >= end:
            continue
        if aborted is not None and _drop(info, aborted):
            continue
        if info.attributes & ATTR_CONTROL:
            continue
        codec = info.attributes & COMPRESSION_MASK
        payload: memoryview | bytes = body
        if codec != COMPRESSION_NONE:
            try:
                payload = codecs.decompress(codec, body)
            except codecs.CodecError as exc:
                raise CorruptBatchError(
                    f'"{topic}" partition {partition}: the batch at offset {info.base_offset} '
                    f"does not decompress: {exc}"
                ) from None
            copied = True
        parts.append(payload)
        spans.append((at - size + HEADER_SIZE, at))
        base_offsets.append(info.base_offset)
        base_stamps.append(info.first_timestamp)
        append_stamps.append(
            info.max_timestamp if info.attributes & ATTR_TIMESTAMP_LOG_APPEND else -1
        )
        record_counts.append(info.record_count)
    if not parts:
        return Decoded(None, next_offset)
    if copied:
        # Some batches were decompressed: lay all kept records side by side in one buffer.
        buf = np.frombuffer(b"".join(parts), np.uint8)
        ends = np.cumsum([len(part) for part in parts], dtype=np.int64)
        spans = list(zip((ends - [len(p) for p in parts]).tolist(), ends.tolist(), strict=True))
    else:
        buf = np.frombuffer(view, np.uint8)  # the records as fetched, no copy
    batches = _Batches(
        buf,
        np.array([s for s, _ in spans], np.int64),
        np.array([e for _, e in spans], np.int64),
        np.array(record_counts, np.int64),
        np.array(base_offsets, np.int64),
        np.array(base_stamps, np.int64),
        np.array(append_stamps, np.int64),
    )
    return Decoded(
        _to_arrow(
            batches,
            topic=topic,
            partition=partition,
            start=max(start, fetch_offset),
            end=end,
            include_headers=include_headers,
        ),
        next_offset,
    )


def _drop(info: BatchInfo, aborted: AbortedTransactions) -> bool:
    """Whether ``read_committed`` drops this batch; also tracks the aborted transactions."""
    attributes, producer_id = info.attributes, info.producer_id
    while aborted.pending and aborted.pending[0][0] <= info.last_offset:
        aborted.active.add(aborted.pending.pop(0)[1])
    if not attributes & ATTR_TRANSACTIONAL or producer_id not in aborted.active:
        return False
    if attributes & ATTR_CONTROL:
        aborted.active.discard(producer_id)  # the ABORT marker ends the transaction
    return True


def _to_arrow(
    batches: _Batches,
    *,
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
) -> pa.RecordBatch | None:
    def walk(counts: I64, fill: bool, *outputs: Any) -> None:
        _walk(batches, start, end, include_headers, fill, counts, *outputs)
        if counts[_ERROR]:
            raise CorruptBatchError(
                f'"{topic}" partition {partition}: corrupt record batch near offset '
                f"{int(counts[_ERROR_AT])}: {_ERRORS[int(counts[_ERROR])]}"
            )

    counts = np.zeros(8, np.int64)
    none8, none32, none64 = _empty_u8(), _empty_i32(), np.zeros(0, np.int64)
    walk(counts, False, none64, none64, *([none32, none8, none8] * 2), none32, none8,
         none32, none8, none32, none8, none8)  # fmt: skip
    rows = int(counts[_ROWS])
    if rows == 0:
        return None
    heads = int(counts[_HEADERS]) if include_headers else 0
    offsets = np.empty(rows, np.int64)
    stamps = np.empty(rows, np.int64)
    key_offsets, value_offsets = np.empty(rows + 1, np.int32), np.empty(rows + 1, np.int32)
    key_valid, value_valid = np.empty(rows, np.uint8), np.empty(rows, np.uint8)
    key_data = np.empty(int(counts[_KEY_BYTES]), np.uint8)
    value_data = np.empty(int(counts[_VALUE_BYTES]), np.uint8)
    h_rows = rows if include_headers else 0
    header_offsets, header_valid = np.empty(h_rows + 1, np.int32), np.empty(h_rows, np.uint8)
    hkey_offsets, hvalue_offsets = np.empty(heads + 1, np.int32), np.empty(heads + 1, np.int32)
    hvalue_valid = np.empty(heads, np.uint8)
    hkey_data = np.empty(int(counts[_HKEY_BYTES]), np.uint8)
    hvalue_data = np.empty(int(counts[_HVALUE_BYTES]), np.uint8)
    filled = np.zeros(8, np.int64)
    walk(filled, True, offsets, stamps, key_offsets, key_valid, key_data, value_offsets,
         value_valid, value_data, header_offsets, header_valid, hkey_offsets, hkey_data,
         hvalue_offsets, hvalue_valid, hvalue_data)  # fmt: skip
    batch_append_ts = batches.append_ts
    kind = LOG_APPEND_TIME if batch_append_ts[0] >= 0 else CREATE_TIME
    if bool(np.all((batch_append_ts >= 0) == (kind == LOG_APPEND_TIME))):
        types = pa.array(np.full(rows, kind, np.int32))
    else:
        per_batch = np.where(batch_append_ts >= 0, LOG_APPEND_TIME, CREATE_TIME).astype(np.int32)
        types = pa.array(_per_row(per_batch, batches.base_offset, offsets))
    columns = [
        _binary(pa.binary(), key_offsets, key_valid, key_data, rows, int(counts[_KEY_BYTES])),
        _binary(
            pa.binary(), value_offsets, value_valid, value_data, rows, int(counts[_VALUE_BYTES])
        ),
        pa.array([topic], pa.string()).take(pa.array(np.zeros(rows, np.int32))),
        pa.array(np.full(rows, partition, np.int32)),
        pa.array(offsets),
        pa.array(stamps).cast(pa.timestamp("us", tz="UTC")),
        types,
    ]
    if include_headers:
        hkeys = pa.Array.from_buffers(
            pa.string(),
            heads,
            [None, pa.py_buffer(hkey_offsets), pa.py_buffer(hkey_data)],
            null_count=0,
        )
        try:
            hkeys.validate(full=True)  # header keys are UTF-8 strings (Kafka protocol guide)
        except pa.ArrowInvalid:
            raise CorruptBatchError(
                f'"{topic}" partition {partition}: a header key is not valid UTF-8'
            ) from None
        hvalues = _binary(
            pa.binary(), hvalue_offsets, hvalue_valid, hvalue_data, heads,
            int(counts[_HVALUE_BYTES]),
        )  # fmt: skip
        structs = pa.StructArray.from_arrays([hkeys, hvalues], fields=list(HEADER_TYPE.value_type))
        bitmap, nulls = _bitmap(header_valid, rows)
        columns.append(
            pa.Array.from_buffers(
                HEADER_TYPE,
                rows,
                [bitmap, pa.py_buffer(header_offsets)],
                null_count=nulls,
                children=[structs],
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=source_arrow(include_headers))


def _per_row(per_batch: I32, base: I64, offsets: I64) -> I32:
    """Each row's batch value, by the batch whose offset range holds the row's offset."""
    index = np.searchsorted(base, offsets, side="right") - 1
    return per_batch[index]
