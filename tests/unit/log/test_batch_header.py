"""The RecordBatch v2 header module, checked against kafka-python's own reader of the format
(an independent implementation of the Kafka protocol documentation's "Record Batch")."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from vdl.log import batch_header as bh

# One value per field, each distinct and most of them at or near the edge of their type,
# so a field read from the wrong place or with the wrong width shows.
FIELDS = {
    "base_offset": 2**40 + 7,
    "partition_leader_epoch": 2**31 - 3,
    "attributes": bh.COMPRESSION_GZIP | bh.ATTR_TRANSACTIONAL,
    "last_offset_delta": 4,
    "base_timestamp": 1_700_000_000_123,
    "max_timestamp": 1_700_000_000_456,
    "producer_id": 2**62 + 11,
    "producer_epoch": 2**15 - 2,
    "base_sequence": 2**31 - 5,
    "record_count": 5,
}
RECORDS = b"records go here, the CRC covers them"


def sealed(records: bytes = RECORDS, **overrides: int) -> bytearray:
    batch = bytearray(bh.HEADER_SIZE) + records
    bh.write_header(batch, **{**FIELDS, **overrides})
    return batch


def kafka_batch(base_offset: int = 0) -> bytearray:
    """A real batch of three records as a Kafka client builds it."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=99,
        producer_epoch=3,
        base_sequence=40,
        batch_size=1 << 20,
    )
    for n in range(3):
        builder.append(n, timestamp=1_000 + n, key=None, value=b"v%d" % n, headers=[])
    batch = builder.build()
    batch[0:8] = base_offset.to_bytes(8, "big", signed=True)
    return batch


def test_offsets_and_sizes_are_those_of_the_struct() -> None:
    fmt = bh.HEADER.format
    starts = [struct.calcsize(fmt[: i + 1]) for i in range(len(fmt) - 1)]
    assert starts == [
        bh.BASE_OFFSET_AT,
        bh.BATCH_LENGTH_AT,
        bh.PARTITION_LEADER_EPOCH_AT,
        bh.MAGIC_AT,
        bh.CRC_AT,
        bh.ATTRIBUTES_AT,
        bh.LAST_OFFSET_DELTA_AT,
        bh.BASE_TIMESTAMP_AT,
        bh.MAX_TIMESTAMP_AT,
        bh.PRODUCER_ID_AT,
        bh.PRODUCER_EPOCH_AT,
        bh.BASE_SEQUENCE_AT,
        bh.RECORD_COUNT_AT,
    ]
    assert (bh.HEADER_SIZE, bh.LOG_OVERHEAD, bh.CRC_START) == (61, 12, 21)
    assert fmt == ">qiibIhiqqqhii"


def test_every_field_round_trips_through_write_and_read() -> None:
    batch = sealed()
    info = bh.read_header(batch)
    assert info.base_offset == FIELDS["base_offset"]
    assert info.length == len(batch) - 12
    assert info.partition_leader_epoch == FIELDS["partition_leader_epoch"]
    assert info.magic == 2
    assert info.crc == bh.compute_crc(batch)
    assert info.attributes == FIELDS["attributes"]
    assert info.last_offset_delta == FIELDS["last_offset_delta"]
    assert info.first_timestamp == FIELDS["base_timestamp"]
    assert info.max_timestamp == FIELDS["max_timestamp"]
    assert info.producer_id == FIELDS["producer_id"]
    assert info.producer_epoch == FIELDS["producer_epoch"]
    assert info.base_sequence == FIELDS["base_sequence"]
    assert info.record_count == FIELDS["record_count"]
    assert info.size == len(batch)
    assert (info.compression, info.is_transactional, info.is_control) == (1, True, False)
    assert info.next_offset == FIELDS["base_offset"] + 5
    # The single-field readers agree with the whole-header read.
    assert bh.base_offset(batch) == info.base_offset
    assert bh.batch_length(batch) == info.length
    assert bh.batch_size(batch) == len(batch)
    assert bh.attributes(batch) == info.attributes
    assert bh.last_offset_delta(batch) == info.last_offset_delta
    assert bh.max_timestamp(batch) == info.max_timestamp
    assert bh.record_count(batch) == info.record_count
    assert bh.offset_range(batch) == (info.base_offset, info.last_offset)
    assert batch[bh.CRC_START :] == batch[21:] and batch[bh.HEADER_SIZE :] == RECORDS


def test_negative_fields_round_trip() -> None:
    batch = sealed(partition_leader_epoch=-1, producer_id=-1, producer_epoch=-1, base_sequence=-1)
    info = bh.read_header(batch)
    assert (info.partition_leader_epoch, info.producer_id) == (-1, -1)
    assert (info.producer_epoch, info.base_sequence, info.last_sequence) == (-1, -1, -1)


