"""Compacted topics (cleanup.policy=compact) on a 3-node cluster: consumers from the start
see the latest value of every key, tombstoned keys gone, offsets increasing; every replica
cleans its own log to the same records at the same offsets; keyless records are refused
one by one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from tests.integration.cluster_support import Cluster
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until
from vdl.backends.api import EntryType
from vdl.backends.segment.entry_codec import HEADER, HEADER_SIZE
from vdl.log.record_batch import iter_records
from vdl.net.ydb.protos import ydb_status_codes_pb2, ydb_topic_pb2

TOPIC = "compacted"
KEYS = 30
UPDATES = 8
DELETED = {b"key-%02d" % k for k in range(0, KEYS, 6)}
FILLER = 120
CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "4000",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("compaction"))
    for node in c.nodes.values():
        node.extra_args += ["--retention-check-ms", "200"]
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _create(cluster: Cluster, name: str) -> None:
    def created() -> bool:
        admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
        try:
            admin.create_topics([NewTopic(name, 1, 3, config=CONFIGS)])[name].result(timeout=30)
        except KafkaException as exc:
            # An earlier attempt that timed out may have created it after all.
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        return True

    # The metadata group may still be electing its first leader.
    wait_until(created, f"topic {name} created", tolerate=(KafkaException,), every=0.5)
    cluster.wait_for_leader(name, 0)


def _produce(
    bootstrap: str, messages: list[tuple[bytes, bytes | None, int]]
) -> dict[bytes, tuple[int, bytes | None]]:
    """Produce (key, value, timestamp) in order with small batches; (offset, value) of the
    last record acked per key."""
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            key = msg.key()  # type: ignore[attr-defined]
            offset = msg.offset()  # type: ignore[attr-defined]
            if key not in latest or latest[key][0] < offset:
                latest[key] = (offset, msg.value())  # type: ignore[attr-defined]

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "batch.size": 600,
            "linger.ms": 2,
        }
    )
    for key, value, stamp in messages:
        producer.produce(TOPIC, key=key, value=value, timestamp=stamp, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return latest


def _partition_dir(node: NodeProcess) -> Path:
    """Where a node keeps the partition's replica (the Raft group's log directory)."""
    return next((node.data_dir / "replicated").glob(f"g*-{TOPIC}-0"))


def _confluent_read(bootstrap: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compacted-reader",
            "enable.auto.commit": False,
        }
    )
    out: list[tuple[int, bytes, bytes | None]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])

        def step() -> None:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                assert msg.error() is None, msg.error()
                out.append((msg.offset(), msg.key(), msg.value()))  # type: ignore[arg-type]

        wait_until(lambda: out and out[-1][0] >= end - 1, "the end read", step=step)
    finally:
        consumer.close()
    return out


def _kafka_python_read(bootstrap: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    out: list[tuple[int, bytes, bytes | None]] = []
    try:
        tp = KTopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)

        def step() -> None:
            for records in consumer.poll(timeout_ms=500, max_records=1000).values():
                out.extend((r.offset, r.key, r.value) for r in records)

        wait_until(lambda: out and out[-1][0] >= end - 1, "the end read", step=step)
    finally:
        consumer.close()
    return out


def test_consumers_see_the_latest_value_per_key_and_replicas_agree(cluster: Cluster) -> None:
    _create(cluster, TOPIC)
    start = int(time.time() * 1000) - 60_000
    updates: list[tuple[bytes, bytes | None, int]] = [
        (b"key-%02d" % k, b"value-%02d-%d" % (k, n) + b"." * 40, start + n)
        for n in range(UPDATES)
        for k in range(KEYS)
    ]
    tombstones: list[tuple[bytes, bytes | None, int]] = [
        (key, None, start + UPDATES) for key in sorted(DELETED)
    ]
    # Later by far more than delete.retention.ms of log time: once these are in a cleaned
    # segment, the tombstones before them go.
    filler: list[tuple[bytes, bytes | None, int]] = [
        (b"filler-%03d" % n, b"f" * 40, start + 30_000) for n in range(FILLER)
    ]
    # Each part in batches of its own, so that the tombstones' batches are older.
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for part in (updates, tombstones, filler):
        latest.update(_produce(cluster.alive_bootstrap(), part))
    end = max(offset for offset, _ in latest.values()) + 1
    expected = {
        offset: (key, value) for key, (offset, value) in latest.items() if key not in DELETED
    }

    # Every replica cleans its own log: each ends up holding exactly the latest record of
    # every key that is not deleted, at the offset it was written at. (Replicas whose
    # segments roll at the same entries hold the same bytes too, see the unit tests; one
    # that caught up from a cleaned log rolls at other entries.)
    wait_until(
        lambda: all(_records(node) == expected for node in cluster.nodes.values()),
        "every replica compacted",
        timeout=60,
    )
    for read in (_confluent_read, _kafka_python_read):
        got = read(cluster.alive_bootstrap(), end)
        offsets = [offset for offset, _, _ in got]
        assert offsets == sorted(set(offsets))
        assert {offset: (key, value) for offset, key, value in got} == expected


def _records(node: NodeProcess) -> dict[int, tuple[bytes | None, bytes | None]]:
    """offset -> (key, value) of every record in a node's replica of the partition."""
    out: dict[int, tuple[bytes | None, bytes | None]] = {}
    for path in sorted(_partition_dir(node).glob("*.log")):
        data = path.read_bytes()
        at = 0
        while at + HEADER_SIZE <= len(data):
            _, length, _, index, kind = HEADER.unpack_from(data, at)
            if index == 0:
                break  # zeros of a preallocated segment
            payload = data[at + HEADER_SIZE : at + HEADER_SIZE + length]
            at += HEADER_SIZE + length
            if kind == EntryType.DATA:
                for record in iter_records(payload):
                    out[record.offset] = (record.key, record.value)
    return out


