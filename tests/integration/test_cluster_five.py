"""Five real nodes, topics of replication factor 3: a node hosts only some partitions, yet
Metadata from any node names every partition's leader (learnt from the leaders' gossip),
also after a leader is killed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tests.integration.cluster_support import Cluster

TOPIC = "spread"
PARTITIONS = 5


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, size=5)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _create(cluster: Cluster) -> None:
    deadline = time.monotonic() + 60
    while True:
        admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
        futures = admin.create_topics(
            [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)]
        )
        try:
            futures[TOPIC].result(timeout=30)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _views(cluster: Cluster) -> dict[int, dict[int, tuple[int, tuple[int, ...]]]]:
    """Per live node: partition -> (leader, replicas), as that node's Metadata says."""
    out = {}
    for node_id, node in cluster.nodes.items():
        if not node.alive():
            continue
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        md = admin.list_topics(TOPIC, timeout=10)
        parts = md.topics[TOPIC].partitions
        out[node_id] = {p: (parts[p].leader, tuple(sorted(parts[p].replicas))) for p in parts}
    return out


def _agreed(cluster: Cluster, dead: int | None = None) -> dict[int, int]:
    """Wait until every live node names the same live leader for every partition."""
    deadline = time.monotonic() + 60
    while True:
        try:
            views = _views(cluster)
            first = next(iter(views.values()))
            leaders = {p: lr[0] for p, lr in first.items()}
            if (
                len(first) == PARTITIONS
                and all(v == first for v in views.values())
                and all(lead > 0 and lead != dead for lead in leaders.values())
                and all(lead in first[p][1] for p, lead in leaders.items())
            ):
                return leaders
        except (KafkaException, KeyError, StopIteration):
            pass
        assert time.monotonic() < deadline, "nodes do not agree on the leaders"
        time.sleep(0.3)


def test_every_node_names_every_partitions_leader(cluster: Cluster) -> None:
    _create(cluster)
    leaders = _agreed(cluster)
    views = _views(cluster)
    replicas = {p: r for p, (_, r) in views[1].items()}
    assert all(len(r) == 3 for r in replicas.values())
    # Some node is not a replica of some partition: the case this is about.
    assert any(n not in r for n in cluster.nodes for r in replicas.values())
    # A producer that knows one node only reaches every partition's leader through it.
    producer = Producer({"bootstrap.servers": cluster.nodes[1].bootstrap, "acks": "all"})
    acked: list[int] = []
    for p in range(PARTITIONS):
        producer.produce(
            TOPIC, value=b"p%d" % p, partition=p, on_delivery=lambda e, m: acked.append(e is None)
        )
    assert producer.flush(30) == 0
    assert acked == [True] * PARTITIONS
    # Kill the leader of partition 0: every other node learns its successor.
    victim = leaders[0]
    cluster.nodes[victim].kill()
    after = _agreed(cluster, dead=victim)
    assert after[0] != victim
