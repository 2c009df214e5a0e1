"""segment.ms and max.compaction.lag.ms on a 3-node cluster, with confluent-kafka's
AdminClient, producer and consumer: both are topic configs (CreateTopics, DescribeConfigs,
IncrementalAlterConfigs; bad values INVALID_CONFIG), every replica rolls its segments by
batch timestamps at the same entries, and a compacted topic's closed segments are cleaned
once max.compaction.lag.ms has passed, with no more writes, into files that are the same
bytes on every replica."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.integration.cluster_support import Cluster
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until
from vdl.backends.api import EntryType
from vdl.backends.segment.entry_codec import HEADER, HEADER_SIZE
from vdl.log.record_batch import iter_records

# A 3-node cluster of its own: slow (the roll rule and its settings are unit-tested in
# tests/unit/log/test_segment_roll.py, in the default suite).
pytestmark = pytest.mark.slow

KEYS = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("segment-roll"), "--retention-check-ms", "200")
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _create(cluster: Cluster, name: str, configs: dict[str, str]) -> None:
    def created() -> bool:
        admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
        try:
            admin.create_topics([NewTopic(name, 1, 3, config=configs)])[name].result(timeout=30)
        except KafkaException as exc:
            # An earlier attempt that timed out may have created it after all.
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        return True

    # The metadata group may still be electing its first leader.
    wait_until(created, f"topic {name} created", tolerate=(KafkaException,), every=0.5)
    cluster.wait_for_leader(name, 0)


def _described(cluster: Cluster, name: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
    resource = ConfigResource(ResourceType.TOPIC, name)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {key: entry.value for key, entry in entries.items()}


def _alter(cluster: Cluster, name: str, **changes: str) -> int | None:
    """IncrementalAlterConfigs SET of `changes`; the error code, None if it succeeded."""
    admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
    entries = [
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        for key, value in changes.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
    try:
        admin.incremental_alter_configs([resource])[resource].result(timeout=60)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return None


def _produce_phases(
    bootstrap: str, topic: str, phases: list[tuple[int, int]]
) -> dict[bytes, list[int]]:
    """Produce, phase by phase, `count` updates of every key with CreateTime `stamp` for
    each (stamp, count); the offsets acked per key, in order."""
    acked: dict[bytes, list[int]] = {}
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.setdefault(msg.key(), []).append(msg.offset())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for stamp, count in phases:
        for n in range(count):
            for k in range(KEYS):
                value = b"value-%d-%d-" % (stamp, n) + b"." * 60
                key = b"key-%02d" % k
                producer.produce(
                    topic, key=key, value=value, timestamp=stamp, on_delivery=on_delivery
                )
        # Each phase in batches of its own: the first batch of a phase starts a segment.
        assert producer.flush(60) == 0
    assert not errors, errors[:3]
    for offsets in acked.values():
        offsets.sort()
    return acked


def _partition_dir(node: NodeProcess, topic: str) -> Path:
    """Where a node keeps the partition's replica (the Raft group's log directory)."""
    return next((node.data_dir / "replicated").glob(f"g*-{topic}-0"))


def _closed_files(node: NodeProcess, topic: str) -> dict[str, bytes]:
    """The files (log, raft index, log index) of every closed segment of a node's replica:
    all segments but the last, the active one."""
    directory = _partition_dir(node, topic)
    stems = sorted(path.name.removesuffix(".log") for path in directory.glob("*.log"))
    return {
        path.name: path.read_bytes()
        for stem in stems[:-1]
        for path in sorted(directory.glob(stem + ".*"))
    }


def _segment_count(node: NodeProcess, topic: str) -> int:
    return len(list(_partition_dir(node, topic).glob("*.log")))


def _offsets_in(files: dict[str, bytes]) -> dict[int, bytes | None]:
    """offset -> key of every record in the given segment log files."""
    out: dict[int, bytes | None] = {}
    for name, data in sorted(files.items()):
        if not name.endswith(".log"):
            continue
        at = 0
        while at + HEADER_SIZE <= len(data):
            _, length, _, _, kind = HEADER.unpack_from(data, at)
            payload = data[at + HEADER_SIZE : at + HEADER_SIZE + length]
            at += HEADER_SIZE + length
            if kind == EntryType.DATA:
                for record in iter_records(payload):
                    out[record.offset] = record.key
    return out


def test_segment_ms_is_a_topic_config_that_rolls_every_replica(cluster: Cluster) -> None:
    _create(cluster, "rolled", {"segment.ms": "1000"})
    described = _described(cluster, "rolled")
    assert described["segment.ms"] == "1000"
    assert described["max.compaction.lag.ms"] == str(2**63 - 1)  # Kafka's default
    start = int(time.time() * 1000) - 60_000
    # Three phases 2 s apart in batch time, written in well under a second: each phase
    # starts a segment on every replica, whatever its clock says.
    _produce_phases(
        cluster.alive_bootstrap(), "rolled", [(start, 2), (start + 2_000, 2), (start + 4_000, 2)]
    )
    wait_until(
        lambda: all(_segment_count(n, "rolled") == 3 for n in cluster.nodes.values()),
        "three segments on every replica",
    )

    # Values Kafka refuses: INVALID_CONFIG, and nothing changes.
    for bad in (
        {"segment.ms": "0"},
        {"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "4000"},
    ):
        assert _alter(cluster, "rolled", **bad) == KafkaError.INVALID_CONFIG
    admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
    refused_topic = NewTopic("never-rolled", 1, 3, config={"segment.ms": "-5"})
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([refused_topic])["never-rolled"].result(timeout=60)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert _described(cluster, "rolled")["segment.ms"] == "1000"
    # A good change is served after them.
    assert _alter(cluster, "rolled", **{"segment.ms": "60000"}) is None
    wait_until(lambda: _described(cluster, "rolled")["segment.ms"] == "60000", "altered")


def test_a_compacted_topic_is_cleaned_without_more_writes_into_identical_replicas(
    cluster: Cluster,
) -> None:
    # segment.ms is 1.5 s, but a compacted topic rolls by max.compaction.lag.ms when that
    # is smaller (KIP-354): phases 1.2 s apart in batch time each start a segment.
    configs = {
        "cleanup.policy": "compact",
        "segment.ms": "1500",
        "max.compaction.lag.ms": "1000",
        "min.cleanable.dirty.ratio": "0.99",
    }
    _create(cluster, "squeezed", configs)
    nodes = list(cluster.nodes.values())
    start = int(time.time() * 1000) - 60_000

    def cleaned_alike(expected: Mapping[int, bytes | None]) -> bool:
        files = [_closed_files(node, "squeezed") for node in nodes]
        return all(f == files[0] for f in files) and _offsets_in(files[0]) == expected

    # Three phases: the first two are closed segments, the third the active one.
    first = _produce_phases(
        cluster.alive_bootstrap(), "squeezed", [(start, 4), (start + 1_200, 3), (start + 2_400, 2)]
    )
    # No write after them: every replica cleans its closed segments to the latest record
    # of every key there (the second phase's), in files (logs and both indexes) that are
    # the same bytes on all three.
    wait_until(
        lambda: cleaned_alike({offsets[-3]: key for key, offsets in first.items()}),
        "the first two segments cleaned, byte-identical on every replica",
    )
    # A fourth phase closes the third's segment. That part, all dirty, is far less than
    # 0.99 of what is cleanable now (the first two are little more than batch headers):
    # the dirty ratio alone would never clean it; max.compaction.lag.ms does.
    last = _produce_phases(cluster.alive_bootstrap(), "squeezed", [(start + 3_600, 1)])
    kept = {offsets[-1]: key for key, offsets in first.items()}
    wait_until(
        lambda: cleaned_alike(kept),
        "the first three segments cleaned, byte-identical on every replica",
    )
    assert len([n for n in _closed_files(nodes[0], "squeezed") if n.endswith(".log")]) == 3

    # A consumer from the start sees the kept records and the active segment's, with gaps.
    newest = {offsets[-1]: key for key, offsets in last.items()}
    end = max(newest) + 1
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.alive_bootstrap(),
            "group.id": "squeezed-reader",
            "enable.auto.commit": False,
        }
    )
    seen: dict[int, bytes | None] = {}
    try:
        consumer.assign([TopicPartition("squeezed", 0, OFFSET_BEGINNING)])

        def step() -> None:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                assert msg.error() is None, msg.error()
                seen[msg.offset()] = msg.key()  # type: ignore[index]

        wait_until(lambda: end - 1 in seen, "the end read", step=step)
    finally:
        consumer.close()
    assert seen == {**kept, **newest}
