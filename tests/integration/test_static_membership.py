"""Static membership (group.instance.id) with real clients against a real node.

A static member that restarts within its session timeout takes its old place back: it gets
the partitions it had, the other members see no rebalance, and the old incarnation is
fenced. A restarted node loads its groups, so members carry on across it too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer

from tests.integration.kafka_clients import confluent_create_topic, confluent_produce
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until

TOPIC = "static-orders"
PARTITIONS = 4
GROUP = "static-app"
WAIT_S = 40


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path / "data", "--group-initial-rebalance-delay-ms", "200") as process:
        yield process


class StaticMember:
    """A confluent-kafka consumer with a group instance id, counting its assignments."""

    def __init__(self, bootstrap: str, instance: str) -> None:
        self.instance = instance
        self.assigned: set[int] = set()
        self.assignments = 0
        self.consumed: list[tuple[int, int]] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "group.instance.id": instance,
                "client.id": instance,
                "session.timeout.ms": 30000,
                "heartbeat.interval.ms": 500,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "range",
            }
        )
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _: Any, tps: list[TopicPartition]) -> None:
        self.assignments += 1
        self.assigned = {tp.partition for tp in tps}

    def _on_revoke(self, _: Any, tps: list[TopicPartition]) -> None:
        self.assigned = set()

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is not None and msg.error() is None:
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None
            self.consumed.append((partition, offset))
            self.consumer.commit(message=msg, asynchronous=False)

    def close(self) -> None:
        # A static member's close sends no LeaveGroup: its place waits for it.
        self.consumer.close()


def test_restarted_static_member_gets_its_partitions_back_without_a_rebalance(
    node: NodeProcess,
) -> None:
    confluent_create_topic(node.bootstrap, TOPIC, PARTITIONS)
    a = StaticMember(node.bootstrap, "instance-a")
    b = StaticMember(node.bootstrap, "instance-b")
    members = [a, b]
    admin = AdminClient({"bootstrap.servers": node.bootstrap})

    def step() -> None:
        for m in members:
            m.poll()

    try:
        wait_until(
            lambda: (
                len(a.assigned) + len(b.assigned) == PARTITIONS
                and bool(a.assigned)
                and bool(b.assigned)
            ),
            "both static members to be assigned",
            step=step,
        )
        b_partitions, a_assignments = set(b.assigned), a.assignments
        described = admin.describe_consumer_groups([GROUP])[GROUP].result()
        assert sorted(m.group_instance_id for m in described.members) == [
            "instance-a",
            "instance-b",
        ]
        old_ids = {m.group_instance_id: m.member_id for m in described.members}

        b.close()
        members = [a]
        for _ in range(20):  # a keeps heartbeating meanwhile
            step()
        b = StaticMember(node.bootstrap, "instance-b")
        members = [a, b]
        wait_until(lambda: bool(b.assigned), "the restarted member's assignment", step=step)
        assert b.assigned == b_partitions
        # Messages reach both, and a was never rebalanced.
        acked = confluent_produce(
            node.bootstrap, TOPIC, [(b"k%d" % i, b"v%d" % i) for i in range(200)]
        )
        expected = {(p, o) for p, offsets in acked.items() for o in offsets}
        wait_until(
            lambda: expected <= set(a.consumed) | set(b.consumed),
            "every message consumed",
            step=step,
        )
        assert a.assignments == a_assignments, "the other member saw a rebalance"
        assert {p for p, _ in b.consumed} <= b_partitions
        described = admin.describe_consumer_groups([GROUP])[GROUP].result()
        new_ids = {m.group_instance_id: m.member_id for m in described.members}
        assert new_ids["instance-a"] == old_ids["instance-a"]
        assert new_ids["instance-b"] != old_ids["instance-b"]
    finally:
        for m in members:
            m.close()


def test_kafka_python_static_member_and_node_restart(node: NodeProcess) -> None:
    """kafka-python's static member keeps its member id across a restart of the node
    (the group is loaded from its record) and across its own restart."""
    confluent_create_topic(node.bootstrap, TOPIC, PARTITIONS)

    def member() -> KafkaConsumer:
        consumer = KafkaConsumer(
            TOPIC,
            bootstrap_servers=node.bootstrap,
            group_id=GROUP,
            group_instance_id="kp-1",
            session_timeout_ms=30000,
            heartbeat_interval_ms=500,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        return consumer

    def member_ids() -> dict[str, str]:
        admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
        try:
            group = admin.describe_groups([GROUP])[GROUP]
            return {m["group_instance_id"]: m["member_id"] for m in group["members"]}
        finally:
            admin.close()

    consumer = member()
    try:
        deadline = time.monotonic() + WAIT_S
        while len(consumer.assignment()) < PARTITIONS:
            assert time.monotonic() < deadline, "never assigned"
            consumer.poll(timeout_ms=100)
        first_id = member_ids()["kp-1"]
        generation = consumer._coordinator._generation.generation_id
    finally:
        consumer.close()
    node.stop()
    node.start()
    # The record outlived the node: the member is still there, under the same id.
    assert member_ids() == {"kp-1": first_id}
    consumer = member()
    try:
        deadline = time.monotonic() + WAIT_S
        while len(consumer.assignment()) < PARTITIONS:
            assert time.monotonic() < deadline, "never assigned after the restart"
            consumer.poll(timeout_ms=100)
        # It took its place back: a new member id, the same generation.
        assert consumer._coordinator._generation.generation_id == generation
        assert member_ids()["kp-1"] != first_id
    finally:
        consumer.close()
