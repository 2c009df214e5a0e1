"""Topic ids on the wire (KIP-516: Metadata v10-12, CreateTopics v7, DeleteTopics v6, in
their flexible versions, KIP-482), CreateTopics with a manual replica assignment and
`compression.type`. Real clients against real node processes: one node shared by the
module, and three nodes for placement."""

from __future__ import annotations

import socket
import struct
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)
from kafka import KafkaAdminClient
from kafka.errors import (
    InvalidReplicationAssignmentError,
    InvalidRequestError,
    UnknownTopicIdError,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from tests.integration.cluster_support import Cluster
from tests.integration.kafka_clients import confluent_consume_all
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until

UNKNOWN_TOPIC_ID = 100
INVALID_REQUEST = 42


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("ids") / "node") as started:
        yield started


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("ids3")) as cluster:
        # Returns once the metadata group has a leader and takes topic changes.
        cluster.create_topic("first", 1)
        yield cluster


def _metadata(port: int, version: int, topics: list[Any] | None, **fields: Any) -> Any:
    """Metadata at `version`, asked over a socket of our own; `topics` as (name, id)."""
    entries = None
    if topics is not None:
        entries = [
            MetadataRequest.MetadataRequestTopic(name=name, topic_id=topic_id)
            if version >= 10
            else MetadataRequest.MetadataRequestTopic(name=name)
            for name, topic_id in topics
        ]
    request = MetadataRequest(version=version, topics=entries, **fields)
    request.with_header(correlation_id=7, client_id="topic-ids-test")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        head = sock.recv(4, socket.MSG_WAITALL)
        assert len(head) == 4, "the node closed the connection"
        body = sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    return MetadataResponse.decode(head + body, version=version, header=True, framed=True)


def _kafka_python_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


def _created_id(bootstrap: str, name: str, partitions: int) -> uuid.UUID:
    """Create a topic with kafka-python (CreateTopics v7): the id the node answered."""
    admin = _kafka_python_admin(bootstrap)
    try:
        result = admin.create_topics({name: {"num_partitions": partitions}})
    finally:
        admin.close()
    [topic] = result["topics"]
    assert topic["error_code"] == 0 and topic["num_partitions"] == partitions, topic
    # From v5 the answer carries the topic's configs, defaults included.
    assert topic["configs"]["compression.type"]["value"] == "producer"
    topic_id = uuid.UUID(str(topic["topic_id"]))
    assert topic_id.int != 0
    return topic_id


def _recreated_topic_is_followed(bootstrap: str, topic: str, create: Any) -> None:
    """A confluent-kafka producer writes to `topic` (10 partitions); the topic is deleted
    and created again with 3; once the producer has the new metadata, everything it
    produces lands on partitions 0-2 and is read back."""
    create(topic, 10)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    delivered: Counter[tuple[str | None, int]] = Counter()

    def on_delivery(err: Any, msg: Any) -> None:
        delivered[(err.name() if err else None, msg.partition())] += 1

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(100):
        producer.produce(topic, key=b"%d" % i, value=b"old", on_delivery=on_delivery)
    assert producer.flush(60) == 0
    assert sum(n for (err, _), n in delivered.items() if err is None) == 100, delivered
    assert {p for _, p in delivered} == set(range(10))

    admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
    wait_until(
        lambda: topic not in admin.list_topics(timeout=10).topics, f"{topic} gone", timeout=30
    )
    create(topic, 3)

    def producer_sees_three() -> bool:
        seen = producer.list_topics(topic, timeout=10).topics[topic]
        return seen.error is None and sorted(seen.partitions) == [0, 1, 2]

    wait_until(producer_sees_three, "the producer seeing 3 partitions", timeout=30)
    delivered.clear()
    for i in range(100):
        producer.produce(topic, key=b"%d" % i, value=b"new", on_delivery=on_delivery)
    assert producer.flush(60) == 0
    # Without topic ids librdkafka kept 10 partitions: keys hashed to 3-9 never arrived.
    assert {err for err, _ in delivered} == {None}, delivered
    assert sum(delivered.values()) == 100 and {p for _, p in delivered} <= {0, 1, 2}
    read = confluent_consume_all(bootstrap, topic, 3, expected=100, idle=3)
    assert sorted(key or b"" for _, _, key, _ in read) == sorted(b"%d" % i for i in range(100))
    assert {value for *_, value in read} == {b"new"}


