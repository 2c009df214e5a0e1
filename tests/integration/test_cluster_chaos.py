"""Whole-cluster faults under an acks=all idempotent producer, on three real nodes:

- SIGTERM to every node at once, then a restart: nothing acknowledged is lost;
- (slow) a chaos loop that kill -9s and restarts random nodes for a bounded time.

Afterwards every acknowledged message must be readable exactly at its acknowledged offset.
"""

from __future__ import annotations

import random
import signal
import time

import pytest

from tests.integration.acked_producer import AckedProducer
from tests.integration.cluster_support import Cluster
from tests.integration.test_cluster import TOPIC, _create_topic, _read_all


def _check(cluster: Cluster, acked: dict[bytes, int]) -> None:
    read = dict(_read_all(cluster.alive_bootstrap(), TOPIC, len(acked), timeout=120))
    missing = [(v, o) for v, o in acked.items() if read.get(o) != v]
    assert not missing, f"{len(missing)} acked messages lost or moved, e.g. {missing[:3]}"


def test_sigterm_of_the_whole_cluster_loses_nothing_acked(cluster: Cluster) -> None:
    _create_topic(cluster)
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    with AckedProducer(bootstrap, TOPIC) as producer:
        producer.wait_acks(500)
        processes = [n.process for n in cluster.nodes.values()]
        for process in processes:
            assert process is not None
            process.send_signal(signal.SIGTERM)
        # Each drains its in-flight produces (acked once committed, or failed) and exits 0.
        assert [p.wait(60) for p in processes if p is not None] == [0, 0, 0]
        before = producer.count()
        cluster.start()
        producer.wait_acks(300)
    producer.finish()
    assert producer.count() >= before + 300
    _check(cluster, {v: offset for v, (_, offset) in producer.acked.items()})


@pytest.mark.slow
def test_chaos_kill_and_restart_random_nodes_under_load(cluster: Cluster) -> None:
    _create_topic(cluster)
    rng = random.Random(20261122)
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    rounds = 0
    with AckedProducer(bootstrap, TOPIC) as producer:
        producer.wait_acks(200)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            # One node down at a time keeps a majority, so acks must keep coming.
            victim = rng.choice(sorted(cluster.nodes))
            cluster.nodes[victim].kill()
            time.sleep(rng.uniform(0.5, 3.0))
            cluster.nodes[victim].start()
            producer.wait_acks(50, timeout=60)
            rounds += 1
        producer.wait_acks(200)
    producer.finish()
    print(f"chaos: {rounds} kill -9/restart rounds, {producer.count()} acked")
    assert rounds >= 10
    _check(cluster, {v: offset for v, (_, offset) in producer.acked.items()})
