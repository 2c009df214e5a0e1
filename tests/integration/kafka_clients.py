"""Small helpers over the real Kafka client libraries, shared by the integration tests."""

from __future__ import annotations

import socket
import struct
import time
from collections import defaultdict
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import NewTopic as KNewTopic
from kafka.protocol.producer import ProduceRequest, ProduceResponse

Message = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value


def confluent_create_topic(
    bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})
    futures = admin.create_topics([topic])
    futures[name].result(timeout=30)


def kafka_python_create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([KNewTopic(name, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()


def confluent_produce(
    bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]], **config: object
) -> dict[int, list[int]]:
    """Produce keyed messages with acks=all; return offsets acked per partition."""
    acked: dict[int, list[int]] = defaultdict(list)
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.partition()].append(msg.offset())  # type: ignore[attr-defined]

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, **config}
    )
    for key, value in messages:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} messages not delivered"
    assert not errors, errors[:5]
    return acked


def kafka_python_produce(
    bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]
) -> dict[int, list[int]]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    futures = [producer.send(topic, key=k, value=v) for k, v in messages]
    producer.flush(60)
    acked: dict[int, list[int]] = defaultdict(list)
    for future in futures:
        metadata = future.get(timeout=60)
        acked[metadata.partition].append(metadata.offset)
    producer.close()
    return acked


def confluent_consume_all(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    timeout: float = 60,
    idle: float | None = None,
) -> list[Message]:
    """Read from the beginning until `expected` messages, or until `idle` seconds bring none."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    last_message = time.monotonic()
    try:
        while len(out) < expected and time.monotonic() < deadline:
            batch = consumer.consume(num_messages=1000, timeout=0.5)
            for msg in batch:
                assert msg.error() is None, msg.error()
                partition, offset = msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                out.append((partition, offset, msg.key(), msg.value()))
            if batch:
                last_message = time.monotonic()
            elif idle is not None and time.monotonic() - last_message > idle:
                break
    finally:
        consumer.close()
    return out


def kafka_python_consumer(bootstrap: str) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)


def kafka_python_consume_all(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60
) -> list[Message]:
    consumer = kafka_python_consumer(bootstrap)
    tps = [KTopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500, max_records=5000).items():
                out.extend((tp.partition, r.offset, r.key, r.value) for r in records)
    finally:
        consumer.close()
    return out


def check_same_messages(
    produced: list[tuple[bytes, bytes]], consumed: list[Message], acked: dict[int, list[int]]
) -> None:
    """Exact content, offsets as acked, and per-partition order as produced."""
    assert len(consumed) == len(produced), (len(consumed), len(produced))
    assert sorted((k, v) for _, _, k, v in consumed) == sorted(produced)
    by_partition: dict[int, list[Message]] = defaultdict(list)
    for message in consumed:
        by_partition[message[0]].append(message)
    order = {value: i for i, (_, value) in enumerate(produced)}
    for partition, messages in by_partition.items():
        offsets = [m[1] for m in messages]
        assert offsets == sorted(offsets), f"partition {partition} out of offset order"
        assert offsets == sorted(acked[partition]), f"partition {partition} offsets differ"
        positions = [order[m[3]] for m in messages if m[3] is not None]
        assert positions == sorted(positions), f"partition {partition} out of produce order"


def produce_raw(port: int, topic: str, records: bytes, version: int = 7) -> int:
    """Send one Produce request for partition 0 of ``topic`` holding exactly ``records``
    (batches no client library would build); return the partition's error code."""
    return int(produce_raw_partition(port, topic, records, version).error_code)


def produce_raw_partition(port: int, topic: str, records: bytes, version: int = 7) -> Any:
    """As ``produce_raw``, but return partition 0's whole response (kafka-python's decoded
    PartitionProduceResponse: error_code, base_offset, and from v8 record_errors and
    error_message)."""
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)
                ],
            )
        ],
        version=version,
    )
    request.with_header(correlation_id=1, client_id="raw")
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        sock.settimeout(10)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        payload = sock.recv(size, socket.MSG_WAITALL)
    response = ProduceResponse.decode(payload[4:], version=version)
    return response.responses[0].partition_responses[0]
