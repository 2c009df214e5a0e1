"""Topic configs change through any node (IncrementalAlterConfigs, AlterConfigs: KIP-339,
KIP-590) and take effect on every node; DescribeCluster and DescribeLogDirs describe the
cluster. Real clients (confluent-kafka, kafka-python) against three real node processes
shared by the module; the one-node path is in tests/unit/kafka/test_configs_admin.py."""

from __future__ import annotations

import os
import signal
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType
from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse

from tests.integration.admin_support import wait_for
from tests.integration.cluster_support import Cluster, controller_seen_by, group0_leader
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until

SOURCE_TOPIC_CONFIG = 1
# confluent-kafka deprecates alter_configs (AlterConfigs) in favour of the incremental one;
# clients still send it, so it is served and tested.
pytestmark = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("configs"), "--retention-check-ms", "300") as cluster:
        yield cluster


def _agreed_controller(cluster: Cluster) -> int:
    def agreed() -> int:
        named = {controller_seen_by(n) for n in cluster.nodes.values()}
        return named.pop() if len(named) == 1 and min(named) > 0 else 0

    return int(wait_for(agreed))


def _not_controller(cluster: Cluster) -> tuple[int, NodeProcess]:
    controller = _agreed_controller(cluster)
    return next((i, n) for i, n in cluster.nodes.items() if i != controller)


def _served(node: NodeProcess, api: str) -> int:
    """Requests of `api` this node has read (since it started)."""
    return node.stage_snapshot()[1].get(f"kafka_requests{{api={api}}}", 0)


def _overrides_on(node: NodeProcess, topic: str) -> dict[str, str]:
    """The topic's explicit settings as `node` itself answers DescribeConfigs (a client
    sends it to whichever broker it likes, so over a socket of our own)."""
    request = DescribeConfigsRequest(
        version=1,
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=2, resource_name=topic, configuration_keys=None
            )
        ],
        include_synonyms=False,
    )
    request.with_header(correlation_id=1, client_id="configs-test")
    with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        head = sock.recv(4, socket.MSG_WAITALL)
        assert len(head) == 4, f"{node.bootstrap} closed the connection"
        payload = sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    response = DescribeConfigsResponse.decode(payload[4:], version=1)
    (result,) = response.results
    assert result.error_code == 0, result.error_message
    return {c.name: c.value for c in result.configs if c.config_source == SOURCE_TOPIC_CONFIG}


def _everywhere(cluster: Cluster, topic: str, expected: dict[str, str]) -> None:
    wait_until(
        lambda: all(_overrides_on(n, topic) == expected for n in cluster.nodes.values()),
        f"{topic}'s settings {expected} on every node",
        tolerate=(OSError, AssertionError),
    )


def _incremental(topic: str, **changes: str | None) -> ConfigResource:
    """SET each change, DELETE those given as None."""
    entries = [
        ConfigEntry(
            name,
            value,
            incremental_operation=AlterConfigOpType.SET
            if value is not None
            else AlterConfigOpType.DELETE,
        )
        for name, value in changes.items()
    ]
    return ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)


def _error_of(future: Any) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        future.result(timeout=60)
    error = caught.value.args[0]
    assert isinstance(error, KafkaError)
    return error


def _move_group0_leader(cluster: Cluster, leader: int) -> int:
    """Group 0's leader pauses until the others elect another one, then carries on as a
    follower; the new leader, once every node names it."""
    paused = cluster.nodes[leader].process
    assert paused is not None
    others = [n for i, n in cluster.nodes.items() if i != leader]

    def successor() -> int:
        seen = {group0_leader(n) for n in others}
        return seen.pop() if len(seen) == 1 and min(seen) not in (-1, leader) else 0

    os.kill(paused.pid, signal.SIGSTOP)
    try:
        elected = int(wait_for(successor))
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    wait_for(lambda: {controller_seen_by(n) for n in cluster.nodes.values()} == {elected})
    return elected


