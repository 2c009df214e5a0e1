import struct

import crc32c as crc_pkg
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from vdl.log import batch_header as bh
from vdl.log.error_codes import ErrorCode
from vdl.log.record_batch import (
    BATCH_HEADER_SIZE,
    InvalidBatch,
    Record,
    UnsupportedCodec,
    assign_offsets,
    build_batch,
    check_record_timestamps,
    crc32c,
    iter_batches,
    iter_records,
    parse_batch_header,
    validate_produced_batch,
)

LIMIT = 1 << 20


def kp_build(records: list[Record], compression: int = 0, producer_id: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        batch_size=1 << 24,
    )
    for i, r in enumerate(records):
        builder.append(i, timestamp=r.timestamp_ms, key=r.key, value=r.value, headers=r.headers)
    return bytes(builder.build())


RECORDS = [
    Record(b"k0", b"v0", 1_700_000_000_000, []),
    Record(None, b"value" * 50, 1_700_000_000_005, [("h1", b"a"), ("h2", None)]),
    Record(b"k2", None, 1_699_999_999_990, [("ü", b"")]),  # earlier timestamp: negative delta
]


def patch(batch: bytes, fmt: str, offset: int, value: int, *, fix_crc: bool = True) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(fmt, buf, offset, value)
    if fix_crc:
        bh.write_crc(buf)
    return bytes(buf)


def code_of(batch: bytes | None, *, allow_zstd: bool = True, limit: int = LIMIT) -> int:
    with pytest.raises(InvalidBatch) as info:
        validate_produced_batch(
            None if batch is None else memoryview(batch),
            max_batch_bytes=limit,
            allow_zstd=allow_zstd,
        )
    return info.value.error_code


# --- build / parse against kafka-python ------------------------------------------


def test_crc32c_known_answer() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"x") == crc_pkg.crc32c(b"x")


def test_build_is_byte_identical_to_kafka_python() -> None:
    ours = build_batch(RECORDS, partition_leader_epoch=0)
    assert ours == kp_build(RECORDS)


def test_build_with_producer_state_parses_in_kafka_python() -> None:
    ours = build_batch(RECORDS, base_offset=10, producer_id=5, producer_epoch=2, base_sequence=7)
    kb = DefaultRecordBatch(ours)
    assert kb.validate_crc()
    assert (kb.base_offset, kb.producer_id, kb.producer_epoch, kb.base_sequence) == (10, 5, 2, 7)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kb]
    assert got == [
        (10 + i, r.timestamp_ms, r.key, r.value, r.headers) for i, r in enumerate(RECORDS)
    ]


def test_gzip_build_parses_in_kafka_python() -> None:
    recs = [Record(b"k", b"a" * 1000, 1000 + i, []) for i in range(20)]
    ours = build_batch(recs, compression=1)
    info = parse_batch_header(ours)
    assert info.compression == 1 and len(ours) < 1000
    kb = DefaultRecordBatch(ours)
    assert kb.validate_crc()
    assert [(r.offset, r.value) for r in kb] == [(i, b"a" * 1000) for i in range(20)]


def test_parse_header_matches_kafka_python() -> None:
    batch = kp_build(RECORDS, producer_id=42)
    info = parse_batch_header(batch)
    kb = DefaultRecordBatch(batch)
    assert info.base_offset == kb.base_offset
    assert info.size == len(batch)
    assert info.magic == 2
    assert info.crc == kb.crc
    assert info.record_count == 3 and info.last_offset_delta == 2
    assert info.first_timestamp == kb.first_timestamp
    assert info.max_timestamp == kb.max_timestamp
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (42, 0, 0)
    assert info.last_sequence == 2
    assert info.compression == 0 and not info.is_transactional and not info.is_control
    assert info.timestamp_type == 0


@pytest.mark.parametrize("compression", [0, 1])
def test_iter_records_of_kafka_python_batch(compression: int) -> None:
    recs = [*RECORDS, *(Record(b"x", b"y" * 200, 5, []) for _ in range(5))]
    batch = kp_build(recs, compression=compression)
    assert parse_batch_header(batch).compression == compression
    stamped = assign_offsets(batch, 100, 3)
    got = list(iter_records(stamped))
    assert [r.offset for r in got] == list(range(100, 100 + len(recs)))
    assert [(r.key, r.value, r.timestamp_ms, r.headers) for r in got] == [
        (r.key, r.value, r.timestamp_ms, r.headers) for r in recs
    ]


def test_iter_records_unsupported_codec() -> None:
    # Attribute bits 0-2 can say 5-7, which no Kafka codec is.
    batch = patch(build_batch(RECORDS), ">h", bh.ATTRIBUTES_AT, 5)
    with pytest.raises(UnsupportedCodec):
        list(iter_records(batch))
    with pytest.raises(NotImplementedError):
        build_batch(RECORDS, compression=5)


