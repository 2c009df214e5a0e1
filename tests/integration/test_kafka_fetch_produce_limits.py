"""Fetch size limits (KIP-74) and Produce per-record errors (KIP-467), with real clients
against one real node."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from kafka.protocol.consumer import FetchRequest, FetchResponse

from tests.integration.kafka_clients import confluent_create_topic, produce_raw_partition
from tests.integration.node_process import NodeProcess
from vdl.log.record_batch import Record, build_batch, iter_batches

BIG = 900 * 1024  # a 900 KiB value: one record batch of about 921.7 kB
MID = 300_000  # a value of 300 kB: one record batch of about 300.1 kB
DAY_MS = 24 * 3600 * 1000


@pytest.fixture(scope="module")
def shared_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    data: Path = tmp_path_factory.mktemp("limits") / "data"
    with NodeProcess(data) as node:
        yield node


def _produce_one_per_batch(
    bootstrap: str, topic: str, partitions: int, values: list[bytes]
) -> None:
    """Every value to every partition, one record batch per value."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "batch.num.messages": 1, "linger.ms": 0}
    )
    failed: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    for partition in range(partitions):
        for value in values:
            producer.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not failed, failed


def _consume(bootstrap: str, topic: str, partitions: int, expected: int, **config: object) -> int:
    """How many messages a consumer with ``config`` reads from the start within 30 s."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"limits-{topic}",
            "enable.auto.commit": False,
            **config,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen = 0
    deadline = time.monotonic() + 30
    try:
        while seen < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                assert msg.error() is None, msg.error()
                seen += 1
    finally:
        consumer.close()
    return seen


def test_a_response_stays_within_the_consumers_fetch_max_bytes(shared_node: NodeProcess) -> None:
    # The consumer drops any response larger than its receive.message.max.bytes. Three
    # partitions of 900 KiB messages: a response may carry one batch and no more, since a
    # second one, from any partition, would pass fetch.max.bytes.
    confluent_create_topic(shared_node.bootstrap, "big3", 3)
    _produce_one_per_batch(shared_node.bootstrap, "big3", 3, [bytes([i]) * BIG for i in range(3)])
    config = {
        "fetch.max.bytes": 1_000_000,
        "max.partition.fetch.bytes": 20_000_000,
        "receive.message.max.bytes": 1_000_512,
    }
    assert _consume(shared_node.bootstrap, "big3", 3, 9, **config) == 9


def test_a_partition_limit_below_the_message_size_still_progresses(
    shared_node: NodeProcess,
) -> None:
    # Per partition at most 100 kB, less than one message: only the first batch of the
    # first partition with records goes out whole, so responses stay within the 1 MB that
    # this consumer can take, and every message still arrives.
    confluent_create_topic(shared_node.bootstrap, "big3p", 3)
    _produce_one_per_batch(shared_node.bootstrap, "big3p", 3, [bytes([i]) * BIG for i in range(2)])
    config = {
        "fetch.max.bytes": 1_000_000,
        "max.partition.fetch.bytes": 100_000,
        "receive.message.max.bytes": 1_000_512,
    }
    assert _consume(shared_node.bootstrap, "big3p", 3, 6, **config) == 6


def _fetch(
    port: int, topic: str, offsets: list[int], max_bytes: int, partition_max_bytes: int
) -> list[tuple[int, int, int, int]]:
    """One Fetch v5 for partitions 0..n-1 at ``offsets``: for each partition, in response
    order, (partition, error, high watermark, number of record batches)."""
    request = FetchRequest(
        version=5,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=max_bytes,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=p, fetch_offset=offset, partition_max_bytes=partition_max_bytes
                    )
                    for p, offset in enumerate(offsets)
                ],
            )
        ],
    )
    request.with_header(correlation_id=7, client_id="limits")
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(30)
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        payload = b""
        while len(payload) < size:  # a timeout makes MSG_WAITALL return early
            chunk = sock.recv(size - len(payload))
            assert chunk, "connection closed mid-response"
            payload += chunk
    response = FetchResponse.decode(payload[4:], version=5)
    [answer] = response.responses
    return [
        (
            part.partition_index,
            part.error_code,
            part.high_watermark,
            len(list(iter_batches(bytes(part.records or b"")))),
        )
        for part in answer.partitions
    ]


def test_fetch_fills_partitions_in_order_within_both_limits(shared_node: NodeProcess) -> None:
    confluent_create_topic(shared_node.bootstrap, "mid3", 3)
    _produce_one_per_batch(shared_node.bootstrap, "mid3", 3, [bytes([i]) * MID for i in range(3)])
    port = shared_node.kafka_port
    # 700 kB per partition, 1 MB in all: two batches from partition 0, one from partition 1
    # (a second would pass the 1 MB), none from partition 2, which is still answered.
    assert _fetch(port, "mid3", [0, 0, 0], 1_000_000, 700_000) == [
        (0, 0, 3, 2),
        (1, 0, 3, 1),
        (2, 0, 3, 0),
    ]
    # A partition limit below one batch: the first batch of the first partition goes out
    # whole (KIP-74), the other partitions' first batches do not.
    assert _fetch(port, "mid3", [0, 0, 0], 10_000_000, 100_000) == [
        (0, 0, 3, 1),
        (1, 0, 3, 0),
        (2, 0, 3, 0),
    ]
    # A response limit below one batch: likewise.
    assert _fetch(port, "mid3", [0, 0, 0], 100_000, 10_000_000) == [
        (0, 0, 3, 1),
        (1, 0, 3, 0),
        (2, 0, 3, 0),
    ]
    # The exception goes to the first partition that has records, here partition 1.
    assert _fetch(port, "mid3", [3, 1, 0], 100_000, 100_000) == [
        (0, 0, 3, 0),
        (1, 0, 3, 1),
        (2, 0, 3, 0),
    ]


def test_produce_v8_names_each_record_with_a_timestamp_out_of_range(
    shared_node: NodeProcess,
) -> None:
    confluent_create_topic(
        shared_node.bootstrap, "stamped", 1, {"message.timestamp.difference.max.ms": "3600000"}
    )
    now = int(time.time() * 1000)
    stamps = [now, now - DAY_MS, now, now + DAY_MS, now - 60_000]
    batch = build_batch([Record(None, b"v%d" % i, ts) for i, ts in enumerate(stamps)])
    answer = produce_raw_partition(shared_node.kafka_port, "stamped", batch, version=8)
    assert answer.error_code == KafkaError.INVALID_TIMESTAMP
    assert [e.batch_index for e in answer.record_errors] == [1, 3]
    assert all("out of range" in e.batch_index_error_message for e in answer.record_errors)
    assert "timestamp" in answer.error_message
    # Before v8 the same refusal carries the error code alone.
    older = produce_raw_partition(shared_node.kafka_port, "stamped", batch, version=7)
    assert older.error_code == KafkaError.INVALID_TIMESTAMP
    # Nothing of the batch was stored; a batch within the limit is.
    good = build_batch([Record(None, b"ok", now - 60_000)])
    stored = produce_raw_partition(shared_node.kafka_port, "stamped", good, version=8)
    assert (stored.error_code, stored.base_offset, stored.record_errors) == (0, 0, [])


def test_librdkafka_fails_exactly_the_records_out_of_range(shared_node: NodeProcess) -> None:
    # 100 messages, 10 of them stamped a day ago, into a topic that accepts an hour.
    # librdkafka sends them in a few batches; the node refuses each batch holding a bad
    # record and names those records (KIP-467). librdkafka fails each named record with
    # the node's reason and the others of its batch with _INVALID_DIFFERENT_RECORD, which
    # a producer sends again: in the end exactly the 10 are refused and the 90 stored.
    confluent_create_topic(
        shared_node.bootstrap, "stamped100", 1, {"message.timestamp.difference.max.ms": "3600000"}
    )
    bad = set(range(3, 100, 10))
    outcome: dict[int, KafkaError | None] = {}
    reasons: dict[int, str] = {}

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        index = int(msg.value().decode())  # type: ignore[attr-defined]
        outcome[index] = err
        if err is not None:
            reasons[index] = err.str()

    producer = Producer({"bootstrap.servers": shared_node.bootstrap, "linger.ms": 100})
    day_ago = int(time.time() * 1000) - DAY_MS
    for i in range(100):
        # Timestamp 0: the producer stamps the message with its current time.
        stamp = day_ago if i in bad else 0
        producer.produce("stamped100", value=b"%d" % i, on_delivery=on_delivery, timestamp=stamp)
    assert producer.flush(30) == 0
    refused = {
        i
        for i, err in outcome.items()
        if err is not None
        and err.code() in (KafkaError.INVALID_TIMESTAMP, KafkaError.INVALID_RECORD)
    }
    assert refused == bad, (sorted(refused), {i: reasons.get(i) for i in sorted(bad)})
    collateral = {
        i
        for i, err in outcome.items()
        if err is not None and err.code() == KafkaError._INVALID_DIFFERENT_RECORD
    }
    delivered = {i for i, err in outcome.items() if err is None}
    assert len(outcome) == 100 and refused | collateral | delivered == set(range(100))
    assert collateral, "the bad records shared batches with good ones"
    for i in sorted(collateral):
        producer.produce("stamped100", value=b"%d" % i, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert {i for i, err in outcome.items() if err is None} == set(range(100)) - bad

    consumer = Consumer(
        {"bootstrap.servers": shared_node.bootstrap, "group.id": "stamped100-reader"}
    )
    consumer.assign([TopicPartition("stamped100", 0, OFFSET_BEGINNING)])
    stored: list[int] = []
    deadline = time.monotonic() + 30
    try:
        # Every record stored: the log holds the 90 and nothing else.
        assert consumer.get_watermark_offsets(TopicPartition("stamped100", 0), 10) == (0, 90)
        while len(stored) < 90 and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                assert msg.error() is None, msg.error()
                stored.append(int(msg.value().decode()))  # type: ignore[union-attr]
    finally:
        consumer.close()
    assert sorted(stored) == sorted(set(range(100)) - bad)


def test_before_and_after_limits_apply_separately(shared_node: NodeProcess) -> None:
    # message.timestamp.after.max.ms alone (KIP-937): only records too far ahead are refused.
    confluent_create_topic(
        shared_node.bootstrap, "ahead", 1, {"message.timestamp.after.max.ms": "60000"}
    )
    now = int(time.time() * 1000)
    batch = build_batch([Record(None, b"v", ts) for ts in (now - DAY_MS, now + DAY_MS, now)])
    answer = produce_raw_partition(shared_node.kafka_port, "ahead", batch, version=8)
    assert answer.error_code == KafkaError.INVALID_TIMESTAMP
    assert [e.batch_index for e in answer.record_errors] == [1]
    past = build_batch([Record(None, b"v", now - 365 * DAY_MS)])
    assert produce_raw_partition(shared_node.kafka_port, "ahead", past, version=8).error_code == 0
    # A negative limit is no limit Kafka takes: the topic is refused.
    with pytest.raises(KafkaException) as refused:
        confluent_create_topic(
            shared_node.bootstrap, "negative", 1, {"message.timestamp.before.max.ms": "-1"}
        )
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
