"""Consumer groups on three real nodes: one coordinator (the metadata group's leader),
committed offsets replicated through the metadata group, and a coordinator failover.

The node coordinating the group is killed with SIGKILL while a two-member group consumes
and commits; the group re-forms on the new metadata leader, no committed offset goes
backwards, and the group finishes the topic there.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.protocol.consumer.group import OffsetFetchRequest, OffsetFetchResponse
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

from tests.integration.cluster_support import Cluster
from tests.integration.kafka_clients import confluent_produce
from tests.integration.node_process import NodeProcess

TOPIC = "orders"
PARTITIONS = 3
GROUP = "billing"
MESSAGES = 600
NOT_COORDINATOR = 16
RETRIABLE_COORDINATOR_ERRORS = (14, 15, 16)


def _call(node: NodeProcess, request: Any, response_type: Any, version: int) -> Any:
    request.with_header(correlation_id=1, client_id="groups-cluster-test")
    with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        payload = sock.recv(size, socket.MSG_WAITALL)
    return response_type.decode(payload[4:], version=version)


def find_coordinator(node: NodeProcess) -> tuple[int, int]:
    """(error, coordinator node id) as `node` answers FindCoordinator v2."""
    response = _call(
        node,
        FindCoordinatorRequest(key=GROUP, key_type=0, version=2),
        FindCoordinatorResponse,
        2,
    )
    return int(response.error_code), int(response.node_id)


def offset_fetch(node: NodeProcess) -> tuple[int, dict[int, int]]:
    """(top-level error, partition -> committed offset) as `node` answers OffsetFetch v3."""
    topic = OffsetFetchRequest.OffsetFetchRequestTopic(
        name=TOPIC, partition_indexes=list(range(PARTITIONS))
    )
    response = _call(
        node, OffsetFetchRequest(group_id=GROUP, topics=[topic], version=3), OffsetFetchResponse, 3
    )
    offsets = {
        int(p.partition_index): int(p.committed_offset)
        for t in response.topics
        for p in t.partitions
    }
    return int(response.error_code), offsets


def controller(cluster: Cluster, exclude: int | None = None) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            md = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()}).list_topics(
                timeout=5
            )
            leader = int(md.controller_id)
            if leader > 0 and leader != exclude and cluster.nodes[leader].alive():
                return leader
        except KafkaException:
            pass
        time.sleep(0.2)
    raise AssertionError("no metadata leader")


def agreed_coordinator(cluster: Cluster) -> int:
    """The coordinator every live node names. Right after a failover one node may still
    name the dead one (it has not heard of the election yet): wait until they agree.
    Leadership moves once per failure (the driver steps late ticks in order with the
    messages that came meanwhile, so a slow turn does not depose a new leader whose
    follower answers); a node that logs "stepped down" explains any further move."""
    deadline = time.monotonic() + 30
    while True:
        coordinator = controller(cluster)
        answers = {i: find_coordinator(n) for i, n in cluster.nodes.items() if n.alive()}
        if all(a == (0, coordinator) for a in answers.values()):
            return coordinator
        assert time.monotonic() < deadline, answers
        time.sleep(0.2)


def committed_at_coordinator(cluster: Cluster, coordinator: int) -> dict[int, int]:
    """The committed offsets, retried while the coordinator is loading or moving; when the
    metadata leadership (and so the coordinator) moves, ask the new one, as a client would:
    the offsets are replicated, so any current coordinator answers the same."""
    deadline = time.monotonic() + 30
    while True:
        error, offsets = offset_fetch(cluster.nodes[coordinator])
        if error == 0:
            return offsets
        assert error in RETRIABLE_COORDINATOR_ERRORS, error
        assert time.monotonic() < deadline, f"coordinator {coordinator} kept answering {error}"
        if error == NOT_COORDINATOR:
            coordinator = controller(cluster)
        time.sleep(0.2)


def _member(bootstrap: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.subscribe([TOPIC])
    return consumer


class GroupRun:
    """Two members polling in turn and committing what they processed."""

    def __init__(self, bootstrap: str) -> None:
        self.members = [_member(bootstrap), _member(bootstrap)]
        self.seen: set[tuple[int, int]] = set()
        self.commit_failures = 0

    def step(self) -> None:
        for consumer in self.members:
            msg = consumer.poll(0.1)
            if msg is None or msg.error() is not None:
                continue
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None
            self.seen.add((partition, offset))
            try:
                consumer.commit(message=msg, asynchronous=False)
            except KafkaException:
                # Rebalancing or the coordinator is moving: a later commit covers it.
                self.commit_failures += 1

    def run_until(self, done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"group stalled after {len(self.seen)} messages"
            self.step()

    def close(self) -> None:
        for consumer in self.members:
            consumer.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, "--group-initial-rebalance-delay-ms", "300")
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_group_survives_killing_its_coordinator(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, PARTITIONS)
    for p in range(PARTITIONS):
        cluster.wait_for_leader(TOPIC, p)
    messages = [(b"k%d" % i, b"v%d" % i) for i in range(MESSAGES)]
    confluent_produce(cluster.bootstrap, TOPIC, messages, **{"message.timeout.ms": 60000})

    # One coordinator, named by every node; the others refuse group requests.
    coordinator = agreed_coordinator(cluster)
    for node_id, node in cluster.nodes.items():
        if node_id != coordinator:
            assert offset_fetch(node)[0] == NOT_COORDINATOR

    group = GroupRun(cluster.bootstrap)
    try:
        group.run_until(lambda: len(group.seen) >= MESSAGES // 2, timeout=60)
        before = committed_at_coordinator(cluster, coordinator)
        assert sum(max(o, 0) for o in before.values()) > 0, before
        # Every node applied the commits too (they travel through the metadata group).
        cluster.nodes[coordinator].kill()
        started = time.monotonic()
        successor = agreed_coordinator(cluster)
        after = committed_at_coordinator(cluster, successor)
        print(
            f"\ncoordinator {coordinator} killed; node {successor} coordinates after "
            f"{time.monotonic() - started:.1f}s\n  committed before {before}\n"
            f"  committed after  {after}"
        )
        for p in range(PARTITIONS):
            assert after[p] >= before[p], (p, before, after)
        assert find_coordinator(cluster.nodes[successor]) == (0, successor)

        # The group re-forms on the new coordinator and finishes the topic there.
        group.run_until(lambda: len(group.seen) >= MESSAGES, timeout=90)
        ends = {p: 0 for p in range(PARTITIONS)}
        for p, o in group.seen:
            ends[p] = max(ends[p], o + 1)

        def all_committed() -> bool:
            group.step()
            final = committed_at_coordinator(cluster, successor)
            return all(final[p] == ends[p] for p in range(PARTITIONS))

        group.run_until(all_committed, timeout=60)
        final = committed_at_coordinator(cluster, successor)
        for p in range(PARTITIONS):
            assert final[p] >= after[p]
        print(f"  committed at end {final}; commit retries {group.commit_failures}")
    finally:
        group.close()

    # The killed node comes back as a follower and points clients at the coordinator,
    # which still holds the final offsets.
    cluster.nodes[coordinator].start()
    deadline = time.monotonic() + 30
    while find_coordinator(cluster.nodes[coordinator]) != (0, successor):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert offset_fetch(cluster.nodes[coordinator])[0] == NOT_COORDINATOR
    checker = Consumer(
        {"bootstrap.servers": cluster.nodes[coordinator].bootstrap, "group.id": GROUP}
    )
    try:
        committed = checker.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 30)
        assert {tp.partition: tp.offset for tp in committed} == final
    finally:
        checker.close()


class CountingMember:
    """A member that counts how often it was assigned partitions."""

    def __init__(self, bootstrap: str) -> None:
        self.assignments = 0
        self.assigned: set[int] = set()
        self.seen: set[tuple[int, int]] = set()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign)

    def _on_assign(self, _: Any, tps: list[TopicPartition]) -> None:
        self.assignments += 1
        self.assigned = {tp.partition for tp in tps}

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is not None and msg.error() is None:
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None
            self.seen.add((partition, offset))


def test_members_keep_their_generation_across_a_coordinator_failover(cluster: Cluster) -> None:
    """The group's record travels through the metadata group, so the next coordinator
    loads the members: they carry on heartbeating there and are never rebalanced."""
    cluster.create_topic(TOPIC, PARTITIONS)
    for p in range(PARTITIONS):
        cluster.wait_for_leader(TOPIC, p)
    members = [CountingMember(cluster.bootstrap), CountingMember(cluster.bootstrap)]

    def run_until(done: Any, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            for m in members:
                m.poll()

    try:
        run_until(
            lambda: (
                sum(len(m.assigned) for m in members) == PARTITIONS
                and all(m.assigned for m in members)
            ),
            "the group to settle",
        )
        for _ in range(40):  # a few heartbeats in the settled generation
            for m in members:
                m.poll()
        counts = [m.assignments for m in members]
        coordinator = controller(cluster)
        cluster.nodes[coordinator].kill()
        successor = controller(cluster, exclude=coordinator)
        messages = [(b"k%d" % i, b"v%d" % i) for i in range(300)]
        acked = confluent_produce(
            cluster.alive_bootstrap(), TOPIC, messages, **{"message.timeout.ms": 60000}
        )
        expected = {(p, o) for p, offsets in acked.items() for o in offsets}
        run_until(lambda: expected <= members[0].seen | members[1].seen, "every message consumed")
        # Heartbeats reach the new coordinator in the same generation: no rebalance.
        for _ in range(40):
            for m in members:
                m.poll()
        assert [m.assignments for m in members] == counts, (counts, successor)
    finally:
        for m in members:
            m.consumer.close()
