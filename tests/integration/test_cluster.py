"""Three real node processes on loopback replicating a topic, driven by confluent-kafka:
the partition's leader is killed with SIGKILL under an acks=all producer, a new leader takes
over, every acknowledged message is readable at the offset it was acknowledged with, and
the killed node comes back and catches up."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tests.integration.acked_producer import NumberedProducer
from tests.integration.cluster_support import Cluster, partition_seen_by

TOPIC = "replicated"


def _metadata(bootstrap: str) -> object:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(timeout=10)


def _wait_for_leader(cluster: Cluster, topic: str, exclude: int | None = None) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            md = _metadata(cluster.alive_bootstrap())
            part = md.topics[topic].partitions[0]  # type: ignore[attr-defined]
            if part.leader > 0 and part.leader != exclude and part.error is None:
                return int(part.leader)
        except (KafkaException, KeyError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"no leader for {topic}")


def _create_topic(cluster: Cluster) -> None:
    deadline = time.monotonic() + 60
    while True:
        admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
        futures = admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=3)])
        try:
            futures[TOPIC].result(timeout=30)
            return
        except KafkaException:
            # The metadata group may still be electing its first leader.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _read_all(
    bootstrap: str, topic: str, expected: int, timeout: float = 60
) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            offset, value = msg.offset(), msg.value()
            assert offset is not None and value is not None
            out.append((offset, value))
        return out
    finally:
        consumer.close()


def test_metadata_lists_every_node_and_the_partitions_replicas(cluster: Cluster) -> None:
    _create_topic(cluster)
    deadline = time.monotonic() + 30
    while True:
        # Asked each time: leadership may move to the partition's preferred replica.
        leader = _wait_for_leader(cluster, TOPIC)
        md = _metadata(cluster.nodes[1].bootstrap)
        brokers = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}  # type: ignore[attr-defined]
        topic_md = md.topics.get(TOPIC)  # type: ignore[attr-defined]
        part = topic_md.partitions.get(0) if topic_md is not None else None
        # Node 1 learns the leader a moment after the leader knows itself.
        known = part is not None and part.leader == leader
        if (len(brokers) == 3 and known) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert brokers == {i: n.bootstrap for i, n in cluster.nodes.items()}
    assert part is not None
    assert sorted(part.replicas) == [1, 2, 3]
    assert part.leader == leader


def test_acked_messages_survive_killing_the_leader(cluster: Cluster) -> None:
    _create_topic(cluster)
    leader = _wait_for_leader(cluster, TOPIC)
    writer = NumberedProducer(cluster.alive_bootstrap(), TOPIC)
    acked, errors, produce = writer.acked, writer.errors, writer.produce
    produce(300)
    writer.flush(30)
    assert len(acked) == 300, errors[:3]
    # Kill the leader while more messages are in flight (asked again: it may have handed
    # leadership to the partition's preferred replica since).
    leader = _wait_for_leader(cluster, TOPIC)
    produce(200)
    cluster.nodes[leader].kill()
    produce(300)
    new_leader = _wait_for_leader(cluster, TOPIC, exclude=leader)
    assert new_leader != leader
    produce(200)
    remaining = writer.flush(60)
    assert remaining == 0, f"{remaining} messages still unacknowledged; errors {errors[:3]}"
    assert not errors, errors[:3]
    assert len(acked) == writer.sent == 1000
    # Every acked message sits exactly at its acknowledged offset (idempotence: no dups).
    survivors = ",".join(n.bootstrap for n in cluster.nodes.values() if n.alive())
    read = _read_all(survivors, TOPIC, len(acked))
    by_offset = dict(read)
    for value, offset in acked.items():
        assert by_offset.get(offset) == value, (value, offset)
    assert [o for o, _ in read] == list(range(len(read)))
    # The killed node restarts and rejoins: the leader hears from every replica again.
    # (Leadership may go back to it, if it is the partition's preferred replica.)
    cluster.nodes[leader].start()
    deadline = time.monotonic() + 60
    while True:
        try:
            _, current, _, _ = partition_seen_by(cluster.nodes[new_leader], TOPIC)
            if current > 0:
                _, confirmed, _, isr = partition_seen_by(cluster.nodes[current], TOPIC)
                if confirmed == current and isr == [1, 2, 3]:
                    break
        except (KeyError, OSError):
            pass
        assert time.monotonic() < deadline, "restarted node did not rejoin"
        time.sleep(0.3)
    # Stop the others: the restarted node and one more must hold everything.
    other = next(i for i in cluster.nodes if i not in (leader, new_leader))
    cluster.nodes[new_leader].stop(30)
    _wait_for_leader(cluster, TOPIC, exclude=new_leader)
    both = ",".join(cluster.nodes[i].bootstrap for i in (leader, other))
    again = dict(_read_all(both, TOPIC, len(acked)))
    for value, offset in acked.items():
        assert again.get(offset) == value, (value, offset)
