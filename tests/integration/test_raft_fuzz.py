"""Fuzzing a real node's raft port (node 3 of a three-node cluster without raft TLS, which
takes a hello from nodes 1 and 2): seeded random and mutated connections, hellos and
frames (`raft_fuzz.py`). No input may stop the node or reach the per-connection
catch-all (every bad input is a refused connection), and afterwards the cluster still
commits acks=all writes through Kafka and the fuzzed node is back in every ISR.

The default suite sends a few thousand inputs; `-m slow` sends RAFT_FUZZ_INPUTS (default
1,000,000) with RAFT_FUZZ_SEED (default 13).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator

import pytest

from tests.integration.cluster_support import Cluster, partition_seen_by
from tests.integration.fuzz_support import send_connection
from tests.integration.raft_fuzz import RaftFuzz
from tests.integration.test_raft_port import TOPIC, produce_through_kafka

TARGET = 3
# Lines the catch-alls write: reaching one means some input got past every check.
CATCH_ALL = re.compile(r"raft connection from \S+ failed|after an error")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("raft-fuzz"), "--raft-insecure", "true")
    try:
        c.start()
        c.create_topic(TOPIC, 2)
        c.wait_for_leader(TOPIC, 0)
        c.wait_for_leader(TOPIC, 1)
        yield c
    finally:
        c.stop()


def fuzz(cluster: Cluster, seed: int, inputs: int) -> None:
    port = cluster.raft_ports[TARGET]
    # Groups 0 (metadata) and 1, 2 (the topic's partitions) exist on every node.
    generator = RaftFuzz(seed, TARGET, members=(1, 2), groups=2)
    hung = 0
    for number, connection in enumerate(generator.connections(inputs)):
        if not send_connection(port, connection.data):
            hung += 1
        if number % 200 == 0:
            assert cluster.nodes[TARGET].alive(), cluster.nodes[TARGET].log()[-3000:]
    assert hung == 0, f"{hung} connections were not closed after our end closed"
    for node in cluster.nodes.values():
        assert node.alive(), node.log()[-3000:]
        caught = [line for line in node.log().splitlines() if CATCH_ALL.search(line)]
        assert not caught, caught[:5]
    produce_through_kafka(cluster)
    # And the fuzzed node itself is back in step: in the ISR of each partition's leader.
    for partition in (0, 1):
        wait_in_sync(cluster, partition)


def wait_in_sync(cluster: Cluster, partition: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            leader = cluster.wait_for_leader(TOPIC, partition)
            isr = partition_seen_by(cluster.nodes[leader], TOPIC, partition)[3]
            if TARGET in isr:
                return
        except (OSError, KeyError, AssertionError):
            pass
        assert time.monotonic() < deadline, f"node {TARGET} never back in sync on {partition}"
        time.sleep(0.3)


def test_a_short_fuzz_of_the_raft_port(cluster: Cluster) -> None:
    fuzz(cluster, seed=1, inputs=3000)


@pytest.mark.slow
def test_a_long_fuzz_of_the_raft_port(cluster: Cluster) -> None:
    inputs = int(os.environ.get("RAFT_FUZZ_INPUTS", "1000000"))
    before = cluster.nodes[TARGET].rss() / 2**20
    fuzz(cluster, seed=int(os.environ.get("RAFT_FUZZ_SEED", "13")), inputs=inputs)
    after = cluster.nodes[TARGET].rss() / 2**20
    print(f"raft fuzz: {inputs} inputs, node {TARGET} RSS {before:.0f} -> {after:.0f} MiB")
    # Bounded: nothing a connection sent stays behind once it is closed.
    assert after < before + 256, (before, after)
