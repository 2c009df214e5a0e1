"""Three real node processes on loopback, for the fault-injection tests (Jepsen-style
checker, groups on a cluster): start, kill -9, restart, and ask who leads what."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from tests.integration.admin_support import get_json
from tests.integration.node_process import NodeProcess, free_port


def _metadata_of(node: NodeProcess, topics: list[str]) -> Any:
    """Metadata v1 as `node` itself answers it. Asked over a socket of our own: a Kafka
    client sends Metadata to whichever broker it likes."""
    request = MetadataRequest(
        version=1, topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
    )
    request.with_header(correlation_id=1, client_id="cluster-test")
    with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        head = sock.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            raise ConnectionError(f"node at {node.bootstrap} closed the connection")
        payload = sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    return MetadataResponse.decode(payload[4:], version=1)


def controller_seen_by(node: NodeProcess) -> int:
    """The controller id in `node`'s own Metadata answer."""
    return int(_metadata_of(node, []).controller_id)


def group0_leader(node: NodeProcess) -> int:
    """The metadata group's leader as `node` knows it (its admin listener; -1: none)."""
    _, body = get_json(node.admin_url + "/v1/cluster")
    return int(body["controller_id"])


def partition_seen_by(
    node: NodeProcess, topic: str, partition: int = 0
) -> tuple[set[int], int, list[int], list[int]]:
    """(brokers, leader, replicas, isr) of a partition as `node` itself says; only its
    leader knows the ISR (others report the replicas)."""
    md = _metadata_of(node, [topic])
    parts = {int(p.partition_index): p for t in md.topics if t.name == topic for p in t.partitions}
    part = parts[partition]
    return (
        {int(b.node_id) for b in md.brokers},
        int(part.leader_id),
        sorted(part.replica_nodes),
        sorted(part.isr_nodes),
    )


class Cluster:
    def __init__(
        self,
        root: Path,
        *extra_args: str,
        size: int = 3,
        node_args: Callable[[int], Sequence[str]] = lambda node_id: (),
    ) -> None:
        """`extra_args` go to every node, `node_args(id)` to node `id` only (say its own
        certificate)."""
        raft_ports = {i: free_port() for i in range(1, size + 1)}
        peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in raft_ports.items())
        self.raft_ports = raft_ports
        self.peers = peers  # the --peers value, for a node that joins later
        self.nodes = {
            i: NodeProcess(
                root / f"node{i}",
                "--node-id",
                str(i),
                "--peers",
                peers,
                "--raft-tick-ms",
                "50",
                "--shutdown-grace-ms",
                "5000",
                *extra_args,
                *node_args(i),
            )
            for i in raft_ports
        }

    @property
    def bootstrap(self) -> str:
        """Every node, alive or not: clients skip the dead ones as a real client would."""
        return ",".join(n.bootstrap for n in self.nodes.values())

    def alive_bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if n.alive())

    def start(self) -> None:
        """Start every node at once (their start-up work overlaps), then wait for each."""
        try:
            for node in self.nodes.values():
                node.spawn()
            for node in self.nodes.values():
                node.wait_listening()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.alive():
                try:
                    node.stop(30)
                except Exception:
                    node.kill()

    def __enter__(self) -> Cluster:
        """Started; stopped on leaving the block (a fixture's `with Cluster(...) as c`)."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def create_topic(self, name: str, partitions: int) -> None:
        deadline = time.monotonic() + 60
        while True:
            admin = AdminClient({"bootstrap.servers": self.alive_bootstrap()})
            futures = admin.create_topics(
                [NewTopic(name, num_partitions=partitions, replication_factor=3)]
            )
            try:
                futures[name].result(timeout=30)
                return
            except KafkaException:
                # The metadata group may still be electing its first leader.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def leaders(self, topic: str) -> dict[int, int]:
        """partition -> leader node id, as the alive nodes report it (-1: electing)."""
        admin = AdminClient({"bootstrap.servers": self.alive_bootstrap()})
        md = admin.list_topics(topic, timeout=5)
        parts = md.topics[topic].partitions
        return {p: int(part.leader) for p, part in parts.items()}

    def wait_for_preferred_leader(self, topic: str, partition: int = 0, timeout: float = 30) -> int:
        """The partition's leader once it is its preferred replica (the first of its
        replicas): leader balancing moves leadership there soon after the topic is created
        and back after that node restarts, so this one leads for the rest of a test."""
        deadline = time.monotonic() + timeout
        while True:
            admin = AdminClient({"bootstrap.servers": self.alive_bootstrap()})
            try:
                md = admin.list_topics(topic, timeout=5).topics.get(topic)
            except KafkaException:
                md = None
            part = None if md is None else md.partitions.get(partition)
            if part is not None and part.replicas and part.leader == part.replicas[0]:
                return int(part.leader)
            assert time.monotonic() < deadline, "the preferred replica does not lead"
            time.sleep(0.2)

    def wait_for_leader(
        self, topic: str, partition: int, exclude: int | None = None, timeout: float = 60
    ) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                leader = self.leaders(topic).get(partition, -1)
                if leader > 0 and leader != exclude and self.nodes[leader].alive():
                    return leader
            except (KafkaException, KeyError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"no leader for {topic}-{partition}")
