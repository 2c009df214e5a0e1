"""Compressed records end to end: what Kafka producers compress reads back exactly through
the YDB SDK, ``vdl consume`` and ListOffsets by time; YDB writers' codecs, custom ones
included; and a batch built to expand without end fails its read, not the node.

One node for the module; every driver, producer, consumer and reader is closed by its test.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator
from typing import Any

import cramjam
import pytest
import ydb
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from tests.integration.kafka_clients import produce_raw
from tests.integration.node_process import NodeProcess
from tests.integration.test_cli import ok, vdl
from tests.integration.test_ydb_sdk import DATABASE, TIMEOUT, read_messages, sync_driver
from vdl.log.batch_header import HEADER_SIZE, write_header
from vdl.log.codecs import MAX_DECOMPRESSED_BYTES

COUNT = 300
BASE_MS = 1_700_000_000_000
# Not in offset order, so "the first record at or after" is more than "the record at".
TIMESTAMPS = [BASE_MS + (i * 37 % COUNT) * 10 for i in range(COUNT)]


def _value(codec: str, i: int) -> bytes:
    return b"%s message %d: " % (codec.encode(), i) + b"abcdefgh" * (i % 40)


@pytest.fixture(scope="module")
def codec_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("codecs") / "data") as node:
        yield node


def _first_at_or_after(target: int) -> int:
    return min((i for i, ts in enumerate(TIMESTAMPS) if ts >= target), default=-1)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kafka_compressed_batches_read_exactly(codec_node: NodeProcess, codec: str) -> None:
    topic = f"kc-{codec}"
    values = [_value(codec, i) for i in range(COUNT)]
    with sync_driver(f"grpc://{codec_node.grpc_address}") as driver:
        topics = driver.topic_client
        topics.create_topic(f"{DATABASE}/{topic}", consumers=["ydb", "c1"])
        # librdkafka, the engine kcat runs on (kcat -z CODEC), batching everything.
        producer = Producer(
            {
                "bootstrap.servers": codec_node.bootstrap,
                "acks": "all",
                "compression.type": codec,
                "linger.ms": 200,
            }
        )
        for i, value in enumerate(values):
            producer.produce(topic, key=b"k%d" % (i % 5), value=value, timestamp=TIMESTAMPS[i])
        assert producer.flush(30) == 0
        del producer  # librdkafka's client ends with its last reference
        stats = topics.describe_topic(f"{DATABASE}/{topic}", include_stats=True)
        # Stored as the producer compressed it: far smaller than the values.
        assert stats.topic_stats.store_size_bytes < sum(map(len, values)) // 3

        with topics.reader(f"{DATABASE}/{topic}", consumer="ydb") as reader:
            messages = read_messages(reader, COUNT)
            reader.close(timeout=10)
    assert [m.offset for m in messages] == list(range(COUNT))
    assert [m.data for m in messages] == values
    assert [m.message_group_id for m in messages] == [f"k{i % 5}" for i in range(COUNT)]
    assert [int(m.created_at.timestamp() * 1000) for m in messages] == TIMESTAMPS

    consumed = vdl(
        "consume",
        topic,
        "--consumer",
        "c1",
        "--from",
        "earliest",
        "--count",
        str(COUNT),
        "--quiet",
        endpoint=f"grpc://{codec_node.grpc_address}",
    )
    assert ok(consumed).encode().splitlines() == values

    consumer = Consumer({"bootstrap.servers": codec_node.bootstrap, "group.id": f"t-{codec}"})
    try:
        targets = [*TIMESTAMPS, *(ts + 1 for ts in TIMESTAMPS[:50]), BASE_MS - 1]
        targets.append(max(TIMESTAMPS) + 1)
        for target in targets:
            (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=10)
            assert found.error is None
            assert found.offset == _first_at_or_after(target), target
    finally:
        consumer.close()


def _bomb_batch(expands_to: int) -> bytes:
    """One gzip batch claiming one record, whose payload inflates to ``expands_to`` zeros."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    payload = b"".join(compressor.compress(chunk) for _ in range(expands_to >> 20))
    batch = bytearray(HEADER_SIZE) + payload + compressor.flush()
    write_header(
        batch,
        base_offset=0,
        partition_leader_epoch=-1,
        attributes=1,  # gzip, CreateTime
        last_offset_delta=0,
        base_timestamp=BASE_MS + 500,
        max_timestamp=BASE_MS + 500,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        record_count=1,
    )
    return bytes(batch)


