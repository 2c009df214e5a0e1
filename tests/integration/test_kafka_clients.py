"""confluent-kafka and kafka-python against a real node: admin, produce, consume, offsets."""

from __future__ import annotations

import socket
import struct

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]
from kafka import KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse

from tests.integration.kafka_clients import (
    check_same_messages,
    confluent_consume_all,
    confluent_create_topic,
    confluent_produce,
    kafka_python_consume_all,
    kafka_python_consumer,
    kafka_python_create_topic,
    kafka_python_produce,
)
from tests.integration.node_process import NodeProcess
from vdl.log import batch_header

COUNT = 10_000
PARTITIONS = 3


def _messages(tag: str, count: int = COUNT) -> list[tuple[bytes, bytes]]:
    return [
        (f"key-{i % 97}".encode(), f"{tag}-{i:06d}-".encode() + b"x" * (i % 200))
        for i in range(count)
    ]


def _kafka_python_offsets(bootstrap: str, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    consumer = kafka_python_consumer(bootstrap)
    try:
        tps = [KTopicPartition(topic, p) for p in range(PARTITIONS)]
        earliest = {tp.partition: o for tp, o in consumer.beginning_offsets(tps).items()}
        latest = {tp.partition: o for tp, o in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()
    return earliest, latest


def test_confluent_produce_kafka_python_consume(node: NodeProcess) -> None:
    confluent_create_topic(node.bootstrap, "from-confluent", PARTITIONS)
    produced = _messages("c")
    acked = confluent_produce(node.bootstrap, "from-confluent", produced)
    assert len(acked) == PARTITIONS, "keys should spread over every partition"

    consumed = kafka_python_consume_all(node.bootstrap, "from-confluent", PARTITIONS, COUNT)
    check_same_messages(produced, consumed, acked)

    earliest, latest = _kafka_python_offsets(node.bootstrap, "from-confluent")
    assert earliest == {p: 0 for p in range(PARTITIONS)}
    assert latest == {p: len(acked[p]) for p in range(PARTITIONS)}


def test_kafka_python_produce_confluent_consume(node: NodeProcess) -> None:
    kafka_python_create_topic(node.bootstrap, "from-kafka-python", PARTITIONS)
    produced = _messages("k")
    acked = kafka_python_produce(node.bootstrap, "from-kafka-python", produced)
    assert len(acked) == PARTITIONS

    consumed = confluent_consume_all(node.bootstrap, "from-kafka-python", PARTITIONS, COUNT)
    check_same_messages(produced, consumed, acked)

    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "watermarks"})
    try:
        for partition in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(
                TopicPartition("from-kafka-python", partition), timeout=10
            )
            assert (low, high) == (0, len(acked[partition]))
    finally:
        consumer.close()


def test_list_offsets_by_timestamp(node: NodeProcess) -> None:
    kafka_python_create_topic(node.bootstrap, "timed", 1)
    producer_messages = [(b"k", f"v{i}".encode()) for i in range(3)]
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=node.bootstrap, acks="all")
    for i, (key, value) in enumerate(producer_messages):
        producer.send("timed", key=key, value=value, timestamp_ms=1_000_000 + i * 1000).get(30)
    producer.close()

    consumer = kafka_python_consumer(node.bootstrap)
    try:
        tp = KTopicPartition("timed", 0)
        found = consumer.offsets_for_times({tp: 1_001_000})[tp]
        assert found is not None and found.offset == 1
        assert consumer.offsets_for_times({tp: 9_000_000})[tp] is None
    finally:
        consumer.close()


BASE_MS = 1_700_000_000_000
STAMPS = [BASE_MS + step * 1000 for step in range(5)]  # records 0..4, one second apart


