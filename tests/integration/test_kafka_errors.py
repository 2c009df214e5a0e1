"""Protocol-correct errors seen through real clients, and the rocks log backend end to end."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as ATopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import OffsetOutOfRangeError
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.integration.kafka_clients import (
    check_same_messages,
    confluent_consume_all,
    confluent_produce,
    kafka_python_create_topic,
    produce_raw,
)
from tests.integration.node_process import NodeProcess


def test_fetch_past_the_end_is_offset_out_of_range(node: NodeProcess) -> None:
    kafka_python_create_topic(node.bootstrap, "short", 1)
    producer = KafkaProducer(bootstrap_servers=node.bootstrap, acks="all")
    for i in range(10):
        producer.send("short", b"m%d" % i)
    producer.flush()
    producer.close()

    consumer = KafkaConsumer(
        bootstrap_servers=node.bootstrap, group_id=None, auto_offset_reset="none"
    )
    tp = TopicPartition("short", 0)
    consumer.assign([tp])
    consumer.seek(tp, 1000)
    try:
        with pytest.raises(OffsetOutOfRangeError):
            for _ in range(20):
                consumer.poll(timeout_ms=500)
    finally:
        consumer.close()


def test_unknown_topic_without_auto_create(tmp_path: Path) -> None:
    from confluent_kafka import KafkaError, Producer

    with NodeProcess(tmp_path / "data", "--auto-create-topics", "false") as node:
        errors: list[KafkaError | None] = []
        producer = Producer({"bootstrap.servers": node.bootstrap, "message.timeout.ms": 3000})
        producer.produce("missing", b"x", on_delivery=lambda err, msg: errors.append(err))
        producer.flush(20)
        assert errors and errors[0] is not None
        assert errors[0].code() in (
            KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError._UNKNOWN_TOPIC,
            KafkaError._MSG_TIMED_OUT,
        )
        assert (
            "missing"
            not in Producer({"bootstrap.servers": node.bootstrap}).list_topics(timeout=10).topics
        )


def _produce_raw(node: NodeProcess, records: bytes, version: int = 7) -> int:
    """Send one Produce request with the given batch bytes; return its partition error."""
    return produce_raw(node.kafka_port, "raw", records, version)


def _batch(producer_id: int = -1, sequence: int = -1) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=1000, key=None, value=b"hello", headers=[])
    return bytearray(builder.build())


def test_corrupt_batch_is_answered_with_corrupt_message(node: NodeProcess) -> None:
    kafka_python_create_topic(node.bootstrap, "raw", 1)
    good = _batch()
    assert _produce_raw(node, bytes(good)) == 0
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # inside the CRC-covered records
    assert _produce_raw(node, bytes(bad)) == 2  # CORRUPT_MESSAGE
    assert _produce_raw(node, bytes(good) + bytes(good)) == 87  # INVALID_RECORD: two batches
    assert node.alive()


def test_idle_producers_expire_after_the_configured_time(tmp_path: Path) -> None:
    """--producer-id-expiration-ms reaches every partition: a producer's sequence gap is
    refused while it is remembered, and accepted once it has been silent that long."""
    out_of_order = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    with NodeProcess(tmp_path / "data", "--producer-id-expiration-ms", "1000") as node:
        kafka_python_create_topic(node.bootstrap, "raw", 1)
        assert _produce_raw(node, bytes(_batch(producer_id=4242, sequence=0))) == 0
        assert _produce_raw(node, bytes(_batch(producer_id=4242, sequence=5))) == out_of_order
        # Another producer keeps the partition busy, which runs the expiry sweep; the
        # silent one is forgotten after a second (with Kafka's default, after a day).
        deadline = time.monotonic() + 30
        other_sequence = 0
        while _produce_raw(node, bytes(_batch(producer_id=4242, sequence=5))) == out_of_order:
            assert time.monotonic() < deadline, "producer 4242 was never forgotten"
            time.sleep(0.2)
            assert _produce_raw(node, bytes(_batch(7777, other_sequence))) == 0
            other_sequence += 1
        # Written and remembered again from there: the next sequence must follow it.
        assert _produce_raw(node, bytes(_batch(producer_id=4242, sequence=7))) == out_of_order
        assert _produce_raw(node, bytes(_batch(producer_id=4242, sequence=6))) == 0


def test_aiokafka_round_trip(node: NodeProcess) -> None:
    kafka_python_create_topic(node.bootstrap, "aio", 2)

    async def run() -> list[tuple[int, bytes | None]]:
        producer = AIOKafkaProducer(bootstrap_servers=node.bootstrap, acks="all")
        await producer.start()
        try:
            for i in range(200):
                await producer.send("aio", value=b"v%03d" % i, partition=i % 2)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=node.bootstrap, group_id=None)
        await consumer.start()
        seen: list[tuple[int, bytes | None]] = []
        try:
            tps = [ATopicPartition("aio", p) for p in range(2)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            while len(seen) < 200:
                batches = await consumer.getmany(timeout_ms=1000)
                for tp, records in batches.items():
                    seen.extend((tp.partition, r.value) for r in records)
        finally:
            await consumer.stop()
        return seen

    seen = asyncio.run(asyncio.wait_for(run(), 60))
    assert sorted(v for _, v in seen if v is not None) == sorted(b"v%03d" % i for i in range(200))
    for partition in range(2):
        values = [v for p, v in seen if p == partition]
        assert values == sorted(values, key=lambda v: v or b"")


def test_rocks_log_backend_round_trip(tmp_path: Path) -> None:
    with NodeProcess(tmp_path / "data", "--log-backend", "rocks") as node:
        kafka_python_create_topic(node.bootstrap, "on-rocks", 2)
        produced = [(b"k%d" % (i % 7), b"value-%05d" % i) for i in range(2000)]
        acked = confluent_produce(node.bootstrap, "on-rocks", produced)
        consumed = confluent_consume_all(node.bootstrap, "on-rocks", 2, len(produced))
        check_same_messages(produced, consumed, acked)
