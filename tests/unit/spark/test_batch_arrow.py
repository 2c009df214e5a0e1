"""The Spark source's bulk decoder: record batches from the project's own encoder to Arrow.

Every expected row comes from ``vdl.log.record_batch.iter_records`` (the log's own record
decoder, a separate code path); corrupt and truncated input must raise a clean
``CorruptBatchError`` (never read out of bounds or return wrong rows).
"""

from __future__ import annotations

import datetime as dt
import struct
from typing import Any

import pytest

from vdl.adapters.spark.batch_arrow import AbortedTransactions, CorruptBatchError, decode
from vdl.adapters.spark.schema import CREATE_TIME, LOG_APPEND_TIME, source_arrow
from vdl.log.batch_header import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_AT,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    HEADER_SIZE,
    read_header,
    set_log_append_time,
    write_crc,
)
from vdl.log.record_batch import Record, build_batch, iter_batches, iter_records

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
BASE_MS = 1_760_000_000_000


def records(count: int, first: int = 0) -> list[Record]:
    """Null keys, empty and null values, no/one/several headers (one with a null value)."""
    out = []
    for i in range(first, first + count):
        key = None if i % 3 == 0 else b"key-%d" % i
        value = None if i % 7 == 0 else (b"" if i % 5 == 0 else bytes([i % 256]) * (i % 40))
        choices: list[list[tuple[str, bytes | None]]] = [
            [],
            [("h", b"v%d" % i)],
            [("a", b""), ("ключ", None), ("c", b"x" * 3)],
        ]
        headers = choices[i % 3]
        out.append(Record(key, value, BASE_MS + i * 3, headers))
    return out


def expected(
    data: bytes, topic: str, partition: int, start: int, end: int, headers: bool
) -> list[dict[str, Any]]:
    rows = []
    for batch in iter_batches(data):
        info = read_header(batch)
        if info.is_control:
            continue
        kind = LOG_APPEND_TIME if info.timestamp_type else CREATE_TIME
        for rec in iter_records(batch):
            if not start <= rec.offset < end:
                continue
            stamp = info.max_timestamp if kind == LOG_APPEND_TIME else rec.timestamp_ms
            row: dict[str, Any] = {
                "key": rec.key,
                "value": rec.value,
                "topic": topic,
                "partition": partition,
                "offset": rec.offset,
                "timestamp": dt.datetime.fromtimestamp(stamp / 1000, dt.UTC),
                "timestampType": kind,
            }
            if headers:
                row["headers"] = (
                    [{"key": k, "value": v} for k, v in rec.headers] if rec.headers else None
                )
            rows.append(row)
    return rows


def decoded_rows(data: bytes, start: int, end: int, headers: bool, **kw: Any) -> list[Any]:
    out = decode(
        data,
        topic="t",
        partition=3,
        start=start,
        end=end,
        fetch_offset=start,
        include_headers=headers,
        **kw,
    )
    if out.batch is None:
        return []
    assert out.batch.schema == source_arrow(headers)
    return [
        {**row, "timestamp": row["timestamp"].astimezone(dt.UTC)} for row in out.batch.to_pylist()
    ]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("headers", [True, False])
def test_every_codec_decodes_like_the_log(codec: int, headers: bool) -> None:
    data = b"".join(
        build_batch(records(50, first), base_offset=first, compression=codec)
        for first in (0, 50, 100)
    )
    rows = decoded_rows(data, 0, 150, headers)
    assert len(rows) == 150
    assert rows == expected(data, "t", 3, 0, 150, headers)


def test_range_is_cut_exactly_and_next_offset_passes_the_last_whole_batch() -> None:
    data = b"".join(build_batch(records(10, f), base_offset=f) for f in (0, 10, 20))
    rows = decoded_rows(data, 7, 23, True)
    assert [r["offset"] for r in rows] == list(range(7, 23))
    assert rows == expected(data, "t", 3, 7, 23, True)
    # A truncated trailing batch (a Fetch response cut at max_bytes) is left for the next fetch.
    out = decode(
        data[:-5], topic="t", partition=3, start=0, end=30, fetch_offset=0, include_headers=False
    )
    assert out.batch is not None and out.batch.num_rows == 20 and out.next_offset == 20


def test_log_append_time_stamps_every_record_with_the_batch_time() -> None:
    first = bytearray(build_batch(records(5), base_offset=0))
    set_log_append_time(first, BASE_MS + 999_000)
    data = bytes(first) + build_batch(records(5, 5), base_offset=5)
    rows = decoded_rows(data, 0, 10, False)
    assert [r["timestampType"] for r in rows] == [LOG_APPEND_TIME] * 5 + [CREATE_TIME] * 5
    assert rows == expected(data, "t", 3, 0, 10, False)
    assert rows[0]["timestamp"] == dt.datetime.fromtimestamp((BASE_MS + 999_000) / 1000, dt.UTC)