def test_keyless_records_fail_with_invalid_record(cluster: Cluster) -> None:
    # 100 messages, 10 without a key. librdkafka fails each named record (KIP-467) and the
    # others of its batch with _INVALID_DIFFERENT_RECORD, which are sent again.
    name = "compacted-keys"
    _create(cluster, name)
    keyless = set(range(4, 100, 10))
    outcome: dict[int, KafkaError | None] = {}

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        outcome[int(msg.value().decode())] = err  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": cluster.alive_bootstrap(), "linger.ms": 50})
    for i in range(100):
        key = None if i in keyless else b"k%d" % i
        producer.produce(name, key=key, value=b"%d" % i, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    refused = {i for i, err in outcome.items() if err and err.code() == KafkaError.INVALID_RECORD}
    assert refused == keyless
    collateral = {
        i
        for i, err in outcome.items()
        if err is not None and err.code() == KafkaError._INVALID_DIFFERENT_RECORD
    }
    assert len(outcome) == 100
    for i in sorted(collateral):
        producer.produce(name, key=b"k%d" % i, value=b"%d" % i, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert {i for i, err in outcome.items() if err is None} == set(range(100)) - keyless


def _ydb_write(node: NodeProcess, topic: str, group: str | None) -> tuple[int, str]:
    """Status and issue text of a raw YDB write session's answer to one message, sent
    with or without a message_group_id (its record key) and no session group."""
    init = ydb_topic_pb2.StreamWriteMessage.FromClient()
    init.init_request.path = topic
    init.init_request.producer_id = "raw-writer"
    write = ydb_topic_pb2.StreamWriteMessage.FromClient()
    write.write_request.codec = 1  # RAW
    message = write.write_request.messages.add(seq_no=1, data=b"v", uncompressed_size=1)
    if group is not None:
        message.message_group_id = group
    with grpc.insecure_channel(node.grpc_address) as channel:
        call = channel.stream_stream(
            "/Ydb.Topic.V1.TopicService/StreamWrite",
            request_serializer=ydb_topic_pb2.StreamWriteMessage.FromClient.SerializeToString,
            response_deserializer=ydb_topic_pb2.StreamWriteMessage.FromServer.FromString,
        )
        replies = call(iter([init, write]), metadata=[("x-ydb-database", "/local")], timeout=10)
        first = next(replies)
        assert first.status == ydb_status_codes_pb2.StatusIds.SUCCESS, first
        answer = next(replies)
        replies.cancel()
    return int(answer.status), " ".join(issue.message for issue in answer.issues)


def test_ydb_messages_without_a_group_are_refused(cluster: Cluster) -> None:
    # A YDB message's key is its message_group_id: without one it would be compacted away.
    name = "compacted-ydb"
    _create(cluster, name)
    # Leader balancing moves leadership to the preferred replica soon after creation.
    leader = cluster.nodes[cluster.wait_for_preferred_leader(name, 0)]
    status, issues = _ydb_write(leader, name, None)
    assert status == ydb_status_codes_pb2.StatusIds.BAD_REQUEST
    assert "message_group_id" in issues and "compacted" in issues
    status, _ = _ydb_write(leader, name, "group-1")
    assert status == ydb_status_codes_pb2.StatusIds.SUCCESS
