"""confluent-kafka and kafka-python against a real node: admin, produce, consume, offsets."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]
from kafka import TopicPartition as KTopicPartition

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