def _batches_in(bootstrap: str, topic: str) -> int:
    """How many record batches partition 0 holds (a raw fetch of all of it)."""
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=0, fetch_offset=0, partition_max_bytes=1 << 20
    )
    request = FetchRequest(
        version=5,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
    )
    request.with_header(correlation_id=1, client_id="batch-count")
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        payload = sock.recv(size, socket.MSG_WAITALL)
    records = bytes(FetchResponse.decode(payload[4:], version=5).responses[0].partitions[0].records)
    count, pos = 0, 0
    while pos + batch_header.LOG_OVERHEAD <= len(records):
        pos += batch_header.batch_size(records, pos)
        count += 1
    return count


def _check_offsets_for_times(bootstrap: str, topic: str) -> None:
    """Both clients' offsets_for_times land on the record, not on its batch's first one."""
    tp = KTopicPartition(topic, 0)
    consumer = kafka_python_consumer(bootstrap)
    try:
        between = consumer.offsets_for_times({tp: BASE_MS + 1500})[tp]
        assert between is not None
        assert (between.offset, between.timestamp) == (2, STAMPS[2])
        exact = consumer.offsets_for_times({tp: STAMPS[3]})[tp]
        assert exact is not None and (exact.offset, exact.timestamp) == (3, STAMPS[3])
        first = consumer.offsets_for_times({tp: BASE_MS - 1})[tp]
        assert first is not None and first.offset == 0
        assert consumer.offsets_for_times({tp: STAMPS[-1] + 1})[tp] is None
    finally:
        consumer.close()
    confluent = Consumer({"bootstrap.servers": bootstrap, "group.id": "times"})
    try:
        # One query per call: librdkafka keeps one timestamp per partition in a request.
        for ts, offset in ((BASE_MS + 1500, 2), (STAMPS[4] - 1, 4), (STAMPS[-1] + 1, OFFSET_END)):
            found = confluent.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert (found[0].offset, found[0].error) == (offset, None), ts
    finally:
        confluent.close()


def test_offsets_for_times_find_the_record_inside_a_batch(node: NodeProcess) -> None:
    # kafka-python: sent together under a long linger, flushed as one batch.
    kafka_python_create_topic(node.bootstrap, "timed-batch", 1)
    producer = KafkaProducer(bootstrap_servers=node.bootstrap, acks="all", linger_ms=30_000)
    futures = [
        producer.send("timed-batch", value=b"r%d" % i, timestamp_ms=ts)
        for i, ts in enumerate(STAMPS)
    ]
    producer.flush(30)
    producer.close()
    assert [f.get(0).offset for f in futures] == [0, 1, 2, 3, 4]
    assert _batches_in(node.bootstrap, "timed-batch") == 1
    _check_offsets_for_times(node.bootstrap, "timed-batch")

    # confluent-kafka, gzip: the records are found inside the compressed batch too.
    confluent_create_topic(node.bootstrap, "timed-gzip", 1)
    gzip_producer = Producer(
        {
            "bootstrap.servers": node.bootstrap,
            "linger.ms": 30_000,
            "compression.type": "gzip",
            "acks": "all",
        }
    )
    for i, ts in enumerate(STAMPS):
        gzip_producer.produce("timed-gzip", value=b"r%d" % i, partition=0, timestamp=ts)
    assert gzip_producer.flush(30) == 0
    assert _batches_in(node.bootstrap, "timed-gzip") == 1
    _check_offsets_for_times(node.bootstrap, "timed-gzip")


def test_admin_describe_and_delete(node: NodeProcess) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    futures = admin.create_topics(
        [NewTopic("configured", num_partitions=2, config={"retention.ms": "3600000"})]
    )
    futures["configured"].result(timeout=30)
    duplicate = admin.create_topics([NewTopic("configured", num_partitions=2)])
    try:
        duplicate["configured"].result(timeout=30)
        raise AssertionError("creating an existing topic must fail")
    except Exception as exc:  # confluent raises KafkaException carrying the error
        assert "TOPIC_ALREADY_EXISTS" in str(exc) or "already exists" in str(exc)

    resource = ConfigResource(ConfigResource.Type.TOPIC, "configured")
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].is_default

    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics["configured"].partitions) == 2

    admin.delete_topics(["configured"])["configured"].result(timeout=30)
    assert "configured" not in admin.list_topics(timeout=10).topics
