"""Retention on a replicated topic, with real nodes: a follower is down while the leader's
retention deletes the segments it would need; it restarts, takes a snapshot of the
leader's log (its closed segments as files, then entries) and is again part of the majority
that acknowledges writes."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tests.integration.cluster_support import Cluster
from tests.integration.test_cluster import _wait_for_leader

TOPIC = "retained"
INSTALLED = re.compile(r"installed a snapshot of \d+\.\.\d+ from node \d+: (\d+) segment files")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    for node in c.nodes.values():
        node.extra_args += ["--retention-check-ms", "300"]
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _produce(bootstrap: str, count: int, tag: bytes) -> dict[bytes, int]:
    acked: dict[bytes, int] = {}
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked[msg.value()] = msg.offset()  # type: ignore[attr-defined]
        else:
            errors.append(str(err))

    # Small batches: many entries, so the leader keeps closed segments after retention and
    # the snapshot carries some of them as files.
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "batch.size": 4000,
        }
    )
    for i in range(count):
        producer.produce(TOPIC, value=tag + b"%06d" % i + b"." * 1000, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return acked


def _read_from(bootstrap: str, offset: int, expected: int) -> dict[int, bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, offset)])
        out: dict[int, bytes] = {}
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out[msg.offset()] = msg.value()  # type: ignore[index,assignment]
        return out
    finally:
        consumer.close()


def _low_watermark(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lw"})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        return int(low)
    finally:
        consumer.close()


def test_a_follower_behind_retention_catches_up_through_a_snapshot(cluster: Cluster) -> None:
    deadline = time.monotonic() + 60
    while True:
        admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
        # ~20 messages a segment, ~300 of them kept.
        configs = {"segment.bytes": "20000", "retention.bytes": "300000"}
        future = admin.create_topics([NewTopic(TOPIC, 1, 3, config=configs)])[TOPIC]
        try:
            future.result(timeout=30)
            break
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.5)
    leader = _wait_for_leader(cluster, TOPIC)
    _produce(cluster.alive_bootstrap(), 100, b"a")
    lagging, other = (n for n in cluster.nodes if n != leader)
    cluster.nodes[lagging].kill()
    acked = _produce(cluster.alive_bootstrap(), 1000, b"b")
    # The leader's retention removes whole closed segments, the lagging one's next ones too.
    deadline = time.monotonic() + 30
    while _low_watermark(cluster.alive_bootstrap()) <= 500:
        assert time.monotonic() < deadline, "retention did not run"
        time.sleep(0.3)
    cluster.nodes[lagging].start()
    deadline = time.monotonic() + 60
    while not any(int(files) > 0 for files in INSTALLED.findall(cluster.nodes[lagging].log())):
        assert time.monotonic() < deadline, "no snapshot was installed from segment files"
        time.sleep(0.3)
    # Without the other follower, acks need the one that took the snapshot.
    assert cluster.nodes[other].stop(30) == 0
    acked.update(_produce(cluster.nodes[leader].bootstrap, 100, b"c"))
    low = _low_watermark(cluster.nodes[leader].bootstrap)
    kept = {v: o for v, o in acked.items() if o >= low}
    assert len(kept) >= 100
    read = _read_from(cluster.nodes[leader].bootstrap, low, len(kept))
    for value, offset in kept.items():
        assert read.get(offset) == value, offset
