"""Leader balancing on three real nodes: a topic's partitions are led by their preferred
replicas (the first of each assignment, two per node), lose one node's share to the others
when it is killed, and get it back once it restarts and catches up. And the metadata group
(controller, group coordinator) moves its leader into `--metadata-dc` the same way."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.integration.cluster_support import Cluster
from tests.integration.test_groups_cluster import find_coordinator
from tests.integration.waiting import wait_until

TOPIC = "balanced"
PARTITIONS = 6


def _assignment(cluster: Cluster) -> dict[int, tuple[int, ...]]:
    """partition -> replicas in assignment order, as Metadata reports them."""
    admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
    parts = admin.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions
    return {p: tuple(int(r) for r in part.replicas) for p, part in parts.items()}


# The checks return True once there, anything else is what they saw (for the message);
# errors while leaders move are part of waiting.
_until = partial(
    wait_until,
    timeout=30,
    done=lambda seen: seen is True,
    tolerate=(KafkaException, KeyError, OSError),
)


def test_partition_leaders_return_to_their_preferred_replicas(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, PARTITIONS)
    assignment: dict[int, tuple[int, ...]] = {}

    def known() -> object:
        # The node answering may not have applied the new topic yet.
        assignment.update(_assignment(cluster))
        return len(assignment) == PARTITIONS or assignment

    _until(known, "known to the nodes")
    preferred = {p: replicas[0] for p, replicas in assignment.items()}
    assert sorted(preferred.values()) == [1, 1, 2, 2, 3, 3]

    def balanced() -> object:
        leaders = cluster.leaders(TOPIC)
        return leaders == preferred or leaders

    _until(balanced, "led by the preferred replicas")

    cluster.nodes[1].kill()

    def failed_over() -> object:
        leaders = cluster.leaders(TOPIC)
        on_survivors = sorted(leaders) == sorted(preferred)
        return (on_survivors and all(n in (2, 3) for n in leaders.values())) or leaders

    _until(failed_over, "led by the survivors")

    cluster.nodes[1].start()
    started = time.monotonic()
    # Each node leads two partitions again, the ones it is the first replica of.
    _until(balanced, "back on the preferred replicas after the restart")
    print(f"leaders balanced {time.monotonic() - started:.1f}s after the restart")


# ---- the metadata group ---------------------------------------------------------------------

DCS = {1: "west", 2: "west", 3: "east"}


@pytest.fixture
def dc_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path,
        "--metadata-dc",
        "east",
        node_args=lambda node_id: ("--dc", DCS[node_id]),
    )
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _agreed_on(cluster: Cluster, nodes: set[int]) -> Callable[[], object]:
    """Every live node names the same metadata leader, one of `nodes`. Asked as the group
    coordinator each names: Metadata's controller id is no use here, since a node that
    knows no leader names itself."""

    def check() -> object:
        answers = {find_coordinator(node) for node in cluster.nodes.values() if node.alive()}
        if len(answers) == 1 and next(iter(answers))[0] == 0 and next(iter(answers))[1] in nodes:
            return True
        return answers or None

    return check


def test_the_metadata_leader_moves_into_the_metadata_dc(dc_cluster: Cluster) -> None:
    _until(_agreed_on(dc_cluster, {3}), "the metadata leader on node 3")
    dc_cluster.nodes[3].kill()
    _until(_agreed_on(dc_cluster, {1, 2}), "the metadata leader in west")
    # Node 3 only comes back to leadership by a transfer: the west leader keeps its
    # lease, so no election would hand node 3 the group by chance.
    dc_cluster.nodes[3].start()
    _until(_agreed_on(dc_cluster, {3}), "the metadata leader back in east")