def test_a_written_header_reads_the_same_in_kafka_python() -> None:
    batch = sealed()
    theirs = DefaultRecordBatch(bytes(batch))
    assert theirs.validate_crc()
    assert theirs.base_offset == FIELDS["base_offset"]
    assert theirs.leader_epoch == FIELDS["partition_leader_epoch"]
    assert theirs.magic == 2
    assert theirs.attributes == FIELDS["attributes"]
    assert theirs.last_offset_delta == FIELDS["last_offset_delta"]
    assert theirs.first_timestamp == FIELDS["base_timestamp"]
    assert theirs.max_timestamp == FIELDS["max_timestamp"]
    assert theirs.producer_id == FIELDS["producer_id"]
    assert theirs.producer_epoch == FIELDS["producer_epoch"]
    assert theirs.base_sequence == FIELDS["base_sequence"]
    assert theirs.records_count == FIELDS["record_count"]
    assert theirs.size_in_bytes == len(batch)


def test_a_kafka_python_batch_reads_the_same_here() -> None:
    batch = kafka_batch(base_offset=500)
    theirs = DefaultRecordBatch(bytes(batch))
    info = bh.read_header(batch)
    assert bh.crc_is_valid(batch)
    assert info.crc == theirs.crc
    assert info.size == theirs.size_in_bytes == len(batch)
    assert (info.base_offset, info.last_offset_delta, info.record_count) == (500, 2, 3)
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (99, 3, 40)
    assert (info.first_timestamp, info.max_timestamp) == (1_000, 1_002)


@pytest.mark.parametrize("make", [sealed, kafka_batch], ids=["ours", "kafka-python"])
def test_stamping_offset_and_epoch_leaves_the_crc_valid(make: Callable[[], bytearray]) -> None:
    batch = make()
    before = bytes(batch)
    bh.set_base_offset(batch, 123_456_789_012)
    bh.set_partition_leader_epoch(batch, 77)
    assert bh.base_offset(batch) == 123_456_789_012
    assert bh.read_header(batch).partition_leader_epoch == 77
    # Only bytes before the CRC range changed, so the stored CRC still matches.
    assert batch[bh.CRC_AT :] == before[bh.CRC_AT :]
    assert bh.crc_is_valid(batch)
    assert DefaultRecordBatch(bytes(batch)).validate_crc()


def test_stamping_through_a_memoryview_writes_the_buffer_under_it() -> None:
    buf = bytearray(7) + sealed()
    view = memoryview(buf)[7:]
    bh.set_base_offset(view, 9)
    bh.set_partition_leader_epoch(view, 4)
    assert bh.base_offset(buf, 7) == 9
    assert bh.read_header(buf, 7).partition_leader_epoch == 4
    assert bh.crc_is_valid(view)


def test_a_change_inside_the_crc_range_is_caught_until_the_crc_is_rewritten() -> None:
    batch = sealed()
    batch[bh.LAST_OFFSET_DELTA_AT + 3] ^= 1
    assert not bh.crc_is_valid(batch)
    assert not DefaultRecordBatch(bytes(batch)).validate_crc()
    bh.write_crc(batch)
    assert bh.crc_is_valid(batch)
    batch[-1] ^= 0xFF  # the records are covered as well
    assert not bh.crc_is_valid(batch)


def test_log_append_time_sets_the_type_and_max_timestamp_and_a_valid_crc() -> None:
    batch = kafka_batch()
    bh.set_log_append_time(batch, 1_234_567)
    info = bh.read_header(batch)
    assert info.timestamp_type == bh.TIMESTAMP_LOG_APPEND_TIME
    assert info.max_timestamp == 1_234_567
    assert info.first_timestamp == 1_000  # untouched
    assert bh.crc_is_valid(batch)
    theirs = DefaultRecordBatch(bytes(batch))
    assert theirs.validate_crc()
    assert theirs.timestamp_type == 1 and theirs.max_timestamp == 1_234_567


def test_readers_take_a_batch_at_any_position() -> None:
    first = sealed(base_offset=10, last_offset_delta=0, record_count=1)
    second = sealed(RECORDS * 2, base_offset=11, last_offset_delta=2, record_count=3)
    buf = bytes(first + second)
    at = bh.batch_size(buf)
    assert at == len(first)
    assert bh.offset_range(buf, at) == (11, 13)
    assert bh.record_count(buf, at) == 3
    assert bh.batch_size(buf, at) == len(second)
    assert bh.read_header(buf, at) == bh.read_header(second)


def test_a_short_buffer_is_refused_not_misread() -> None:
    with pytest.raises(struct.error):
        bh.read_header(bytes(bh.HEADER_SIZE - 1))
    with pytest.raises(struct.error):
        bh.record_count(bytes(bh.HEADER_SIZE - 1))
