"""Offset retention against real nodes, with real clients: a group that closed loses its
offsets and disappears; a group with a live member and a declared YDB consumer keep theirs;
on a cluster the expiry reaches every node, so a new coordinator does not bring it back.

The node runs with a retention of a few seconds (`--offsets-retention-ms`). Where something
must *not* expire, a control group that commits at the same moment is watched instead of
sleeping: once its offsets are gone, the retention has passed for the others too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ydb
from confluent_kafka import Consumer
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from tests.integration.cluster_support import Cluster
from tests.integration.kafka_clients import confluent_create_topic, confluent_produce
from tests.integration.node_process import NodeProcess
from tests.integration.test_groups_cluster import controller
from tests.integration.test_ydb_sdk import DATABASE, read_messages, sync_driver
from tests.integration.waiting import wait_until

RETENTION_MS = 4000
CHECK_MS = 200
WAIT_S = 40


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    with NodeProcess(
        tmp_path / "data",
        "--group-initial-rebalance-delay-ms",
        "200",
        "--offsets-retention-ms",
        str(RETENTION_MS),
        "--offsets-retention-check-interval-ms",
        str(CHECK_MS),
    ) as process:
        yield process


def committed(bootstrap: str, group: str, topic: str) -> int | None:
    """The group's committed offset of partition 0 (kafka-python: None if there is none)."""
    probe = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        result: int | None = probe.committed(KTopicPartition(topic, 0))
        return result
    finally:
        probe.close()


def listed(admin: KafkaAdminClient) -> set[str]:
    return {g["group_id"] for g in admin.list_groups()}


def standalone_commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """A commit without membership (generation -1), as offset tools make."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        tp = KTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close()


def subscribed_consumer(bootstrap: str, group: str, topic: str, count: int) -> Consumer:
    """A confluent-kafka group member that has read `count` messages and committed them."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + WAIT_S
    while seen < count:
        assert time.monotonic() < deadline, f"read {seen} of {count}"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen += 1
    consumer.commit(asynchronous=False)
    return consumer


def produce(bootstrap: str, topic: str, count: int) -> None:
    confluent_create_topic(bootstrap, topic, 1)
    confluent_produce(bootstrap, topic, [(b"k", b"v%d" % i) for i in range(count)])


def test_a_closed_group_loses_its_offsets_and_disappears(node: NodeProcess) -> None:
    bootstrap, topic, group = node.bootstrap, "ret-closed", "console-consumer-1234"
    produce(bootstrap, topic, 5)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        consumer = subscribed_consumer(bootstrap, group, topic, 5)
        consumer.close()  # leaves the group: Empty from now on
        assert committed(bootstrap, group, topic) == 5
        assert group in listed(admin)
        wait_until(
            lambda: committed(bootstrap, group, topic) is None and group not in listed(admin),
            "the group's offsets and the group to expire",
        )
        assert admin.describe_groups([group])[group]["group_state"] == "Dead"
    finally:
        admin.close()


def test_a_live_member_keeps_the_offsets(node: NodeProcess) -> None:
    bootstrap, topic, group = node.bootstrap, "ret-live", "live"
    produce(bootstrap, topic, 5)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    consumer = subscribed_consumer(bootstrap, group, topic, 5)
    try:
        standalone_commit(bootstrap, "control", topic, 3)

        def control_expired() -> bool:
            consumer.poll(0.1)  # a member that keeps consuming
            return committed(bootstrap, "control", topic) is None

        wait_until(control_expired, "the control group's offsets to expire")
        assert committed(bootstrap, group, topic) == 5
        assert group in listed(admin)
    finally:
        consumer.close()
        admin.close()


def test_a_declared_ydb_consumer_keeps_its_commits(node: NodeProcess) -> None:
    path, topic = f"{DATABASE}/ret-ydb", "ret-ydb"
    with sync_driver(f"grpc://{node.grpc_address}") as driver:
        topics = driver.topic_client
        topics.create_topic(path, consumers=["billing"])
        with topics.writer(path, producer_id="p") as writer:
            writer.write([ydb.TopicWriterMessage(f"m-{i}".encode()) for i in range(3)])
            writer.flush(timeout=30)
            writer.close(timeout=10)
        with topics.reader(path, consumer="billing") as reader:
            read_messages(reader, 3)
            reader.close(timeout=10)
        # Committed later than the consumer's last commit, and not declared anywhere.
        standalone_commit(node.bootstrap, "control", topic, 1)
        wait_until(
            lambda: committed(node.bootstrap, "control", topic) is None,
            "the control group's offsets to expire",
        )
        described = topics.describe_consumer(path, "billing", include_stats=True)
        stats = described.partitions[0].partition_consumer_stats
        assert stats is not None and stats.committed_offset == 3
        # The same cursor, seen by Kafka clients as group "billing".
        assert committed(node.bootstrap, "billing", topic) == 3


def test_on_a_cluster_expiry_is_replicated_and_survives_failover(tmp_path: Path) -> None:
    cluster = Cluster(
        tmp_path,
        "--offsets-retention-ms",
        str(RETENTION_MS),
        "--offsets-retention-check-interval-ms",
        str(CHECK_MS),
    )
    cluster.start()
    try:
        topic = "ret-cluster"
        cluster.create_topic(topic, 1)
        bootstrap = cluster.bootstrap

        def offset_of(group: str) -> int | None:
            try:
                return committed(cluster.alive_bootstrap(), group, topic)
            except KafkaError:
                return -2  # no coordinator just now: ask again

        def first_answer(group: str) -> int | None:
            """What the coordinator answers, asking again while a client error says there
            is none just now (kafka-python may also pick a broker that was just killed)."""
            answers: list[int | None] = []
            wait_until(
                lambda: answers.append(offset_of(group)) or answers[-1] != -2,
                "the coordinator to answer",
            )
            return answers[-1]

        wait_until(lambda: _try_commit(bootstrap, "gone", topic, 4), "a standalone commit")
        assert first_answer("gone") == 4
        wait_until(lambda: offset_of("gone") is None, "the offsets to expire on the cluster")
        # The expiry was applied on every node: the next coordinator has nothing either.
        coordinator = controller(cluster)
        cluster.nodes[coordinator].stop(30)
        controller(cluster, exclude=coordinator)  # waits for a new metadata leader
        assert first_answer("gone") is None
    finally:
        cluster.stop()


def _try_commit(bootstrap: str, group: str, topic: str, offset: int) -> bool:
    try:
        standalone_commit(bootstrap, group, topic, offset)
    except KafkaError:
        return False  # the metadata group may still be electing its first leader
    return True
