"""Readers of one YDB consumer on different nodes of a three-node cluster share its
partitions (one reader per partition, cluster-wide): with the official SDK committing after
processing, every message is processed and committed exactly once while readers leave,
join, and lose their node.

A message counts as processed when its commit is acknowledged. A commit that fails because
the server took the partition away meanwhile (TopicReaderPartitionExpiredError) may or may
not have landed: such a message may come again to another reader, or (if its commit
landed) not at all."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ydb
from kafka import KafkaProducer

from tests.integration.cluster_support import Cluster, group0_leader
from tests.integration.waiting import wait_until
from vdl.consensus.frames import encode_forward, encode_hello

DATABASE = "/local"
PARTITIONS = 6
TIMEOUT = 60

Message = tuple[int, int]  # (partition, offset)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(Path(tmp_path_factory.mktemp("ydb-readers")))
    try:
        c.start()
        yield c
    finally:
        c.stop()


@contextlib.contextmanager
def driver_for(endpoint: str, *, discovery: bool = True) -> Iterator[ydb.Driver]:
    config = ydb.DriverConfig(
        endpoint=f"grpc://{endpoint}", database=DATABASE, disable_discovery=not discovery
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=20, fail_fast=True)
        yield driver
    finally:
        driver.stop(timeout=10)


def create_topic(cluster: Cluster, topic: str, consumer: str) -> None:
    with driver_for(cluster.nodes[1].grpc_address) as driver:
        wait_until(
            lambda: (
                driver.topic_client.create_topic(
                    topic, consumers=[consumer], min_active_partitions=PARTITIONS
                )
                or True
            ),
            f"{topic} created",
            tolerate=(ydb.Unavailable, ydb.ConnectionError),
            every=0.3,
        )
    for node in cluster.nodes.values():
        # Every node has applied the topic before a reader there asks for it.
        with driver_for(node.grpc_address, discovery=False) as driver:
            wait_until(
                lambda: driver.topic_client.describe_topic(topic),
                f"{topic} on every node",
                tolerate=(ydb.SchemeError,),
            )


class Reader:
    """One SDK reader in its own thread, connected to one node only: it processes each
    batch, then commits it and waits for the acknowledgement."""

    def __init__(self, name: str, endpoint: str, topic: str, consumer: str) -> None:
        self.name = name
        self.acked: list[Message] = []
        self.uncertain: list[Message] = []
        self.partitions: set[int] = set()
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._endpoint = endpoint
        self._topic = topic
        self._consumer = consumer
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with driver_for(self._endpoint, discovery=False) as driver:
                reader: Any = driver.topic_client.reader(self._topic, consumer=self._consumer)
                try:
                    while not self._stop.is_set():
                        try:
                            batch = reader.receive_batch(max_messages=10, timeout=0.5)
                        except TimeoutError:
                            continue
                        messages = [(m.partition_id, m.offset) for m in batch.messages]
                        self.partitions.update(p for p, _ in messages)
                        time.sleep(0.05)  # the processing
                        try:
                            reader.commit_with_ack(batch, timeout=10)
                        except (ydb.TopicReaderPartitionExpiredError, TimeoutError):
                            self.uncertain.extend(messages)
                        else:
                            self.acked.extend(messages)
                finally:
                    with contextlib.suppress(Exception):
                        reader.close(timeout=10)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT)
        assert not self._thread.is_alive(), f"{self.name} did not stop"


def produce(cluster: Cluster, topic: str, per_partition: int) -> None:
    """``per_partition`` messages into every partition (through Kafka: any node will do)."""
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap.split(","), acks="all", linger_ms=5
    )
    try:
        futures = [
            producer.send(topic, value=f"m{i}".encode(), partition=p)
            for i in range(per_partition)
            for p in range(PARTITIONS)
        ]
        producer.flush(TIMEOUT)
        for future in futures:
            future.get(timeout=TIMEOUT)
    finally:
        producer.close()


def acked(readers: list[Reader]) -> int:
    return sum(len(r.acked) for r in readers)


def committed(cluster: Cluster, topic: str, consumer: str) -> dict[int, int]:
    endpoint = next(n.grpc_address for n in cluster.nodes.values() if n.alive())
    with driver_for(endpoint, discovery=False) as driver:
        stats: Any = driver.topic_client.describe_consumer(topic, consumer, include_stats=True)
        return {
            p.partition_id: p.partition_consumer_stats.committed_offset for p in stats.partitions
        }


def check_exactly_once(readers: list[Reader], total: int, lost: str = "") -> None:
    """No message was processed twice; every one was processed, or its commit was in
    doubt (then its commit landed: nobody processed it again). Reader ``lost`` lost its
    node: it may have failed."""
    for reader in readers:
        assert reader.name == lost or not reader.errors, (reader.name, reader.errors)
    counts = Counter(m for r in readers for m in r.acked)
    twice = sorted(m for m, n in counts.items() if n > 1)
    assert not twice, f"processed more than once: {twice[:20]}"
    doubtful = {m for r in readers for m in r.uncertain}
    everything = {(p, o) for p in range(PARTITIONS) for o in range(total)}
    missing = sorted(everything - counts.keys() - doubtful)
    assert not missing, f"never processed: {missing[:20]}"


def test_forged_balancer_messages_are_dropped_and_readers_are_served(cluster: Cluster) -> None:
    # As node 1 towards node 3 (a peer, over a raft port without TLS): reports and grants
    # of every wrong shape, and a grant from a term that is not group 0's.
    group = {"consumer": "c", "topic": "t", "partitions": 2}
    report = {"op": "ydb_read_report", "node": 9, "incarnation": "x", "report": 1, "term": 0}
    bodies: list[object] = [
        {"op": "ydb_read_report"},
        {**report, "ack": 0, "groups": "x"},
        {**report, "ack": 0, "groups": [{**group, "partitions": 10**12, "members": {}}]},
        {**report, "ack": 0, "groups": [{**group, "members": {"m": {"wanted": None}}}]},
        {**report, "ack": 0, "groups": [{**group, "members": {"m": {"wanted": 3, "held": []}}}]},
        {
            **report,
            "ack": 0,
            "groups": [{**group, "members": {"m": {"wanted": None, "held": [7]}}}],
        },
        {**report, "ack": 0, "groups": [{**group, "members": [1, 2]}]},
        {**report, "node": float("inf"), "ack": 0, "groups": []},
        {"op": "ydb_read_grant", "term": "a"},
        {"op": "ydb_read_grant", "term": float("inf")},
        {"op": "ydb_read_grant", "term": 1, "seq": 1, "report": 1, "index": 0, "grants": "ab"},
        {"op": "ydb_read_grant", "term": 1, "seq": 1, "report": 1, "index": 0, "grants": [{}]},
        {"op": "ydb_read_grant", "term": 10**15, "seq": 1, "report": 1, "index": 0, "grants": []},
    ]
    frames = b"".join(encode_forward(json.dumps(body).encode()) for body in bodies)
    with socket.create_connection(("127.0.0.1", cluster.raft_ports[3]), timeout=10) as sock:
        sock.sendall(encode_hello(1) + frames)
    target = cluster.nodes[3]
    lines = ("ignoring a malformed YDB read report", "ignoring a malformed YDB read grant")
    wait_until(lambda: all(line in target.log() for line in lines), "node 3 logging both")
    for node in cluster.nodes.values():
        assert node.alive(), node.log()[-3000:]

    # A legitimate reader on that node is served every message once.
    topic, consumer, per_partition = "/local/forged", "forged", 20
    create_topic(cluster, topic, consumer)
    produce(cluster, topic.rsplit("/", 1)[1], per_partition)
    reader = Reader("r3", target.grpc_address, topic, consumer)
    try:
        wait_until(
            lambda: committed(cluster, topic, consumer),
            "everything committed",
            done=lambda offsets: offsets == dict.fromkeys(range(PARTITIONS), per_partition),
            tolerate=(ydb.Error,),
        )
    finally:
        reader.stop()
    check_exactly_once([reader], per_partition)


def test_readers_on_three_nodes_share_a_consumer_while_one_leaves_and_one_joins(
    cluster: Cluster,
) -> None:
    topic, consumer = "/local/shared", "shared"
    per_partition = 300
    create_topic(cluster, topic, consumer)
    produce(cluster, topic.rsplit("/", 1)[1], per_partition)
    readers = [Reader(f"r{i}", cluster.nodes[i].grpc_address, topic, consumer) for i in (1, 2, 3)]
    total = PARTITIONS * per_partition
    try:
        wait_until(lambda: all(r.partitions for r in readers), "every reader reading")
        wait_until(lambda: acked(readers) >= total // 4, "a quarter processed")
        readers[0].stop()  # leaves: its partitions go to the other two
        readers.append(Reader("r4", cluster.nodes[1].grpc_address, topic, consumer))
        wait_until(lambda: readers[3].partitions, "the reader that joined reading")
        wait_until(
            lambda: committed(cluster, topic, consumer),
            "everything committed",
            done=lambda offsets: offsets == dict.fromkeys(range(PARTITIONS), per_partition),
            tolerate=(ydb.Error,),
        )
    finally:
        for reader in readers:
            reader.stop()
    # (Over its life a reader may hold every partition in turn: shares move as readers
    # come and go. Reading one at the same time as another shows as a duplicate.)
    check_exactly_once(readers, per_partition)


@pytest.mark.slow  # a dead node's readers are given up after NODE_TIMEOUT_S
@pytest.mark.parametrize("coordinator", [True, False], ids=["coordinator", "other"])
def test_a_killed_nodes_partitions_go_to_readers_on_the_others(
    cluster: Cluster, coordinator: bool
) -> None:
    topic = "/local/failover-coordinator" if coordinator else "/local/failover-other"
    consumer = "failover"
    per_partition = 300
    create_topic(cluster, topic, consumer)
    produce(cluster, topic.rsplit("/", 1)[1], per_partition)
    # The leader of the metadata group (the balancer moves to another node too), or not.
    leader = wait_until(
        lambda: group0_leader(cluster.nodes[1]), "a metadata leader", done=lambda n: n > 0
    )
    victim = leader if coordinator else next(i for i in (3, 2, 1) if i != leader)
    readers = [Reader(f"r{i}", cluster.nodes[i].grpc_address, topic, consumer) for i in (1, 2, 3)]
    total = PARTITIONS * per_partition
    try:
        wait_until(lambda: all(r.partitions for r in readers), "every reader reading")
        wait_until(lambda: acked(readers) >= total // 3, "a third processed")
        cluster.nodes[victim].kill()
        readers[victim - 1].stop()
        wait_until(
            lambda: committed(cluster, topic, consumer),
            "everything committed",
            done=lambda offsets: offsets == dict.fromkeys(range(PARTITIONS), per_partition),
            tolerate=(ydb.Error,),
            timeout=TIMEOUT,
        )
    finally:
        for reader in readers:
            reader.stop()
        if not cluster.nodes[victim].alive():
            cluster.nodes[victim].start()
    check_exactly_once(readers, per_partition, lost=f"r{victim}")
