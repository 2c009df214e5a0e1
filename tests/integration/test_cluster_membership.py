"""Membership changes on a running cluster of real nodes, under an acks=all producer: a 4th
node joins (`--join`), becomes a replica of the partition (learner, then voter), then is
removed; no acknowledged message is lost or moved."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import trio
from confluent_kafka import KafkaException, Producer

from tests.integration.cluster_support import Cluster, partition_seen_by
from tests.integration.node_process import NodeProcess, free_port
from tests.integration.test_cluster import TOPIC, _create_topic, _read_all
from vdl.consensus.transport import send_admin_command


def _admin(cluster: Cluster, command: dict[str, object]) -> None:
    """Send a metadata command to node 1's raft port (it passes it to the leader)."""
    raw = json.dumps(command).encode()
    trio.run(send_admin_command, ("127.0.0.1", cluster.raft_ports[1]), raw)


def _wait(cluster: Cluster, what: str, check: object, timeout: float = 60) -> None:
    """Until `check(brokers, replicas, leader's isr)` holds, as node 1 and the leader say."""
    assert callable(check)
    deadline = time.monotonic() + timeout
    while True:
        try:
            brokers, leader, replicas, _ = partition_seen_by(cluster.nodes[1], TOPIC)
            if leader > 0 and leader in cluster.nodes:
                # Only the leader knows the ISR (others report the replicas).
                _, confirmed, _, isr = partition_seen_by(cluster.nodes[leader], TOPIC)
                if confirmed == leader and check(brokers, replicas, isr):
                    return
        except (KafkaException, KeyError, OSError):
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_a_fourth_node_joins_replicates_and_leaves_under_load(
    cluster: Cluster, tmp_path: Path
) -> None:
    _create_topic(cluster)
    acked: dict[bytes, int] = {}
    errors: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivery(err: object, msg: object) -> None:
        with lock:
            if err is None:
                acked[msg.value()] = msg.offset()  # type: ignore[attr-defined]
            else:
                errors.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": ",".join(n.bootstrap for n in cluster.nodes.values()),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )

    def produce() -> None:
        sent = 0
        while not stop.is_set():
            try:
                producer.produce(TOPIC, value=b"m%07d" % sent, on_delivery=on_delivery)
                sent += 1
            except BufferError:
                pass
            producer.poll(0.002)

    writer = threading.Thread(target=produce)
    writer.start()
    fourth: NodeProcess | None = None
    try:
        port = free_port()
        fourth = NodeProcess(
            tmp_path / "node4",
            "--node-id",
            "4",
            "--peers",
            f"{cluster.peers},4=127.0.0.1:{port}",
            "--join",
            "true",
            "--raft-tick-ms",
            "50",
            "--shutdown-grace-ms",
            "5000",
        ).start()
        # It joins group 0 (and so registers as a broker) by itself.
        _wait(cluster, "node 4 to join", lambda b, r, i: 4 in b)
        _admin(
            cluster, {"op": "set_replicas", "name": TOPIC, "partition": 0, "replicas": [1, 2, 3, 4]}
        )
        # In the leader's ISR only once promoted to voter (and in contact).
        _wait(cluster, "node 4 to replicate", lambda b, r, i: r == i == [1, 2, 3, 4])
        _admin(cluster, {"op": "remove_node", "node": 4})
        _wait(cluster, "node 4 to leave", lambda b, r, i: 4 not in b and r == i == [1, 2, 3])
        assert fourth.stop(30) == 0
        time.sleep(1)  # and the three carry on alone
    finally:
        stop.set()
        writer.join()
        if fourth is not None and fourth.alive():
            fourth.kill()
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    assert len(acked) > 100
    read = dict(_read_all(cluster.alive_bootstrap(), TOPIC, len(acked)))
    for value, offset in acked.items():
        assert read.get(offset) == value, (value, offset)
    # Both group 0 and the partition's group went learner -> voter -> removed.
    # Whoever led a group proposed its changes, node 4 included (it may have led group 0).
    nodes = [*cluster.nodes.values(), *([fourth] if fourth is not None else [])]
    logs = "".join(n.log() for n in nodes)
    for step in ("ADD_LEARNER node 4", "PROMOTE node 4", "REMOVE node 4"):
        assert f"group 0: {step}" in logs
        assert re.search(rf"group [1-9][0-9]*: {step}", logs), step