def test_decompression_bomb_fails_its_read_only(codec_node: NodeProcess) -> None:
    endpoint = f"grpc://{codec_node.grpc_address}"
    bomb = _bomb_batch(8 * MAX_DECOMPRESSED_BYTES)  # 512 MiB of zeros in about 0.5 MiB
    assert len(bomb) < 1 << 20
    producer = Producer({"bootstrap.servers": codec_node.bootstrap, "compression.type": "gzip"})
    with sync_driver(endpoint) as driver:
        topics = driver.topic_client
        topics.create_topic(f"{DATABASE}/bomb", consumers=["ydb", "c1"])
        for i in range(10):
            producer.produce("bomb", value=b"before %d" % i, timestamp=BASE_MS + i)
        assert producer.flush(30) == 0
        assert produce_raw(codec_node.kafka_port, "bomb", bomb) == 0
        for i in range(10):
            producer.produce("bomb", value=b"after %d" % i, timestamp=BASE_MS + 1000 + i)
        assert producer.flush(30) == 0
        del producer  # librdkafka's client ends with its last reference
        peak_before = codec_node.peak_rss()

        # What precedes the bomb reads; the read that meets it fails, clearly.
        before = vdl("consume", "bomb", "--consumer", "c1", "--count", "10", endpoint=endpoint)
        assert ok(before).splitlines() == [f"before {i}" for i in range(10)]
        with topics.reader(f"{DATABASE}/bomb", consumer="ydb") as reader:
            first = reader.receive_batch(timeout=TIMEOUT)
            assert [m.data for m in first.messages] == [b"before %d" % i for i in range(10)]
            reader.commit_with_ack(first, timeout=10)
            with pytest.raises(ydb.Error) as failure:
                reader.receive_batch(timeout=TIMEOUT)
            with contextlib.suppress(ydb.Error):
                reader.close(timeout=10)
        assert f"inflates beyond {MAX_DECOMPRESSED_BYTES} bytes" in str(failure.value)
        assert codec_node.alive()
        # The node never held anything like what the bomb expands to.
        assert codec_node.peak_rss() - peak_before < 3 * MAX_DECOMPRESSED_BYTES

        # ListOffsets by time inside the bomb answers its batch; later records exactly.
        consumer = Consumer({"bootstrap.servers": codec_node.bootstrap, "group.id": "bomb"})
        try:
            for target, offset in [(BASE_MS + 500, 10), (BASE_MS + 1003, 14)]:
                (found,) = consumer.offsets_for_times(
                    [TopicPartition("bomb", 0, target)], timeout=10
                )
                assert found.offset == offset
        finally:
            consumer.close()

        # Legitimate reads go on: a new topic, through the SDK.
        topics.create_topic(f"{DATABASE}/after-bomb", consumers=["ydb"])
        with topics.writer(f"{DATABASE}/after-bomb", producer_id="w", codec=2) as writer:
            writer.write([ydb.TopicWriterMessage(b"fine %d" % i) for i in range(5)])
            writer.flush(timeout=TIMEOUT)
        with topics.reader(f"{DATABASE}/after-bomb", consumer="ydb") as reader:
            assert [m.data for m in read_messages(reader, 5)] == [b"fine %d" % i for i in range(5)]
            reader.close(timeout=10)


def _reverse(data: bytes) -> bytes:
    return data[::-1]


def _zstd(data: bytes) -> bytes:
    return bytes(cramjam.zstd.compress(data))


def test_ydb_writer_codecs(codec_node: NodeProcess) -> None:
    endpoint = f"grpc://{codec_node.grpc_address}"
    path = f"{DATABASE}/ydb-codecs"
    values = [b"payload %d " % i * (i + 1) for i in range(20)]
    with sync_driver(endpoint) as driver:
        topics = driver.topic_client
        topics.create_topic(path, consumers=["ydb"], supported_codecs=[1, 2, 4, 10001])
        assert topics.describe_topic(path).supported_codecs == [1, 2, 4, 10001]
        for codec, encoders in [(1, None), (2, None), (4, {4: _zstd}), (10001, {10001: _reverse})]:
            with topics.writer(path, producer_id=f"w{codec}", codec=codec, encoders=encoders) as w:
                w.write([ydb.TopicWriterMessage(v) for v in values])
                w.flush(timeout=TIMEOUT)
        with topics.reader(path, consumer="ydb", decoders={10001: _reverse}) as reader:
            messages = read_messages(reader, 4 * len(values))
            reader.close(timeout=10)
        # LZOP cannot be stored decoded: refused, for a topic as for a write.
        with pytest.raises(ydb.Error):
            topics.create_topic(f"{DATABASE}/lzop", supported_codecs=[3])
        lzop = topics.writer(path, producer_id="lzop", codec=3, encoders={3: _reverse})
        lzop.write(ydb.TopicWriterMessage(b"x"))
        with contextlib.suppress(ydb.Error):
            lzop.flush(timeout=TIMEOUT)
        with pytest.raises(ydb.issues.BadRequest, match="codec 3 is not allowed"):
            lzop.close(timeout=10)
    # Every codec reads back as written, in order; the SDK decoded the custom one.
    assert [m.data for m in messages] == values * 4
    assert [m.producer_id for m in messages[:: len(values)]] == ["w1", "w2", "w4", "w10001"]

    # Kafka consumers see GZIP and ZSTD writes decoded, and a custom codec's data as written.
    consumer = KafkaConsumer(
        bootstrap_servers=codec_node.bootstrap, enable_auto_commit=False, group_id=None
    )
    try:
        partition = KTopicPartition("ydb-codecs", 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        records: list[Any] = []
        while len(records) < 4 * len(values):
            polled = consumer.poll(timeout_ms=TIMEOUT * 1000)
            assert polled, f"only {len(records)} records"
            for batch in polled.values():
                records.extend(batch)
    finally:
        consumer.close()
    assert [r.value for r in records[: 3 * len(values)]] == values * 3
    assert [r.value for r in records[3 * len(values) :]] == [_reverse(v) for v in values]
    headers = dict(records[-1].headers)
    assert headers["__ydb.codec"] == b"10001"
    assert headers["__ydb.uncompressed_size"] == str(len(values[-1])).encode()
    assert "__ydb.codec" not in dict(records[0].headers)