def test_confluent_alters_configs_through_a_node_that_no_longer_leads_group_0(
    three: Cluster,
) -> None:
    three.create_topic("altered", 2)
    leader = _agreed_controller(three)
    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    # librdkafka sends config changes to the controller its last Metadata named: a first
    # one (validate_only: nothing changes) opens its connection there.
    wait_for(lambda: admin.list_topics(timeout=10).controller_id == leader)
    check = _incremental("altered", **{"retention.ms": "1"})
    assert admin.incremental_alter_configs([check], validate_only=True)[check].result(60) is None
    _everywhere(three, "altered", {})
    via = three.nodes[leader]
    before = _served(via, "IncrementalAlterConfigs")
    _move_group0_leader(three, leader)

    change = _incremental("altered", **{"retention.ms": "3600000", "segment.bytes": "1048576"})
    assert admin.incremental_alter_configs([change])[change].result(60) is None
    # Taken by a node that no longer leads group 0, and seen by every node.
    assert _served(via, "IncrementalAlterConfigs") == before + 1
    assert _overrides_on(via, "altered") == {"retention.ms": "3600000", "segment.bytes": "1048576"}
    _everywhere(three, "altered", {"retention.ms": "3600000", "segment.bytes": "1048576"})

    # AlterConfigs replaces every override (Kafka's semantics).
    replace = ConfigResource(ResourceType.TOPIC, "altered", set_config={"retention.bytes": "9000"})
    before = _served(via, "AlterConfigs")
    assert admin.alter_configs([replace])[replace].result(60) is None
    assert _served(via, "AlterConfigs") == before + 1
    _everywhere(three, "altered", {"retention.bytes": "9000"})

    removed = _incremental("altered", **{"retention.bytes": None})
    assert admin.incremental_alter_configs([removed])[removed].result(60) is None
    _everywhere(three, "altered", {})


def _produce(bootstrap: str, topic: str, value: bytes, count: int = 1) -> KafkaError | None:
    """Produce `count` messages to partition 0, one a batch; the first delivery error."""
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for _ in range(count):
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
        producer.flush(30)
    assert producer.flush(30) == 0
    return errors[0] if errors else None


def _log_start(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "configs-watermarks"})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low)
    finally:
        consumer.close()