@pytest.mark.parametrize("compression", [1, 2, 3, 4])
def test_iter_records_of_every_codec(compression: int) -> None:
    recs = [Record(b"k%d" % i, b"value %d " % i * 50, 1_700_000_000_000 + i, []) for i in range(40)]
    batch = build_batch(recs, compression=compression)
    assert parse_batch_header(batch).compression == compression
    assert len(batch) < sum(len(r.value or b"") for r in recs)  # it did compress
    got = list(iter_records(assign_offsets(batch, 7, 1)))
    assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in got] == [
        (7 + i, r.key, r.value, r.timestamp_ms) for i, r in enumerate(recs)
    ]


@pytest.mark.parametrize("compression", [1, 2, 3, 4])
def test_iter_records_bounds_decompression(compression: int) -> None:
    recs = [Record(None, b"\0" * 100_000, 5, []) for _ in range(20)]
    batch = build_batch(recs, compression=compression)
    with pytest.raises(InvalidBatch) as caught:
        list(iter_records(batch, max_uncompressed_bytes=1_000_000))
    assert caught.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert len(list(iter_records(batch, max_uncompressed_bytes=3_000_000))) == 20


def test_iter_records_corrupt_body() -> None:
    # The header promises more records than the body holds.
    batch = patch(build_batch(RECORDS), ">i", bh.RECORD_COUNT_AT, 9)
    with pytest.raises(InvalidBatch):
        list(iter_records(batch))


def test_iter_batches() -> None:
    a, b = build_batch(RECORDS[:1]), build_batch(RECORDS)
    assert [bytes(x) for x in iter_batches(a + b + b[:30])] == [a, b]


# --- assign_offsets ------------------------------------------------------------------


def test_assign_offsets_keeps_crc_valid() -> None:
    batch = kp_build(RECORDS)
    out = assign_offsets(memoryview(batch), 12345, 7)
    info = parse_batch_header(out)
    assert (info.base_offset, info.partition_leader_epoch) == (12345, 7)
    assert info.crc == parse_batch_header(batch).crc  # not recomputed
    assert DefaultRecordBatch(bytes(out)).validate_crc()
    assert out[21:] == batch[21:]
    assert batch == kp_build(RECORDS)  # input untouched


def test_log_append_time_recomputes_crc() -> None:
    batch = kp_build(RECORDS)
    out = assign_offsets(batch, 0, 1, log_append_time_ms=1_800_000_000_000)
    info = parse_batch_header(out)
    assert info.timestamp_type == 1
    assert info.max_timestamp == 1_800_000_000_000
    assert info.crc != parse_batch_header(batch).crc
    assert info.crc == crc32c(memoryview(out)[21:])
    kb = DefaultRecordBatch(bytes(out))
    assert kb.validate_crc()
    # Consumers then see the append time on every record.
    assert {r.timestamp for r in kb} == {1_800_000_000_000}
    assert {r.timestamp_ms for r in iter_records(out)} == {1_800_000_000_000}
    records = MemoryRecords(bytes(out))
    assert records.next_batch() is not None


# --- validate_produced_batch: one test per rule ---------------------------------------


def test_valid_batch_passes() -> None:
    batch = kp_build(RECORDS, producer_id=3)
    info = validate_produced_batch(memoryview(batch), max_batch_bytes=LIMIT, allow_zstd=False)
    assert info.record_count == 3


def test_null_or_empty_records() -> None:
    assert code_of(None) == ErrorCode.INVALID_RECORD
    assert code_of(b"") == ErrorCode.INVALID_RECORD


def test_two_batches() -> None:
    batch = kp_build(RECORDS)
    assert code_of(batch + batch) == ErrorCode.INVALID_RECORD
    assert code_of(batch + b"\x00") == ErrorCode.INVALID_RECORD


def test_truncated_batch() -> None:
    batch = kp_build(RECORDS)
    assert code_of(batch[:-1]) == ErrorCode.CORRUPT_MESSAGE
    assert code_of(batch[:11]) == ErrorCode.CORRUPT_MESSAGE
    assert code_of(batch[:BATCH_HEADER_SIZE]) == ErrorCode.CORRUPT_MESSAGE


def test_length_too_small() -> None:
    batch = patch(kp_build(RECORDS), ">i", bh.BATCH_LENGTH_AT, 10, fix_crc=False)
    assert code_of(batch) == ErrorCode.CORRUPT_MESSAGE


