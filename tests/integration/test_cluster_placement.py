"""Leaders in the preferred data centre on three real nodes (VDL 3.2): node 1 is in dc a,
nodes 2 and 3 in dc b, and a topic prefers dc a. Its leaders settle on node 1, move to dc b
when node 1 is killed, and come back to node 1 once it restarts and has caught up, while
an acks=all producer keeps writing; every acknowledged message is read back where it was
acknowledged."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from tests.integration.acked_producer import AckedProducer
from tests.integration.cluster_support import Cluster

TOPIC = "placed"
PARTITIONS = 3
DCS = {1: "a", 2: "b", 3: "b"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    for node_id, node in c.nodes.items():
        node.extra_args += ["--dc", DCS[node_id]]
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _create(cluster: Cluster) -> None:
    deadline = time.monotonic() + 30
    while True:
        admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
        topic = NewTopic(
            TOPIC,
            num_partitions=PARTITIONS,
            replication_factor=3,
            config={"preferred.dc": "a"},
        )
        try:
            admin.create_topics([topic])[TOPIC].result(timeout=10)
            return
        except KafkaException:
            # The metadata group may still be electing its first leader.
            assert time.monotonic() < deadline, "the topic could not be created"
            time.sleep(0.3)


def _described_preference(cluster: Cluster) -> str:
    admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
    resource = ConfigResource("topic", TOPIC)
    deadline = time.monotonic() + 30
    while True:
        try:
            configs = admin.describe_configs([resource])[resource].result(timeout=10)
            break
        except KafkaException:
            # The node asked may not have applied the new topic yet.
            assert time.monotonic() < deadline, "the topic's configs were never described"
            time.sleep(0.2)
    entry = configs["preferred.dc"]
    assert not entry.is_default
    return str(entry.value)


def _wait_leaders(cluster: Cluster, ok: Callable[[int], bool], timeout: float, what: str) -> None:
    """Until every partition's leader, as the live nodes report it, satisfies `ok`."""
    deadline = time.monotonic() + timeout
    seen: dict[int, int] = {}
    while time.monotonic() < deadline:
        try:
            seen = cluster.leaders(TOPIC)
            if len(seen) == PARTITIONS and all(ok(leader) for leader in seen.values()):
                return
        except (KafkaException, KeyError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"leaders not {what} within {timeout}s: {seen}")


def _read_all(bootstrap: str, expected: int, timeout: float = 30) -> dict[tuple[int, int], bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        out: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            partition, offset, value = msg.partition(), msg.offset(), msg.value()
            assert partition is not None and offset is not None and value is not None
            out[(partition, offset)] = value
        return out
    finally:
        consumer.close()


def test_leaders_follow_the_preferred_dc_through_a_kill_and_restart(cluster: Cluster) -> None:
    _create(cluster)
    assert _described_preference(cluster) == "a"
    _wait_leaders(cluster, lambda leader: leader == 1, 20, "on node 1 (dc a)")
    writer = AckedProducer(
        cluster.bootstrap, TOPIC, partitions=PARTITIONS, message_timeout_ms=60000, poll_s=0.005
    )
    with writer:
        writer.wait_acks(200)
        cluster.nodes[1].kill()
        _wait_leaders(cluster, lambda leader: leader in (2, 3), 20, "in dc b")
        writer.wait_acks(200)
        cluster.nodes[1].start()
        started = time.monotonic()
        _wait_leaders(cluster, lambda leader: leader == 1, 20, "back on node 1")
        print(f"leaders back on node 1 {time.monotonic() - started:.1f}s after its restart")
        writer.wait_acks(200)
    writer.finish(30)
    assert not writer.errors, writer.errors[:3]
    read = _read_all(cluster.bootstrap, len(writer.acked))
    missing = [(v, at) for v, at in writer.acked.items() if read.get(at) != v]
    assert not missing, f"{len(missing)} acked messages lost or moved, e.g. {missing[:3]}"
