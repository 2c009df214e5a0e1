"""ElectLeaders acts (KIP-460): on three real nodes that never balance leaders on their own
(`--leader-rebalance false`), a preferred election through confluent-kafka's and
kafka-python's admin clients moves each partition's leadership back to its preferred
replica, whichever node takes the request.

The topic's three partitions all prefer node 1 (a manual assignment). Node 1 is killed,
so others lead, and started again: with balancing off the leaders stay where they are
until an election asks the leader to hand over. confluent-kafka elects partition 0,
kafka-python partition 1 (both send to the controller), and a request sent to node 1
itself, which does not lead partition 2, is passed on to that partition's leader.
Malformed election messages on the raft port cost one log line, and the node goes on
serving. Marked slow: a cluster of its own, and node 1 killed and restarted (about 25 s).
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaConnectionError, NoError, for_code
from kafka.protocol.admin.topics import ElectLeadersRequest, ElectLeadersResponse

from tests.integration.cluster_support import Cluster, partition_seen_by
from tests.integration.kafka_clients import confluent_produce
from tests.integration.waiting import wait_until
from vdl.consensus.frames import encode_forward, encode_hello

pytestmark = pytest.mark.slow

TOPIC = "elect"
PREFERRED = 1
PARTITIONS = 3
# The highest id: it dials nobody, so it takes a hello from node 1 (as test_raft_port).
TARGET = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("elect-active"),
        "--leader-rebalance",
        "false",
        "--raft-insecure",
        "true",
    )
    try:
        c.start()
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        topic = NewTopic(
            TOPIC,
            PARTITIONS,
            replica_assignment=[[PREFERRED, 2, 3], [PREFERRED, 3, 2], [PREFERRED, 2, 3]],
        )
        # The metadata group may still be electing its first leader: ask until it is there.
        wait_until(
            lambda: (
                TOPIC in admin.list_topics(timeout=5).topics
                or admin.create_topics([topic])[TOPIC].exception(timeout=30) is None
            ),
            "the topic created",
            tolerate=(KafkaException,),
        )
        yield c
    finally:
        c.stop()


def _leaders(cluster: Cluster) -> dict[int, int]:
    return {p: cluster.wait_for_leader(TOPIC, p) for p in range(PARTITIONS)}


def elect_through(node: int, cluster: Cluster, partition: int) -> Any:
    """A preferred ElectLeaders v1 for one partition, sent to `node` itself."""
    request = ElectLeadersRequest(
        version=1,
        election_type=0,
        topic_partitions=[ElectLeadersRequest.TopicPartitions(topic=TOPIC, partitions=[partition])],
        timeout_ms=30000,
    )
    request.with_header(correlation_id=1, client_id="elect-test")
    port = cluster.nodes[node].kafka_port
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        head = sock.recv(4, socket.MSG_WAITALL)
        body = sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    return ElectLeadersResponse.decode(head + body, version=1, header=True, framed=True)


def test_malformed_election_messages_cost_a_log_line(cluster: Cluster) -> None:
    _leaders(cluster)
    bodies = [
        {"op": "elect_preferred"},
        {"op": "elect_preferred", "topic": ["x"], "partition": 0},
        {"op": "elect_preferred", "topic": TOPIC, "partition": True},
        {"op": "elect_preferred", "topic": TOPIC, "partition": "0"},
        {"op": "elect_preferred", "topic": TOPIC, "partition": 99},
        {"op": "elect_preferred", "topic": TOPIC, "partition": -1},
        {"op": "elect_preferred", "topic": "no-such-topic", "partition": 0},
    ]
    frames = b"".join(encode_forward(json.dumps(body).encode()) for body in bodies)
    with socket.create_connection(("127.0.0.1", cluster.raft_ports[TARGET]), timeout=10) as sock:
        sock.sendall(encode_hello(1) + frames)
    node = cluster.nodes[TARGET]
    wait_until(
        lambda: node.log().count("ignoring an elect_preferred request") >= 4,
        "the malformed requests logged",
    )
    assert node.alive()
    # A legitimate client is served.
    acked = confluent_produce(cluster.bootstrap, TOPIC, [(b"k", b"after")])
    assert sum(len(offsets) for offsets in acked.values()) == 1


def _errors(response: Any) -> dict[tuple[str, int], type]:
    return {
        (result.topic, p.partition_id): for_code(p.error_code)
        for result in response.replica_election_results
        for p in result.partition_result
    }


def test_preferred_elections_move_leadership_back(cluster: Cluster) -> None:
    """Kills and restarts node 1 (a few seconds)."""
    cluster.nodes[PREFERRED].kill()
    for partition in range(PARTITIONS):
        cluster.wait_for_leader(TOPIC, partition, exclude=PREFERRED)
    cluster.nodes[PREFERRED].start()
    leaders = _leaders(cluster)
    assert PREFERRED not in leaders.values()

    def back_in_sync() -> bool:
        # The partitions' leaders count node 1 in sync again.
        return all(
            PREFERRED in partition_seen_by(cluster.nodes[leaders[p]], TOPIC, p)[3]
            for p in range(PARTITIONS)
        )

    wait_until(back_in_sync, "node 1 in sync", tolerate=(OSError, KeyError))
    # Balancing is off: the leaders have not moved by themselves.
    assert _leaders(cluster) == leaders

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    tp = TopicPartition(TOPIC, 0)
    result = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(timeout=60)
    assert result == {tp: None}
    wait_until(
        lambda: cluster.leaders(TOPIC)[0] == PREFERRED,
        "node 1 named leader of partition 0",
        tolerate=(KafkaException, KeyError),
    )

    python_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=60000)
    try:
        answer = wait_until(
            lambda: python_admin.elect_leaders(
                0, {TOPIC: [1]}, timeout_ms=30000, raise_errors=False
            ),
            "an answer from the controller",
            tolerate=(KafkaConnectionError,),
        )
    finally:
        python_admin.close()
    assert _errors(answer) == {(TOPIC, 1): NoError}
    wait_until(
        lambda: cluster.leaders(TOPIC)[1] == PREFERRED,
        "node 1 named leader of partition 1",
        tolerate=(KafkaException, KeyError),
    )

    # Node 1 does not lead partition 2: it asks the leader (a raft forward frame).
    assert _leaders(cluster)[2] != PREFERRED
    assert _errors(elect_through(PREFERRED, cluster, 2)) == {(TOPIC, 2): NoError}
    wait_until(
        lambda: cluster.leaders(TOPIC) == {p: PREFERRED for p in range(PARTITIONS)},
        "node 1 named leader of every partition",
        tolerate=(KafkaException, KeyError),
    )
    # The leaders handed over because they were asked (balancing is off).
    logs = "".join(node.log() for node in cluster.nodes.values())
    assert logs.count("ElectLeaders hands leadership to node 1") >= PARTITIONS
    # The new leader serves.
    acked = confluent_produce(cluster.bootstrap, TOPIC, [(b"k", b"v")] * 5)
    assert sum(len(offsets) for offsets in acked.values()) == 5
