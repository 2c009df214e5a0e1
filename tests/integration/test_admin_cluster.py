"""The admin listener on a 3-node cluster: replication lag and under-replicated partitions
as a follower dies and comes back, and readiness while a node drains for shutdown."""

from __future__ import annotations

import os
import signal
import threading

from confluent_kafka import KafkaError, Producer

from tests.integration.admin_support import Samples, get, get_json, scrape, value, wait_for
from tests.integration.cluster_support import Cluster

TOPIC = "admin-lag"


def _produce(bootstrap: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(TOPIC, value=b"x" * 100, key=str(i).encode())
    assert producer.flush(60) == 0


def test_a_dead_follower_shows_as_lag_and_under_replication_until_it_is_back(
    cluster: Cluster,
) -> None:
    cluster.create_topic(TOPIC, 1)
    # The preferred replica leads for the whole test: another leader would hand it the
    # partition (leader balancing), and the follower killed here would take it back.
    leader = cluster.wait_for_preferred_leader(TOPIC)
    follower = next(i for i in cluster.nodes if i != leader)
    base = cluster.nodes[leader].admin_url
    labels = {"topic": TOPIC, "partition": "0"}
    _produce(cluster.alive_bootstrap(), 20)

    def healthy() -> bool:
        samples = scrape(base)
        return (
            value(samples, "vdl_under_replicated_partitions") == 0
            and value(samples, "vdl_partition_in_sync_replicas", **labels) == 3
            and value(samples, "vdl_raft_role", group=_group(samples), role="leader", **labels) == 1
        )

    wait_for(healthy)

    cluster.nodes[follower].kill()
    _produce(cluster.alive_bootstrap(), 50)

    def lagging() -> bool:
        samples = scrape(base)
        lag = _follower_lag(samples, follower)
        lag_bytes = _follower_lag(samples, follower, "bytes")
        return (
            value(samples, "vdl_under_replicated_partitions") == 1
            and value(samples, "vdl_partition_in_sync_replicas", **labels) == 2
            and lag is not None
            and lag > 0
            # 50 records of 100 bytes at least are missing on the dead follower.
            and lag_bytes is not None
            and lag_bytes > 50 * 100
        )

    wait_for(lagging)
    _, view = get_json(base + "/v1/partitions")
    row = next(p for p in view["partitions"] if p["topic"] == TOPIC)
    assert follower not in row["isr"] and row["high_watermark"] == 70, row
    behind = next(f for f in row["followers"] if f["node_id"] == follower)
    assert behind["lag"] > 0 and behind["lag_bytes"] > 50 * 100, behind

    def seen_down() -> bool:
        _, nodes = get_json(base + "/v1/cluster")
        states = {n["node_id"]: n["state"] for n in nodes["nodes"]}
        return states[follower] == "down" and states[leader] == "self"

    wait_for(seen_down)

    cluster.nodes[follower].start()

    def caught_up() -> bool:
        samples = scrape(base)
        lag = _follower_lag(samples, follower)
        lag_bytes = _follower_lag(samples, follower, "bytes")
        return value(samples, "vdl_under_replicated_partitions") == 0 and lag == lag_bytes == 0

    wait_for(caught_up, timeout=60)


def _follower_lag(samples: Samples, follower: int, unit: str = "entries") -> float | None:
    labels = {"group": _group(samples), "topic": TOPIC, "partition": "0"}
    return value(samples, f"vdl_raft_follower_lag_{unit}", follower=str(follower), **labels)


def _group(samples: Samples) -> str:
    """The raft group id of the test's partition, as the metrics label it."""
    for name, labels in samples:
        lab = dict(labels)
        if name == "vdl_raft_term" and lab.get("topic") == TOPIC:
            return lab["group"]
    raise KeyError("no raft group of the topic in the metrics")


def test_a_draining_node_answers_503_on_ready(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, 1)
    leader = cluster.wait_for_preferred_leader(TOPIC)
    _produce(cluster.alive_bootstrap(), 5)
    others = [n for i, n in cluster.nodes.items() if i != leader]
    node = cluster.nodes[leader]
    assert get(node.admin_url + "/v1/status/ready")[0] == 200
    # With both followers stopped, an acks=all produce cannot commit: the leader holds it,
    # and on SIGTERM drains it for its grace period (5 s here), still answering probes.
    for other in others:
        assert other.process is not None
        os.kill(other.process.pid, signal.SIGSTOP)
    errors: list[KafkaError] = []
    producer = Producer(
        {"bootstrap.servers": node.bootstrap, "acks": "all", "message.timeout.ms": 20000}
    )
    producer.produce(TOPIC, b"held", on_delivery=lambda err, msg: errors.append(err))
    sender = threading.Thread(target=producer.flush, args=(30,))
    sender.start()
    try:
        # The produce is in flight once the partition's log holds more than it commits.
        def in_flight() -> bool:
            samples = scrape(node.admin_url)
            labels = {"group": _group(samples), "topic": TOPIC, "partition": "0"}
            last = value(samples, "vdl_raft_last_index", **labels)
            commit = value(samples, "vdl_raft_commit_index", **labels)
            return last is not None and commit is not None and last > commit

        wait_for(in_flight)
        assert node.process is not None
        node.process.send_signal(signal.SIGTERM)

        def draining() -> bool:
            status, body = get_json(node.admin_url + "/v1/status/ready")
            return status == 503 and "draining" in body["reason"]

        wait_for(draining, timeout=5)
    finally:
        for other in others:
            assert other.process is not None
            os.kill(other.process.pid, signal.SIGCONT)
        sender.join(60)
    assert node.process.wait(60) == 0