def _control(offset: int, producer_id: int) -> bytes:
    """An ABORT marker: a control batch with one record (KIP-98 control record key)."""
    marker = Record(struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 0), BASE_MS)
    batch = bytearray(
        build_batch([marker], base_offset=offset, producer_id=producer_id, is_transactional=True)
    )
    struct.pack_into(">h", batch, ATTRIBUTES_AT, ATTR_TRANSACTIONAL | ATTR_CONTROL)
    write_crc(batch)
    return bytes(batch)


def test_control_batches_and_aborted_transactions_are_skipped() -> None:
    plain = build_batch(records(5), base_offset=0)
    aborted = build_batch(records(5, 5), base_offset=5, producer_id=42, is_transactional=True)
    committed = build_batch(records(5, 11), base_offset=11, producer_id=7, is_transactional=True)
    data = plain + aborted + _control(10, 42) + committed + _control(16, 7)
    # read_uncommitted: every data record, no markers.
    rows = decoded_rows(data, 0, 17, False)
    assert [r["offset"] for r in rows] == [*range(0, 10), *range(11, 16)]
    # read_committed with the response's AbortedTransactions: producer 42's data is dropped.
    state = AbortedTransactions.of([(42, 5)])
    rows = decoded_rows(data, 0, 17, False, aborted=state)
    assert [r["offset"] for r in rows] == [*range(0, 5), *range(11, 16)]
    assert not state.active  # the ABORT marker closed the transaction


def _ones(batch: bytearray) -> bytes:
    return b"\xff" * (len(batch) - HEADER_SIZE)


def _corrupt_records(mutate: Any) -> bytes:
    batch = bytearray(build_batch(records(4, 1), base_offset=0))
    mutate(batch)
    write_crc(batch)
    return bytes(batch)


@pytest.mark.parametrize(
    ("name", "mutate"),
    [
        # The first record's length varint says it runs far past the batch.
        ("record length", lambda b: b.__setitem__(HEADER_SIZE, 0x7E)),
        # A varint that never ends (continuation bit on every byte to the end).
        ("endless varint", lambda b: b.__setitem__(slice(HEADER_SIZE, None), _ones(b))),
        # The header says 9 records; the body holds 4.
        ("record count", lambda b: struct.pack_into(">i", b, 57, 9)),
        # The key length (third field after length, attributes, two deltas) is huge.
        ("key length", lambda b: b.__setitem__(HEADER_SIZE + 4, 0x7E)),
    ],
)  # fmt: skip
def test_corrupt_batches_raise_a_clean_error(name: str, mutate: Any) -> None:
    data = _corrupt_records(mutate)
    with pytest.raises(CorruptBatchError, match="partition 3"):
        decode(data, topic="t", partition=3, start=0, end=10, fetch_offset=0, include_headers=True)


def test_a_batch_shorter_than_its_header_or_not_v2_is_refused() -> None:
    short = bytearray(build_batch(records(2), base_offset=0))
    struct.pack_into(">i", short, 8, 20)
    with pytest.raises(CorruptBatchError, match="less than a batch header"):
        decode(bytes(short), topic="t", partition=3, start=0, end=5, fetch_offset=0,
               include_headers=False)  # fmt: skip
    old = bytearray(build_batch(records(2), base_offset=0))
    old[16] = 1
    with pytest.raises(CorruptBatchError, match="magic 1"):
        decode(bytes(old), topic="t", partition=3, start=0, end=5, fetch_offset=0,
               include_headers=False)  # fmt: skip


def test_corrupt_compressed_payload_is_a_clean_error() -> None:
    batch = bytearray(build_batch(records(20), base_offset=0, compression=COMPRESSION_ZSTD))
    batch[HEADER_SIZE + 8 : HEADER_SIZE + 16] = b"\x00" * 8
    with pytest.raises(CorruptBatchError, match="decompress"):
        decode(bytes(batch), topic="t", partition=3, start=0, end=30, fetch_offset=0,
               include_headers=False)  # fmt: skip


def test_every_truncation_of_a_record_body_is_refused_or_exact() -> None:
    """Cut the records at every byte and fix the batch length: a clean error each time."""
    whole = build_batch(records(6, 1), base_offset=0)
    for cut in range(HEADER_SIZE, len(whole)):
        batch = bytearray(whole[:cut])
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        with pytest.raises(CorruptBatchError):
            decode(bytes(batch), topic="t", partition=3, start=0, end=10, fetch_offset=0,
                   include_headers=True)  # fmt: skip