def test_a_running_producer_follows_a_topic_deleted_and_created_again(
    node: NodeProcess,
) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})

    def create(name: str, partitions: int) -> None:
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)

    _recreated_topic_is_followed(node.bootstrap, "recreated", create)


def test_metadata_v12_gives_and_finds_the_topic_by_its_id(node: NodeProcess) -> None:
    topic_id = _created_id(node.bootstrap, "with-id", 2)
    by_name = _metadata(node.kafka_port, 12, [("with-id", None)], allow_auto_topic_creation=False)
    [entry] = by_name.topics
    assert (entry.error_code, entry.name, entry.topic_id) == (0, "with-id", topic_id)
    assert entry.is_internal is False
    # Not requested: INT32_MIN (KIP-430), which kafka-python reads as None.
    assert entry.authorized_operations is None
    for partition in entry.partitions:
        assert (partition.leader_id, partition.leader_epoch) == (1, 1)  # one node: epoch 1
        assert (partition.replica_nodes, partition.isr_nodes) == ([1], [1])
        assert partition.offline_replicas == []
    assert sorted(p.partition_index for p in entry.partitions) == [0, 1]

    by_id = _metadata(node.kafka_port, 12, [(None, topic_id)], allow_auto_topic_creation=True)
    assert [(t.error_code, t.name, t.topic_id) for t in by_id.topics] == [(0, "with-id", topic_id)]
    unknown = uuid.uuid4()
    missing = _metadata(node.kafka_port, 12, [(None, unknown)], allow_auto_topic_creation=True)
    assert [(t.error_code, t.name, t.topic_id) for t in missing.topics] == [
        (UNKNOWN_TOPIC_ID, None, unknown)
    ]
    # v10-11 take names only (as Kafka: INVALID_REQUEST for a topic by id there).
    old = _metadata(node.kafka_port, 10, [(None, topic_id)], allow_auto_topic_creation=False)
    assert [t.error_code for t in old.topics] == [INVALID_REQUEST]
    # Asked for: the operations this (unsecured) node allows, as a KIP-430 bitfield.
    asked = _metadata(
        node.kafka_port,
        10,
        [("with-id", None)],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )
    [entry] = asked.topics
    assert entry.topic_id == topic_id
    # (Kafka's AclOperation codes: read 3 ... describe 8, describe_configs 10,
    # alter_configs 11, idempotent_write 12.)
    assert entry.authorized_operations == {3, 4, 5, 6, 7, 8}
    assert asked.authorized_operations == {5, 7, 8, 10, 11, 12}
    # An all-topics request at v9 (flexible, no ids yet) still lists it.
    everything = _metadata(node.kafka_port, 9, None, allow_auto_topic_creation=False)
    assert "with-id" in {t.name for t in everything.topics}
    # A client library on the same node is served as before.
    described = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=10)
    assert len(described.topics["with-id"].partitions) == 2


def test_delete_topics_by_id(node: NodeProcess) -> None:
    topic_id = _created_id(node.bootstrap, "doomed", 1)
    admin = _kafka_python_admin(node.bootstrap)
    try:
        with pytest.raises(UnknownTopicIdError):
            admin.delete_topics([uuid.uuid4()])
        result = admin.delete_topics([topic_id])
        assert [(t["name"], t["topic_id"], t["error_code"]) for t in result["topics"]] == [
            ("doomed", str(topic_id), 0)
        ]
        listed = _metadata(node.kafka_port, 12, None, allow_auto_topic_creation=False)
        assert "doomed" not in {t.name for t in listed.topics}
        # Created again under the name: a new id.
        assert _created_id(node.bootstrap, "doomed", 1) != topic_id
    finally:
        admin.close()