def test_changed_max_message_bytes_and_retention_take_effect(three: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    # Small segments (segment.bytes applies to streams opened with it): retention removes
    # closed segments only.
    created = admin.create_topics(
        [
            NewTopic(name, 1, replication_factor=3, config={"segment.bytes": "2000"})
            for name in ("effect", "aged")
        ]
    )
    for future in created.values():
        future.result(timeout=60)
    assert _produce(three.bootstrap, "effect", b"x" * 3000) is None

    # A smaller max.message.bytes refuses the same message, on whichever node leads.
    limit = _incremental("effect", **{"max.message.bytes": "1000"})
    assert admin.incremental_alter_configs([limit])[limit].result(60) is None
    _everywhere(three, "effect", {"segment.bytes": "2000", "max.message.bytes": "1000"})
    refused = _produce(three.bootstrap, "effect", b"x" * 3000)
    assert refused is not None and refused.code() == KafkaError.MSG_SIZE_TOO_LARGE, refused
    assert _produce(three.bootstrap, "effect", b"small enough") is None

    assert _produce(three.bootstrap, "aged", b"y" * 500, count=12) is None
    assert _log_start(three.bootstrap, "aged") == 0
    aged = _incremental("aged", **{"retention.ms": "1"})
    assert admin.incremental_alter_configs([aged])[aged].result(60) is None
    wait_until(lambda: _log_start(three.bootstrap, "aged") > 0, "retention to trim aged-0")


def test_kafka_python_alters_configs_and_describes_the_cluster(three: Cluster) -> None:
    three.create_topic("kp", 1)
    _, via = _not_controller(three)
    admin = KafkaAdminClient(bootstrap_servers=via.bootstrap, request_timeout_ms=30000)

    def served() -> tuple[int, int]:
        nodes = three.nodes.values()
        return (
            sum(_served(n, "IncrementalAlterConfigs") for n in nodes),
            sum(_served(n, "AlterConfigs") for n in nodes),
        )

    try:
        before = served()
        # IncrementalAlterConfigs (advertised, so kafka-python picks it), then AlterConfigs.
        first = KConfigResource(ConfigResourceType.TOPIC, "kp", configs={"retention.ms": "7"})
        assert admin.alter_configs([first]) == {"topic": {"kp": "OK"}}
        _everywhere(three, "kp", {"retention.ms": "7"})
        second = KConfigResource(ConfigResourceType.TOPIC, "kp", configs={"retention.bytes": "5"})
        assert admin.alter_configs([second], incremental=False) == {"topic": {"kp": "OK"}}
        # kafka-python keeps the other overrides by sending them along.
        _everywhere(three, "kp", {"retention.ms": "7", "retention.bytes": "5"})
        # One of each (kafka-python sends them to the least loaded node).
        assert served() == (before[0] + 1, before[1] + 1)

        cluster = admin.describe_cluster()
        assert {b["broker_id"] for b in cluster["brokers"]} == {1, 2, 3}
        ports = {b["broker_id"]: b["port"] for b in cluster["brokers"]}
        assert ports == {i: n.kafka_port for i, n in three.nodes.items()}
        assert cluster["controller_id"] in {1, 2, 3}
        assert cluster["cluster_id"]
        assert sum(_served(n, "DescribeCluster") for n in three.nodes.values()) >= 1
    finally:
        admin.close()


def test_confluent_describes_the_cluster(three: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": three.bootstrap})
    described = admin.describe_cluster(request_timeout=30).result(timeout=60)
    assert {n.id for n in described.nodes} == {1, 2, 3}
    assert described.controller is not None and described.controller.id in {1, 2, 3}
    assert described.cluster_id


def test_describe_log_dirs_shows_each_replicas_size(three: Cluster) -> None:
    three.create_topic("sized", 2)
    assert _produce(three.bootstrap, "sized", b"z" * 1000, count=3) is None
    admin = KafkaAdminClient(bootstrap_servers=three.bootstrap, request_timeout_ms=30000)
    try:

        def sizes() -> dict[int, dict[int, int]]:
            """node -> partition of "sized" -> its size there."""
            found: dict[int, dict[int, int]] = {}
            for answer in admin.describe_log_dirs({"sized": [0, 1]}):
                (log_dir,) = answer["log_dirs"]
                assert log_dir["error_code"] == 0
                assert log_dir["log_dir"] == str(three.nodes[answer["broker"]].data_dir.resolve())
                found[answer["broker"]] = {
                    p["partition_index"]: p["partition_size"]
                    for t in log_dir["topics"]
                    if t["name"] == "sized"
                    for p in t["partitions"]
                    if not p["is_future_key"] and p["offset_lag"] >= 0
                }
            return found

        # Every node holds a replica of both partitions; 0 was produced to, 1 was not.
        seen = wait_until(
            sizes,
            "partition 0's replicas to hold the records",
            done=lambda s: len(s) == 3 and all(p[0] >= 3000 and 1 in p for p in s.values()),
            tolerate=(AssertionError, KeyError),
        )
        assert all(p[1] < 1000 for p in seen.values())
    finally:
        admin.close()


def test_refusals_are_kafkas_and_the_node_keeps_serving(three: Cluster) -> None:
    three.create_topic("strict", 1)
    _, via = _not_controller(three)
    admin = AdminClient({"bootstrap.servers": via.bootstrap})
    cases = [
        (_incremental("no-such-topic", **{"retention.ms": "1"}), KafkaError.UNKNOWN_TOPIC_OR_PART),
        (_incremental("strict", **{"no.such.setting": "1"}), KafkaError.INVALID_CONFIG),
        (_incremental("strict", **{"retention.ms": "a while"}), KafkaError.INVALID_CONFIG),
        (_incremental("strict", **{"message.timestamp.type": "Now"}), KafkaError.INVALID_CONFIG),
        (
            ConfigResource(
                ResourceType.BROKER,
                "1",
                incremental_configs=[
                    ConfigEntry(
                        "log.retention.ms", "1", incremental_operation=AlterConfigOpType.SET
                    )
                ],
            ),
            KafkaError.INVALID_CONFIG,
        ),
    ]
    for resource, code in cases:
        error = _error_of(admin.incremental_alter_configs([resource])[resource])
        assert error.code() == code, (resource, error)
    named = _error_of(admin.incremental_alter_configs([cases[1][0]])[cases[1][0]])
    assert "no.such.setting" in named.str()
    bad = _error_of(admin.incremental_alter_configs([cases[2][0]])[cases[2][0]])
    assert "retention.ms" in bad.str()
    # AlterConfigs is checked the same way.
    replaced = ConfigResource(ResourceType.TOPIC, "strict", set_config={"retention.bytes": "x"})
    assert _error_of(admin.alter_configs([replaced])[replaced]).code() == KafkaError.INVALID_CONFIG
    # Nothing changed, the node is up, and a good request is served.
    _everywhere(three, "strict", {})
    assert via.alive()
    good = _incremental("strict", **{"retention.ms": "60000"})
    assert admin.incremental_alter_configs([good])[good].result(60) is None
    _everywhere(three, "strict", {"retention.ms": "60000"})
