"""DeleteGroups, OffsetDelete and ElectLeaders on three real nodes, through the admin
clients of confluent-kafka and kafka-python.

A consumer group that consumed and committed is deleted and then starts over from its
reset policy; a group with a live member is refused (NON_EMPTY_GROUP, and
GROUP_SUBSCRIBED_TO_TOPIC for the offsets of a topic it subscribes to); a non-coordinator
answers NOT_COORDINATOR. A partition's leadership, moved off its preferred replica by
killing that node, is back there when the preferred election answers (marked slow).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ElectionType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    ElectionNotNeededError,
    GroupSubscribedToTopicError,
    InvalidRequestError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoError,
    PreferredLeaderNotAvailableError,
    UnknownTopicOrPartitionError,
    for_code,
)
from kafka.protocol.admin.groups import DeleteGroupsRequest, DeleteGroupsResponse

from tests.integration.cluster_support import Cluster, controller_seen_by, partition_seen_by
from tests.integration.kafka_clients import confluent_produce
from tests.integration.test_groups_cluster import find_coordinator
from tests.integration.waiting import wait_until

TOPIC = "ledger"
OTHER = "audit"
ELECTED = "elected"
PARTITIONS = 3
MESSAGES = 30
NOT_COORDINATOR = 16
GROUP_ID_NOT_FOUND = "GroupIdNotFoundError"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("groups-admin")
    with Cluster(root, "--group-initial-rebalance-delay-ms", "100") as c:
        c.create_topic(TOPIC, PARTITIONS)
        c.create_topic(OTHER, 1)
        c.create_topic(ELECTED, 1)
        confluent_produce(c.bootstrap, TOPIC, [(b"k%d" % i, b"m%d" % i) for i in range(MESSAGES)])
        yield c


def _consumer(cluster: Cluster, group: str, **extra: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.alive_bootstrap(),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def _consume_all(consumer: Consumer) -> int:
    """Subscribe to TOPIC and read until MESSAGES arrived; commit them."""
    consumer.subscribe([TOPIC])
    got = 0

    def step() -> int:
        nonlocal got
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
        return got

    wait_until(step, f"{MESSAGES} messages consumed", every=0, done=lambda n: n >= MESSAGES)
    consumer.commit(asynchronous=False)
    return got


def _state(admin: AdminClient, group: str) -> ConsumerGroupState:
    described = admin.describe_consumer_groups([group])[group].result(timeout=10)
    state: ConsumerGroupState = described.state
    return state


def _listed_anywhere(cluster: Cluster, group: str) -> bool:
    """Whether ListGroups, asked with each node alone as the bootstrap, lists `group`."""
    for node in cluster.nodes.values():
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        listed = admin.list_consumer_groups().result(timeout=10)
        if group in {g.group_id for g in listed.valid}:
            return True
    return False


def _kafka_python_admin(cluster: Cluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.alive_bootstrap(), request_timeout_ms=30000)


def test_a_deleted_group_starts_over_from_its_reset_policy(cluster: Cluster) -> None:
    group = "deleted-and-back"
    consumer = _consumer(cluster, group)
    try:
        assert _consume_all(consumer) == MESSAGES
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
    wait_until(lambda: _state(admin, group), "the group empty", done=lambda s: s.name == "EMPTY")
    assert _listed_anywhere(cluster, group)

    results = admin.delete_consumer_groups([group], request_timeout=30)
    assert results[group].result(timeout=30) is None
    assert not _listed_anywhere(cluster, group)
    # Deleting it again: it is gone.
    again = admin.delete_consumer_groups([group], request_timeout=30)[group]
    with pytest.raises(KafkaException) as gone:
        again.result(timeout=30)
    assert gone.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND

    # No committed offsets left: a new member reads everything again from "earliest".
    fresh = _consumer(cluster, group)
    try:
        assert _consume_all(fresh) == MESSAGES
    finally:
        fresh.close()


def test_a_group_with_a_member_keeps_what_it_uses(cluster: Cluster) -> None:
    group = "live-member"
    member = _consumer(cluster, group)
    python_admin = _kafka_python_admin(cluster)
    try:
        _consume_all(member)
        # A commit on a topic the member does not subscribe to (as a standalone commit).
        member.commit(offsets=[TopicPartition(OTHER, 0, 7)], asynchronous=False)
        admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
        refused = admin.delete_consumer_groups([group], request_timeout=30)[group]
        with pytest.raises(KafkaException) as non_empty:
            refused.result(timeout=30)
        assert non_empty.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

        # OffsetDelete (KIP-496): the subscribed topic's offsets stay, the other goes.
        deleted = python_admin.delete_group_offsets(
            group,
            [KafkaPythonTopicPartition(TOPIC, 0), KafkaPythonTopicPartition(OTHER, 0)],
        )
        assert deleted == {
            KafkaPythonTopicPartition(TOPIC, 0): GroupSubscribedToTopicError,
            KafkaPythonTopicPartition(OTHER, 0): NoError,
        }
        committed = member.committed(
            [TopicPartition(TOPIC, 0), TopicPartition(OTHER, 0)], timeout=10
        )
        offsets = {(tp.topic, tp.partition): tp.offset for tp in committed}
        assert offsets[(OTHER, 0)] < 0  # deleted: nothing committed
        assert offsets[(TOPIC, 0)] >= 0
    finally:
        member.close()

    # kafka-python's delete_groups, once the member has left; an unknown group is named.
    def delete() -> dict[str, str]:
        answer: dict[str, str] = python_admin.delete_groups([group, "never-was"])
        return answer

    try:
        results = wait_until(
            delete, "the group deleted", done=lambda r: r.get(group) != "NonEmptyGroupError"
        )
        assert results == {group: "OK", "never-was": GROUP_ID_NOT_FOUND}
    finally:
        python_admin.close()
    assert not _listed_anywhere(cluster, group)


def _raw_delete_groups(port: int, groups: list[str]) -> dict[str, int]:
    request = DeleteGroupsRequest(groups_names=groups, version=1)
    request.with_header(correlation_id=7, client_id="groups-admin-test")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        payload = sock.recv(size, socket.MSG_WAITALL)
    response = DeleteGroupsResponse.decode(payload[4:], version=1)
    return {r.group_id: int(r.error_code) for r in response.results}


def test_only_the_coordinator_deletes_groups(cluster: Cluster) -> None:
    _, coordinator = wait_until(
        lambda: find_coordinator(cluster.nodes[1]), "a coordinator", done=lambda a: a[0] == 0
    )
    other = next(n for i, n in cluster.nodes.items() if i != coordinator)
    assert _raw_delete_groups(other.kafka_port, ["whatever"]) == {"whatever": NOT_COORDINATOR}
    assert _raw_delete_groups(cluster.nodes[coordinator].kafka_port, ["whatever"]) == {
        "whatever": 69  # GROUP_ID_NOT_FOUND
    }


def _partition_errors(response: Any) -> dict[tuple[str, int], type]:
    return {
        (result.topic, p.partition_id): for_code(p.error_code)
        for result in response.replica_election_results
        for p in result.partition_result
    }


def test_an_election_where_the_preferred_replica_leads(cluster: Cluster) -> None:
    preferred = cluster.wait_for_preferred_leader(ELECTED)
    admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
    tp = TopicPartition(ELECTED, 0)
    # confluent-kafka gives each partition's error in the future's result.
    not_needed = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(timeout=30)[tp]
    assert not_needed is not None
    assert not_needed.code() == KafkaError.ELECTION_NOT_NEEDED
    python_admin = _kafka_python_admin(cluster)
    try:
        unclean = python_admin.elect_leaders(1, {ELECTED: [0]}, raise_errors=False)
        assert _partition_errors(unclean) == {(ELECTED, 0): InvalidRequestError}
        unknown = python_admin.elect_leaders(0, {"no-such-topic": [0]}, raise_errors=False)
        assert _partition_errors(unknown) == {("no-such-topic", 0): UnknownTopicOrPartitionError}
    finally:
        python_admin.close()
    assert cluster.leaders(ELECTED)[0] == preferred


@pytest.mark.slow
def test_a_preferred_election_brings_leadership_back(cluster: Cluster) -> None:
    """Kills and restarts a node (4 to 14 s): the last test of the module."""
    preferred = cluster.wait_for_preferred_leader(ELECTED)
    cluster.nodes[preferred].kill()
    survivors = [n for i, n in cluster.nodes.items() if i != preferred]

    def moved_away() -> object:
        # A new leader, which no longer counts the killed node in sync, and a
        # controller (the metadata group's leader) the survivors agree on.
        leader = partition_seen_by(survivors[0], ELECTED)[1]
        seen = partition_seen_by(cluster.nodes[leader], ELECTED) if leader > 0 else None
        controllers = {controller_seen_by(n) for n in survivors}
        return (
            seen is not None
            and leader != preferred
            and preferred not in seen[3]
            and len(controllers) == 1
            and controllers != {preferred}
        )

    wait_until(moved_away, "leadership off the killed node", tolerate=(OSError, KeyError))
    python_admin = _kafka_python_admin(cluster)
    try:
        # Metadata still lists the killed node, and kafka-python may pick it to ask for
        # the controller: such a refused connection is tried again.
        unavailable = wait_until(
            lambda: python_admin.elect_leaders(
                0, {ELECTED: [0]}, timeout_ms=2000, raise_errors=False
            ),
            "an answer from the controller",
            tolerate=(KafkaConnectionError,),
        )
        assert _partition_errors(unavailable) == {(ELECTED, 0): PreferredLeaderNotAvailableError}

        cluster.nodes[preferred].start()
        # Once the preferred replica is back in sync the election answers with it leading.
        back = wait_until(
            lambda: _partition_errors(
                python_admin.elect_leaders(0, {ELECTED: [0]}, timeout_ms=20000, raise_errors=False)
            ),
            "the preferred election",
            done=lambda errors: errors[(ELECTED, 0)] in (NoError, ElectionNotNeededError),
            tolerate=(OSError, KafkaConnectionError, KafkaTimeoutError),
        )
        assert back[(ELECTED, 0)] in (NoError, ElectionNotNeededError)
        # Every node names it (one that answered before the move may still name the old one).
        wait_until(
            lambda: cluster.leaders(ELECTED)[0] == preferred,
            "the preferred replica named as leader",
            tolerate=(KafkaException, KeyError),
        )
    finally:
        python_admin.close()