def test_manual_assignment_on_one_node(node: NodeProcess) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic("placed1", 2, replica_assignment=[[1], [1]])])["placed1"].result(
        30
    )
    assert sorted(admin.list_topics("placed1", timeout=10).topics["placed1"].partitions) == [0, 1]
    refused = admin.create_topics([NewTopic("elsewhere", 1, replica_assignment=[[2]])])
    with pytest.raises(KafkaException) as caught:
        refused["elsewhere"].result(30)
    assert caught.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert "broker(s) [2]" in caught.value.args[0].str()
    kp = _kafka_python_admin(node.bootstrap)
    try:
        # Kafka refuses a count or factor next to an assignment.
        with pytest.raises(InvalidRequestError):
            kp.create_topics({"both": {"num_partitions": 1, "assignments": {0: [1]}}})
    finally:
        kp.close()
    assert "elsewhere" not in admin.list_topics(timeout=10).topics


def test_compression_type_producer_is_kept_and_recompression_refused(node: NodeProcess) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    kept = admin.create_topics([NewTopic("kept", 1, 1, config={"compression.type": "producer"})])
    kept["kept"].result(30)
    refused = admin.create_topics([NewTopic("zipped", 1, 1, config={"compression.type": "gzip"})])
    with pytest.raises(KafkaException) as caught:
        refused["zipped"].result(30)
    error = caught.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "compression.type=gzip is not supported" in error.str()
    for name, source in (("kept", "DYNAMIC_TOPIC_CONFIG"), ("with-default", "DEFAULT_CONFIG")):
        if name == "with-default":
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
        resource = ConfigResource("topic", name)
        configs = admin.describe_configs([resource])[resource].result(30)
        entry = configs["compression.type"]
        assert (entry.value, entry.source) == ("producer", _source(source))
    assert "zipped" not in admin.list_topics(timeout=10).topics


def _source(name: str) -> int:
    from confluent_kafka.admin import ConfigSource  # type: ignore[attr-defined]

    return int(ConfigSource[name].value)


# ---- three nodes -----------------------------------------------------------------------


def test_manual_assignment_places_replicas_exactly(three: Cluster) -> None:
    assignment = [[2, 3], [3, 1], [1, 2], [2, 1]]
    admin = AdminClient({"bootstrap.servers": three.bootstrap})

    futures = admin.create_topics(
        [NewTopic("placed", len(assignment), replica_assignment=assignment)]
    )
    futures["placed"].result(30)

    def placed() -> bool:
        for one in three.nodes.values():
            md = _metadata(one.kafka_port, 12, [("placed", None)], allow_auto_topic_creation=False)
            [topic] = md.topics
            parts = {p.partition_index: p for p in topic.partitions}
            if sorted(parts) != [0, 1, 2, 3]:
                return False
            for index, replicas in enumerate(assignment):
                if parts[index].replica_nodes != replicas:
                    return False
                if parts[index].leader_id not in replicas:
                    return False
        return True

    wait_until(placed, "exactly that placement, with leaders among the replicas")

    kp = _kafka_python_admin(three.bootstrap)
    try:
        bad = {
            "unknown-node": {0: [1, 4]},
            "twice": {0: [1, 1]},
            "uneven": {0: [1, 2], 1: [3]},
            "gap": {0: [1], 2: [2]},
        }
        for name, assignments in bad.items():
            with pytest.raises(InvalidReplicationAssignmentError):
                kp.create_topics({name: {"assignments": assignments}})
        assert not set(admin.list_topics(timeout=10).topics) & set(bad)
        # A legitimate client is served after them.
        ok = kp.create_topics({"after-bad": {"assignments": {0: [3], 1: [1]}}})
        assert [t["error_code"] for t in ok["topics"]] == [0]
    finally:
        kp.close()


def test_topic_ids_agree_on_every_node_and_a_recreated_topic_is_followed(
    three: Cluster,
) -> None:
    topic_id = _created_id(three.bootstrap, "agreed", 3)

    def agreed() -> bool:
        ids = set()
        for one in three.nodes.values():
            md = _metadata(one.kafka_port, 12, [("agreed", None)], allow_auto_topic_creation=False)
            ids |= {t.topic_id for t in md.topics if t.error_code == 0}
        return ids == {topic_id}

    # Each node reads it from its copy of the metadata group's state.
    wait_until(agreed, "every node giving the id CreateTopics answered")

    def create(name: str, partitions: int) -> None:
        three.create_topic(name, partitions)

    _recreated_topic_is_followed(three.bootstrap, "recreated3", create)
