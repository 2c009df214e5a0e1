"""The YDB <-> Kafka record mapping and the per-producer seq_no table rebuilt from the log."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from vdl.backends.api import LogStoreOptions
from vdl.backends.registry import LOG_BACKENDS, open_log_store
from vdl.log.appender import LocalAppender
from vdl.log.flusher import Flusher
from vdl.log.record_batch import DecodedRecord, build_batch, iter_records, parse_batch_header
from vdl.log.stream import LogStream
from vdl.log.ydb_mapping import (
    CODEC,
    CODEC_RAW,
    UNCOMPRESSED_SIZE,
    YdbMessage,
    YdbProducerTable,
    codec_headers,
    from_record,
    is_reserved_key,
    to_record,
)


def _roundtrip(messages: list[YdbMessage], base_offset: int = 0) -> list[YdbMessage]:
    batch = build_batch([to_record(m) for m in messages], base_offset=base_offset)
    return [from_record(r) for r in iter_records(batch)]


def test_ydb_message_survives_the_kafka_record() -> None:
    message = YdbMessage(
        data=b"payload",
        seq_no=42,
        created_at_ms=1_700_000_000_123,
        message_group_id="group-1",
        metadata_items=(("trace", b"\x00\x01"), ("empty", b"")),
        producer_id="producer-\u00e9",
        written_at_ms=1_700_000_000_500,
        write_session_meta={"app": "test"},
    )
    (back,) = _roundtrip([message], base_offset=7)
    assert back == YdbMessage(
        data=b"payload",
        seq_no=42,
        created_at_ms=1_700_000_000_123,
        message_group_id="group-1",
        metadata_items=(("trace", b"\x00\x01"), ("empty", b"")),
        producer_id="producer-\u00e9",
        written_at_ms=1_700_000_000_500,
        write_session_meta={"app": "test"},
        offset=7,
    )


def test_ydb_fields_are_visible_to_kafka_consumers() -> None:
    record = to_record(YdbMessage(data=b"v", seq_no=3, created_at_ms=99, message_group_id="g"))
    assert (record.key, record.value, record.timestamp_ms) == (b"g", b"v", 99)
    headers = dict(record.headers)
    assert headers["__ydb.seq_no"] == b"3"
    assert is_reserved_key("__ydb.anything") and not is_reserved_key("ydb")


def test_kafka_record_reads_with_defaults() -> None:
    record = DecodedRecord(
        offset=5, timestamp_ms=1234, key=b"\xff\xfe", value=None, headers=[("h", None)]
    )
    message = from_record(record)
    assert message == YdbMessage(
        data=b"",
        seq_no=0,
        created_at_ms=1234,
        message_group_id="",  # the key is not UTF-8
        metadata_items=(("h", b""),),
        producer_id="",
        written_at_ms=1234,
        write_session_meta={},
        offset=5,
    )


def test_producer_table_tracks_the_highest_seq_no() -> None:
    table = YdbProducerTable()
    assert table.last_seq_no("p") == 0
    table.record("p", 5, 10)
    table.record("p", 3, 11)  # never goes backwards
    assert table.last_seq_no("p") == 5
    assert table.last("p") is not None and table.last("p").offset == 10  # type: ignore[union-attr]
    assert table.is_duplicate("p", 5) and not table.is_duplicate("p", 6)
    assert not table.is_duplicate("q", 1)


def test_producer_table_scans_batches() -> None:
    batches = [
        build_batch([to_record(YdbMessage(b"a", seq_no=s, producer_id="p")) for s in (1, 2)]),
        build_batch([to_record(YdbMessage(b"b", seq_no=9, producer_id="q"))], base_offset=2),
    ]
    table = YdbProducerTable()
    table.scan(batches)
    assert table.last_seq_no("p") == 2
    assert table.last_seq_no("q") == 9
    assert table.last("q").offset == 2  # type: ignore[union-attr]


def test_producer_table_scans_compressed_batches() -> None:
    # A Kafka client copying YDB-written records (a mirroring tool) may compress them.
    records = [to_record(YdbMessage(b"a", seq_no=s, producer_id="p")) for s in (3, 4)]
    table = YdbProducerTable()
    table.scan([build_batch(records, base_offset=10, compression=c) for c in (1, 4)])
    assert table.last_seq_no("p") == 4
    assert table.last("p").offset == 11  # type: ignore[union-attr]


def test_custom_codec_survives_the_kafka_record() -> None:
    message = YdbMessage(b"\x00encoded", seq_no=1, codec=10001, uncompressed_size=77)
    headers = dict(to_record(message).headers)
    assert headers[CODEC] == b"10001" and headers[UNCOMPRESSED_SIZE] == b"77"
    (back,) = _roundtrip([message])
    assert (back.data, back.codec, back.size, back.metadata_items) == (
        b"\x00encoded",
        10001,
        77,
        (),
    )
    # Data stored decoded reads as RAW, whatever a header claims.
    (plain,) = _roundtrip([YdbMessage(b"x", metadata_items=())])
    assert (plain.codec, plain.size) == (CODEC_RAW, 1)
    assert codec_headers(CODEC_RAW, 5) == () and codec_headers(4, 5) == ()
    spoofed = DecodedRecord(0, 0, None, b"x", [(CODEC, b"4"), (UNCOMPRESSED_SIZE, b"9")])
    assert (from_record(spoofed).codec, from_record(spoofed).size) == (CODEC_RAW, 1)


@pytest.mark.parametrize("backend", LOG_BACKENDS)
async def test_stream_rebuilds_ydb_producers_from_the_log(tmp_path: Path, backend: str) -> None:
    flusher = Flusher()
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)

        def open_stream() -> LogStream:
            store = open_log_store(backend, tmp_path / "s", LogStoreOptions())  # type: ignore[arg-type]
            return LogStream("t-0", store, LocalAppender.factory(flusher), lambda: 5_000)

        stream = open_stream()
        assert len(stream.ydb_producers()) == 0
        for seq_nos in ([1, 2, 3], [4]):
            batch = build_batch(
                [to_record(YdbMessage(b"x", seq_no=s, producer_id="p")) for s in seq_nos]
            )
            appended = stream.append(batch, parse_batch_header(batch))
            for i, seq_no in enumerate(seq_nos):
                stream.ydb_producers().record("p", seq_no, appended.base_offset + i)
        plain = build_batch([to_record(YdbMessage(b"k"))])
        last = stream.append(plain, parse_batch_header(plain))
        await stream.wait_committed(last.last_offset)
        await stream.close()

        reopened = open_stream()
        table = reopened.ydb_producers()
        assert table.last_seq_no("p") == 4
        assert table.last("p").offset == 3  # type: ignore[union-attr]
        # A message without a producer id is no producer at all.
        assert table.last_seq_no("") == 0
        await reopened.close()
        flusher.stop()
