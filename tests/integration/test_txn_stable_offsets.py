"""OffsetFetch `require_stable` (KIP-447) on one real node: while a transaction holds
offsets for a group (send_offsets_to_transaction, not yet committed), a read_committed
consumer of the group (confluent-kafka's, kafka-python's) is answered UNSTABLE_OFFSET_COMMIT
and waits, then starts from the transaction's offset once it commits; OffsetFetch v7
without `require_stable` still gets the committed offsets, and v8 (kafka-python's admin
`list_group_offsets`) asks for several groups at once."""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient
from kafka.protocol.consumer.group import OffsetFetchRequest

from tests.integration.admin_support import scrape, total
from tests.integration.kafka_clients import confluent_create_topic
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.control_codec import request_class, response_class
from vdl.net.kafka.versions import ApiKey

UNSTABLE = int(ErrorCode.UNSTABLE_OFFSET_COMMIT)
RECORDS = 10


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    data = tmp_path_factory.mktemp("stable-offsets") / "data"
    with NodeProcess(data, "--group-initial-rebalance-delay-ms", "0") as process:
        yield process


def _offset_fetch(node: NodeProcess, version: int, **fields: Any) -> Any:
    """One OffsetFetch on a socket of our own, at exactly `version`; the decoded answer."""
    request = request_class(ApiKey.OFFSET_FETCH, version)(**fields)
    request.with_header(correlation_id=3, client_id="raw-offset-fetch")
    with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=30) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        head = sock.recv(4, socket.MSG_WAITALL)
        payload = sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    # Flexible versions (v6+) have a tagged-field byte after the correlation id.
    return response_class(ApiKey.OFFSET_FETCH, version).decode(
        payload[5 if version >= 6 else 4 :], version=version
    )


def _fetch_v7(
    node: NodeProcess, group: str, topic: str, stable: bool
) -> dict[int, tuple[int, int]]:
    response = _offset_fetch(
        node,
        7,
        group_id=group,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])],
        require_stable=stable,
    )
    assert response.error_code == 0
    [answered] = response.topics
    return {p.partition_index: (p.committed_offset, p.error_code) for p in answered.partitions}


def _unstable_answers(node: NodeProcess) -> float:
    samples = scrape(node.admin_url)
    return total(samples, "vdl_kafka_request_errors_total", code="UNSTABLE_OFFSET_COMMIT")


def _commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def _pending_transaction(node: NodeProcess) -> tuple[str, str, Producer]:
    """A two-partition topic of RECORDS records each, a group that committed offsets 2 and
    3 on it, and an open transaction holding offset 6 of partition 0 for the group: the
    topic, the group and the transaction's producer."""
    source = f"stable-{uuid.uuid4().hex[:8]}"
    confluent_create_topic(node.bootstrap, source, 2)
    plain = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
    for partition in (0, 1):
        for i in range(RECORDS):
            plain.produce(source, value=b"p%d-%d" % (partition, i), partition=partition)
    assert plain.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:6]}"
    _commit(node.bootstrap, group, [TopicPartition(source, 0, 2), TopicPartition(source, 1, 3)])

    producer = Producer(
        {"bootstrap.servers": node.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"}
    )
    producer.init_transactions(30)
    # The group's metadata, as a consume-transform-produce loop sends it.
    holder = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group})
    try:
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 6)], holder.consumer_group_metadata(), 30
        )
    finally:
        holder.close()

    # Exactly the transaction's partition is unstable; without require_stable, as committed.
    assert _fetch_v7(node, group, source, stable=True) == {0: (-1, UNSTABLE), 1: (3, 0)}
    assert _fetch_v7(node, group, source, stable=False) == {0: (2, 0), 1: (3, 0)}
    return source, group, producer


def _waits_then_starts_at_the_transactions_offset(
    node: NodeProcess,
    source: str,
    group: str,
    producer: Producer,
    poll: Callable[[], list[tuple[int, int]]],
) -> None:
    """`poll` (a read_committed consumer of `group` subscribed to `source`, polled once:
    the (partition, offset) of the records it got) waits while the transaction is open,
    then reads from the transaction's offset once it commits."""
    got: list[tuple[int, int]] = []
    before = _unstable_answers(node)
    # The consumer asks for its offsets and is told, more than once, to wait: meanwhile it
    # fetches nothing (neither from the old offset 2 nor, for want of one, the beginning).
    wait_until(
        lambda: _unstable_answers(node) >= before + 3,
        "the consumer's OffsetFetch answered UNSTABLE_OFFSET_COMMIT",
        step=lambda: got.extend(poll()),
    )
    assert got == []
    producer.commit_transaction(30)
    expected = [(0, o) for o in range(6, RECORDS)] + [(1, o) for o in range(3, RECORDS)]
    wait_until(
        lambda: len(got) >= len(expected),
        "the records after the offsets",
        step=lambda: got.extend(poll()),
    )
    assert sorted(got) == expected
    assert _fetch_v7(node, group, source, stable=True) == {0: (6, 0), 1: (3, 0)}


def test_a_confluent_read_committed_consumer_waits_for_the_transaction(
    node: NodeProcess,
) -> None:
    source, group, producer = _pending_transaction(node)
    consumer = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )

    def poll() -> list[tuple[int, int]]:
        got = []
        for message in consumer.consume(num_messages=100, timeout=0.2):
            assert message.error() is None, message.error()
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            got.append((partition, offset))
        # No position before the offsets are stable.
        assert got or all(tp.offset < 0 for tp in consumer.position(consumer.assignment()))
        return got

    try:
        consumer.subscribe([source])
        _waits_then_starts_at_the_transactions_offset(node, source, group, producer, poll)
    finally:
        consumer.close()


def test_a_kafka_python_read_committed_consumer_waits_for_the_transaction(
    node: NodeProcess,
) -> None:
    source, group, producer = _pending_transaction(node)
    consumer = KafkaConsumer(
        bootstrap_servers=node.bootstrap,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )

    def poll() -> list[tuple[int, int]]:
        batches = consumer.poll(timeout_ms=200)
        return [(r.partition, r.offset) for records in batches.values() for r in records]

    try:
        consumer.subscribe([source])
        _waits_then_starts_at_the_transactions_offset(node, source, group, producer, poll)
    finally:
        consumer.close()


def test_v8_lists_several_groups_at_once(node: NodeProcess) -> None:
    topic = f"multi-{uuid.uuid4().hex[:8]}"
    confluent_create_topic(node.bootstrap, topic, 2)
    first, second = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    _commit(node.bootstrap, first, [TopicPartition(topic, 0, 4)])
    _commit(node.bootstrap, second, [TopicPartition(topic, 1, 7)])
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    try:
        listed = admin.list_group_offsets({first: None, second: None})
    finally:
        admin.close()
    got = {
        group: {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}
        for group, offsets in listed.items()
    }
    assert got == {first: {(topic, 0): 4}, second: {(topic, 1): 7}}
