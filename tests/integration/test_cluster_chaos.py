"""Whole-cluster faults under an acks=all idempotent producer, on three real nodes:

- SIGTERM to every node at once, then a restart: nothing acknowledged is lost;
- (slow) a chaos loop that kill -9s and restarts random nodes for a bounded time.

Afterwards every acknowledged message must be readable exactly at its acknowledged offset.
"""

from __future__ import annotations

import random
import signal
import threading
import time

import pytest
from confluent_kafka import Producer

from tests.integration.cluster_support import Cluster
from tests.integration.test_cluster import TOPIC, _create_topic, _read_all


class AckedProducer:
    """A background thread producing numbered messages; remembers each ack's offset."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: dict[bytes, int] = {}
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                "topic.metadata.refresh.interval.ms": 1000,
                "reconnect.backoff.max.ms": 500,
            }
        )
        self._thread = threading.Thread(target=self._run)

    def _on_delivery(self, err: object, msg: object) -> None:
        with self._lock:
            if err is None:
                self.acked[msg.value()] = msg.offset()  # type: ignore[attr-defined]
            else:
                self.errors.append(str(err))

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            try:
                value = b"c%08d" % sent
                self._producer.produce(TOPIC, value=value, on_delivery=self._on_delivery)
                sent += 1
            except BufferError:
                pass
            self._producer.poll(0.002)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_acks(self, more: int, timeout: float = 60) -> None:
        target = self.count() + more
        deadline = time.monotonic() + timeout
        while self.count() < target:
            assert time.monotonic() < deadline, f"acks stalled at {self.count()}"
            time.sleep(0.05)

    def __enter__(self) -> AckedProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def finish(self) -> None:
        assert self._producer.flush(120) == 0, "messages still unacknowledged"


def _check(cluster: Cluster, acked: dict[bytes, int]) -> None:
    read = dict(_read_all(cluster.alive_bootstrap(), TOPIC, len(acked), timeout=120))
    missing = [(v, o) for v, o in acked.items() if read.get(o) != v]
    assert not missing, f"{len(missing)} acked messages lost or moved, e.g. {missing[:3]}"


def test_sigterm_of_the_whole_cluster_loses_nothing_acked(cluster: Cluster) -> None:
    _create_topic(cluster)
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    with AckedProducer(bootstrap) as producer:
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
    _check(cluster, producer.acked)


@pytest.mark.slow
def test_chaos_kill_and_restart_random_nodes_under_load(cluster: Cluster) -> None:
    _create_topic(cluster)
    rng = random.Random(20261122)
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    rounds = 0
    with AckedProducer(bootstrap) as producer:
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
    _check(cluster, producer.acked)