def test_bad_magic() -> None:
    assert code_of(patch(kp_build(RECORDS), ">b", bh.MAGIC_AT, 1)) == ErrorCode.INVALID_RECORD


def test_bad_crc() -> None:
    batch = bytearray(kp_build(RECORDS))
    batch[-1] ^= 0xFF
    assert code_of(bytes(batch)) == ErrorCode.CORRUPT_MESSAGE


def test_nonzero_base_offset() -> None:
    assert code_of(patch(kp_build(RECORDS), ">q", bh.BASE_OFFSET_AT, 5)) == ErrorCode.INVALID_RECORD


def test_zero_count() -> None:
    batch = patch(kp_build(RECORDS), ">i", bh.RECORD_COUNT_AT, 0)
    assert code_of(batch) == ErrorCode.INVALID_RECORD


def test_last_offset_delta_mismatch() -> None:
    assert (
        code_of(patch(kp_build(RECORDS), ">i", bh.LAST_OFFSET_DELTA_AT, 5))
        == ErrorCode.INVALID_RECORD
    )


def test_control_batch_rejected() -> None:
    assert (
        code_of(patch(kp_build(RECORDS), ">h", bh.ATTRIBUTES_AT, 0x20)) == ErrorCode.INVALID_RECORD
    )


def test_transactional_without_producer_id() -> None:
    assert (
        code_of(patch(kp_build(RECORDS), ">h", bh.ATTRIBUTES_AT, 0x10)) == ErrorCode.INVALID_RECORD
    )


def test_producer_id_without_sequence() -> None:
    batch = patch(kp_build(RECORDS, producer_id=9), ">i", bh.BASE_SEQUENCE_AT, -1)
    assert code_of(batch) == ErrorCode.INVALID_RECORD


def test_unknown_codec() -> None:
    assert (
        code_of(patch(kp_build(RECORDS), ">h", bh.ATTRIBUTES_AT, 5))
        == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    )


def test_zstd_rule() -> None:
    batch = patch(kp_build(RECORDS), ">h", bh.ATTRIBUTES_AT, 4)
    assert code_of(batch, allow_zstd=False) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    validate_produced_batch(memoryview(batch), max_batch_bytes=LIMIT, allow_zstd=True)


def test_size_limit() -> None:
    batch = kp_build(RECORDS)
    assert code_of(batch, limit=len(batch) - 1) == ErrorCode.MESSAGE_TOO_LARGE
    validate_produced_batch(memoryview(batch), max_batch_bytes=len(batch), allow_zstd=False)


def test_assign_offsets_in_place_stamps_a_writable_buffer() -> None:
    frame = bytearray(b"head") + bytearray(build_batch([Record(None, b"v", 1_000, [])]))
    view = memoryview(frame)[4:]
    out = assign_offsets(view, 77, 5, in_place=True)
    assert out is view
    info = parse_batch_header(frame[4:])
    assert (info.base_offset, info.partition_leader_epoch) == (77, 5)
    readonly = memoryview(bytes(frame))[4:]
    copied = assign_offsets(readonly, 99, 5, in_place=True)
    assert copied is not readonly and parse_batch_header(copied).base_offset == 99
    assert parse_batch_header(readonly).base_offset == 77  # a shared buffer is not touched


NOW = 1_700_000_000_000


def test_record_timestamps_within_the_bounds_pass_inclusively() -> None:
    stamps = [NOW - 1000, NOW, NOW + 500, -1]  # -1: a record without a timestamp
    batch = build_batch([Record(None, b"v", ts) for ts in stamps])
    check_record_timestamps(batch, now_ms=NOW, before_max_ms=1000, after_max_ms=500)


@pytest.mark.parametrize("compression", [bh.COMPRESSION_NONE, bh.COMPRESSION_GZIP])
def test_record_timestamps_out_of_range_are_named_by_index(compression: int) -> None:
    stamps = [NOW, NOW - 1001, NOW + 10, NOW + 501, NOW - 5000]
    batch = build_batch([Record(b"k", b"v", ts) for ts in stamps], compression=compression)
    with pytest.raises(InvalidBatch) as caught:
        check_record_timestamps(batch, now_ms=NOW, before_max_ms=1000, after_max_ms=500)
    assert caught.value.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [index for index, _ in caught.value.record_errors] == [1, 3, 4]
    reason = caught.value.record_errors[1][1]
    assert str(NOW + 501) in reason and f"[{NOW - 1000}, {NOW + 500}]" in reason
    assert "3 of the batch's records" in caught.value.message


def test_a_batch_level_refusal_names_no_record() -> None:
    assert InvalidBatch(ErrorCode.CORRUPT_MESSAGE, "bad crc").record_errors == []
