"""Topics grow: Kafka's CreatePartitions (KIP-195) and YDB's AlterTopic with
`set_min_active_partitions` run one metadata command, from any node (KIP-590). Real
clients against real node processes: three nodes shared by the module, one node alone."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ydb
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    NewPartitions,
    NewTopic,
)
from kafka import KafkaAdminClient
from kafka.errors import InvalidPartitionsError, UnknownTopicOrPartitionError

from tests.integration.admin_support import wait_for
from tests.integration.cluster_support import (
    Cluster,
    controller_seen_by,
    group0_leader,
    partition_seen_by,
)
from tests.integration.kafka_clients import confluent_consume_all
from tests.integration.node_process import NodeProcess
from vdl.cluster.placement import assign_replicas

SERVED = "kafka_requests{api=CreatePartitions}"


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("grow")) as cluster:
        yield cluster


def _served(node: NodeProcess) -> int:
    """CreatePartitions requests this node has answered (since it started)."""
    return node.stage_snapshot()[1].get(SERVED, 0)


def _led_everywhere(cluster: Cluster, topic: str, partitions: int) -> bool:
    """Every node's own Metadata lists exactly `partitions` partitions, each with a leader
    and three replicas."""
    for node in cluster.nodes.values():
        for partition in range(partitions):
            _, leader, replicas, _ = partition_seen_by(node, topic, partition)
            if leader <= 0 or len(replicas) != 3:
                return False
        try:
            partition_seen_by(node, topic, partitions)
        except KeyError:
            continue
        return False
    return True


def _produce_to(bootstrap: str, topic: str, partition: int, value: bytes) -> int:
    """One record to `partition` with acks=all; its offset."""
    offsets: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        assert msg.partition() == partition
        offsets.append(msg.offset())

    producer.produce(topic, value=value, key=b"k", partition=partition, on_delivery=on_delivery)
    assert producer.flush(60) == 0
    return offsets[0]


def _leadership_moved_from(cluster: Cluster, leader: int) -> int:
    """Group 0's leader pauses until the others elect another one, then carries on as a
    follower; the new leader, once every node names it."""
    nodes = cluster.nodes
    paused = nodes[leader].process
    assert paused is not None
    others = [n for i, n in nodes.items() if i != leader]

    def successor() -> int:
        seen = {group0_leader(n) for n in others}
        return seen.pop() if len(seen) == 1 and min(seen) not in (-1, leader) else 0

    os.kill(paused.pid, signal.SIGSTOP)
    try:
        elected = int(wait_for(successor))
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    wait_for(lambda: {controller_seen_by(n) for n in nodes.values()} == {elected})
    return elected


def test_confluent_grows_a_topic_through_a_node_that_no_longer_leads_group_0(
    three: Cluster,
) -> None:
    three.create_topic("grown", 3)
    nodes = three.nodes

    def agreed() -> int:
        named = {controller_seen_by(n) for n in nodes.values()}
        return named.pop() if len(named) == 1 and min(named) > 0 else 0

    leader = int(wait_for(agreed))
    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    # librdkafka sends CreatePartitions to the controller its last Metadata named, over its
    # open connection: a first request (validate_only: nothing changes) opens it.
    wait_for(lambda: admin.list_topics(timeout=10).controller_id == leader)
    before = {i: _served(n) for i, n in nodes.items()}

    def served_since() -> dict[int, int]:
        return {i: _served(n) - before[i] for i, n in nodes.items() if _served(n) != before[i]}

    admin.create_partitions([NewPartitions("grown", 5)], validate_only=True)["grown"].result(60)
    assert served_since() == {leader: 1}
    _leadership_moved_from(three, leader)

    grow = admin.create_partitions([NewPartitions("grown", 5)], operation_timeout=30)
    grow["grown"].result(timeout=60)
    assert served_since() == {leader: 2}  # taken by a node that no longer leads group 0
    wait_for(lambda: _led_everywhere(three, "grown", 5))

    offset = _produce_to(three.bootstrap, "grown", 4, b"on the new partition")
    consumed = confluent_consume_all(three.bootstrap, "grown", 5, expected=1)
    assert consumed == [(4, offset, b"k", b"on the new partition")]


def test_kafka_python_grows_a_topic_and_the_errors_are_kafkas(three: Cluster) -> None:
    three.create_topic("kp", 2)
    admin = KafkaAdminClient(bootstrap_servers=three.bootstrap, request_timeout_ms=30000)
    try:
        response = admin.create_partitions({"kp": 4})
        assert [(r.name, r.error_code) for r in response.results] == [("kp", 0)]
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({"kp": 3})
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({"kp": 4})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.create_partitions({"no-such-topic": 4})
    finally:
        admin.close()
    wait_for(lambda: _led_everywhere(three, "kp", 4))

    confluent = AdminClient({"bootstrap.servers": three.bootstrap})
    # validate_only checks and changes nothing; a manual assignment is served as given.
    dry = confluent.create_partitions([NewPartitions("kp", 6)], validate_only=True)
    dry["kp"].result(timeout=60)
    assert len(confluent.list_topics("kp", timeout=10).topics["kp"].partitions) == 4
    bad = confluent.create_partitions([NewPartitions("kp", 5, replica_assignment=[[1, 1, 2]])])
    with pytest.raises(KafkaException) as failure:
        bad["kp"].result(timeout=60)
    assert failure.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    # Another order than placement's own: its first replica is the preferred leader.
    placed = assign_replicas("kp", 5, 3, [1, 2, 3])[4]
    manual = placed[1:] + placed[:1]
    given = confluent.create_partitions([NewPartitions("kp", 5, replica_assignment=[manual])])
    given["kp"].result(timeout=60)
    wait_for(lambda: _led_everywhere(three, "kp", 5))
    md = confluent.list_topics("kp", timeout=10).topics["kp"]
    assert list(md.partitions[4].replicas) == manual


def test_ydb_alter_topic_grows_a_topic_through_the_same_command(three: Cluster) -> None:
    node = three.nodes[2]
    config = ydb.DriverConfig(endpoint=f"grpc://{node.grpc_address}", database="/local")
    driver = ydb.Driver(driver_config=config)
    path = "/local/ydb-grown"
    try:
        driver.wait(timeout=10, fail_fast=True)
        client = driver.topic_client
        _retried(lambda: client.create_topic(path, consumers=["c"], min_active_partitions=2))
        client.alter_topic(path, set_min_active_partitions=3)
        described = client.describe_topic(path)
        assert [p.partition_id for p in described.partitions] == [0, 1, 2]
        with pytest.raises(ydb.BadRequest, match="Invalid total groups count"):
            client.alter_topic(path, set_min_active_partitions=2)
        wait_for(lambda: _led_everywhere(three, "ydb-grown", 3))

        with client.writer(path, producer_id="to-the-new-one", partition_id=2) as writer:
            writer.write_with_ack(b"hello", timeout=60)
        with client.reader(path, consumer="c") as reader:
            batch = reader.receive_batch(timeout=60)
            assert [(m.partition_id, m.data) for m in batch.messages] == [(2, b"hello")]
    finally:
        driver.stop(timeout=10)


def _retried(action: Any) -> Any:
    """The module's cluster may still be electing its metadata leader: retry UNAVAILABLE."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return action()
        except (ydb.Unavailable, ydb.ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_one_node_grows_a_topic_durably(tmp_path: Path) -> None:
    with NodeProcess(tmp_path / "data") as node:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic("solo", 1, 1)])["solo"].result(timeout=30)
        admin.create_partitions([NewPartitions("solo", 3)])["solo"].result(timeout=30)
        offset = _produce_to(node.bootstrap, "solo", 2, b"kept")
        assert node.stop() == 0
        node.start()
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        assert len(admin.list_topics("solo", timeout=10).topics["solo"].partitions) == 3
        consumed = confluent_consume_all(node.bootstrap, "solo", 3, expected=1)
        assert consumed == [(2, offset, b"k", b"kept")]

        config = ydb.DriverConfig(endpoint=f"grpc://{node.grpc_address}", database="/local")
        driver = ydb.Driver(driver_config=config)
        try:
            driver.wait(timeout=10, fail_fast=True)
            client = driver.topic_client
            client.alter_topic("/local/solo", add_consumers=["c"])
            with client.reader("/local/solo", consumer="c") as reader:
                kept = reader.receive_batch(timeout=30)
                assert [(m.partition_id, m.data) for m in kept.messages] == [(2, b"kept")]
                # A reader already reading gets the partition added meanwhile.
                client.alter_topic("/local/solo", set_min_active_partitions=4)
                assert len(client.describe_topic("/local/solo").partitions) == 4
                with client.writer("/local/solo", producer_id="p", partition_id=3) as writer:
                    writer.write_with_ack(b"late", timeout=30)
                late = reader.receive_batch(timeout=30)
                assert [(m.partition_id, m.data) for m in late.messages] == [(3, b"late")]
        finally:
            driver.stop(timeout=10)
        assert len(admin.list_topics("solo", timeout=10).topics["solo"].partitions) == 4
