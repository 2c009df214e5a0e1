"""DeleteRecords and OffsetForLeaderEpoch on a 3-node cluster, with real clients.

DeleteRecords (confluent-kafka's `delete_records`) moves the log start on every replica
(each node's own view, ListOffsets EARLIEST after a leader change), reads below it are out
of range, whole segments below it are deleted on every node, and a restarted follower
(the old leader) keeps it. OffsetForLeaderEpoch, sent raw (kafka-python's protocol
classes), answers where an old leader's epoch ended once a new leader has written, and
fences clients whose current_leader_epoch is stale (also in Fetch and ListOffsets).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)

from tests.integration.admin_support import get_json
from tests.integration.cluster_support import Cluster
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until

TOPIC = "trimmed"
RECORDS = 1000
CUT = 600
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("delete-records"), "--retention-check-ms", "200") as c:
        admin = AdminClient({"bootstrap.servers": c.alive_bootstrap()})

        def created() -> bool:
            new = NewTopic(TOPIC, 1, 3, config={"segment.bytes": "8192"})
            try:
                admin.create_topics([new])[TOPIC].result(timeout=30)
            except KafkaException as exc:
                if "already exists" not in str(exc).lower():
                    raise
            return True

        wait_until(created, "the topic created", tolerate=(KafkaException,))
        c.wait_for_preferred_leader(TOPIC)
        producer = Producer(
            {"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0, "batch.size": 2000}
        )
        for i in range(RECORDS):
            producer.produce(TOPIC, value=b"%04d" % i + b"." * 100)
        assert producer.flush(30) == 0
        yield c


# -- raw requests ------------------------------------------------------------------------


def _call(port: int, request: Any, response_class: Any, version: int) -> Any:
    request.with_header(correlation_id=7, client_id="delete-records-test")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        payload = sock.recv(size, socket.MSG_WAITALL)
    return response_class.decode(payload[4:], version=version)


def _epoch_end(node: NodeProcess, epoch: int, current: int = -1) -> tuple[int, int, int]:
    """(error, leader_epoch, end_offset) of OffsetForLeaderEpoch v3, as a consumer asks."""
    request = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                topic=TOPIC,
                partitions=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                        partition=0, current_leader_epoch=current, leader_epoch=epoch
                    )
                ],
            )
        ],
        version=3,
    )
    part = _call(node.kafka_port, request, OffsetForLeaderEpochResponse, 3).topics[0].partitions[0]
    return int(part.error_code), int(part.leader_epoch), int(part.end_offset)


def _fetch(node: NodeProcess, offset: int, current: int = -1) -> int:
    """The error of a Fetch v11 of partition 0 at `offset`."""
    topic = FetchRequest.FetchTopic(
        topic=TOPIC,
        partitions=[
            FetchRequest.FetchTopic.FetchPartition(
                partition=0,
                current_leader_epoch=current,
                fetch_offset=offset,
                log_start_offset=-1,
                partition_max_bytes=65536,
            )
        ],
    )
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=65536,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[topic],
        forgotten_topics_data=[],
        rack_id="",
        version=11,
    )
    response = _call(node.kafka_port, request, FetchResponse, 11)
    return int(response.responses[0].partitions[0].error_code)


def _earliest(node: NodeProcess, current: int = -1) -> tuple[int, int]:
    """(error, offset) of ListOffsets v5 EARLIEST for partition 0."""
    topic = ListOffsetsRequest.ListOffsetsTopic(
        name=TOPIC,
        partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=current, timestamp=-2
            )
        ],
    )
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[topic], version=5)
    part = _call(node.kafka_port, request, ListOffsetsResponse, 5).topics[0].partitions[0]
    return int(part.error_code), int(part.offset)


def _delete_raw(node: NodeProcess, partition: int, offset: int) -> tuple[int, int]:
    """(error, low_watermark) of DeleteRecords v1."""
    request = DeleteRecordsRequest(
        topics=[
            DeleteRecordsRequest.DeleteRecordsTopic(
                name=TOPIC,
                partitions=[
                    DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
                        partition_index=partition, offset=offset
                    )
                ],
            )
        ],
        timeout_ms=10000,
        version=1,
    )
    part = _call(node.kafka_port, request, DeleteRecordsResponse, 1).topics[0].partitions[0]
    return int(part.error_code), int(part.low_watermark)


# -- views -------------------------------------------------------------------------------


def _view(node: NodeProcess) -> dict[str, Any]:
    """The node's own view of partition 0 (its admin listener)."""
    _, body = get_json(node.admin_url + "/v1/partitions")
    return next(p for p in body["partitions"] if p["topic"] == TOPIC and p["partition"] == 0)


def _segment_starts(node: NodeProcess) -> list[int]:
    """The start offsets of the partition's segment files on the node's disk."""
    (directory,) = (node.data_dir / "replicated").glob(f"g*-{TOPIC}-0")
    return sorted(int(p.stem.split("-")[1]) for p in Path(directory).glob("*.log"))


def _none_below(starts: list[int]) -> bool:
    """No segment lies wholly below the cut (one ends where the next starts)."""
    return bool(starts) and starts[0] > 0 and (len(starts) < 2 or starts[1] > CUT)


def _wait_trimmed(node: NodeProcess) -> None:
    """Until the node's own view starts at the cut and its segments below it are gone."""
    wait_until(partial(_log_start, node), "the log start moved", done=CUT.__eq__)
    wait_until(partial(_segment_starts, node), "the segments below gone", done=_none_below)


def _log_start(node: NodeProcess) -> int:
    return int(_view(node)["log_start"])


def _leader(cluster: Cluster) -> NodeProcess:
    return cluster.nodes[cluster.wait_for_leader(TOPIC, 0)]


# -- tests -------------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_on_every_replica(cluster: Cluster) -> None:
    for node in cluster.nodes.values():
        assert _segment_starts(node)[0] == 0
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.delete_records([TopicPartition(TOPIC, 0, CUT)], operation_timeout=10)
    deleted = futures[TopicPartition(TOPIC, 0, CUT)].result(timeout=30)
    assert deleted.low_watermark == CUT
    for node in cluster.nodes.values():
        _wait_trimmed(node)
    leader = _leader(cluster)
    assert _earliest(leader) == (NONE, CUT)
    assert _fetch(leader, 100) == OFFSET_OUT_OF_RANGE
    assert _fetch(leader, CUT) == NONE
    # A consumer from the earliest offset starts at the new log start.
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "delete-records",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, -2)])  # OFFSET_BEGINNING
        message = wait_until(
            lambda: consumer.poll(0.5), "a record", done=lambda m: m is not None and not m.error()
        )
        assert message is not None and message.offset() == CUT
        assert (message.value() or b"").startswith(b"%04d" % CUT)
    finally:
        consumer.close()
    # Refusals, each followed by a request that is served.
    assert _delete_raw(leader, 0, RECORDS + 1) == (OFFSET_OUT_OF_RANGE, -1)
    assert _delete_raw(leader, 0, -5) == (OFFSET_OUT_OF_RANGE, -1)
    assert _delete_raw(leader, 5, 10)[0] == UNKNOWN_TOPIC_OR_PARTITION
    follower = next(n for n in cluster.nodes.values() if n is not leader)
    assert _delete_raw(follower, 0, CUT + 1)[0] == NOT_LEADER_OR_FOLLOWER
    assert _delete_raw(leader, 0, 100) == (NONE, CUT)  # never backwards
    assert _earliest(leader) == (NONE, CUT)


def test_offset_for_leader_epoch_after_a_leader_change(cluster: Cluster) -> None:
    old = _leader(cluster)
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "epochs", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, RECORDS - 1)])
        last = wait_until(
            lambda: consumer.poll(0.5), "the last record", done=lambda m: m is not None
        )
    finally:
        consumer.close()
    assert last is not None
    first_epoch = last.leader_epoch()
    assert first_epoch is not None
    assert first_epoch >= 1
    assert _epoch_end(old, first_epoch) == (NONE, first_epoch, RECORDS)
    assert _epoch_end(old, 0) == (NONE, -1, -1)  # below the earliest epoch

    old_id = next(i for i, n in cluster.nodes.items() if n is old)
    old.kill()
    new = cluster.nodes[cluster.wait_for_leader(TOPIC, 0, exclude=old_id)]
    # The new leader has the log start too (ListOffsets EARLIEST).
    assert wait_until(lambda: _earliest(new), "EARLIEST from the new leader")[1] == CUT
    producer = Producer({"bootstrap.servers": cluster.alive_bootstrap(), "acks": "all"})
    for i in range(10):
        producer.produce(TOPIC, value=b"after %d" % i)
    assert producer.flush(30) == 0
    error, epoch, end = _epoch_end(new, first_epoch)
    assert (error, epoch, end) == (NONE, first_epoch, RECORDS)
    # The new term's batches begin at RECORDS; its epoch is the partition's now.
    current = int(_view(new)["term"])
    assert current > first_epoch
    assert _epoch_end(new, current, current) == (NONE, current, RECORDS + 10)
    # Stale and future current_leader_epoch, in every API that carries it.
    assert _epoch_end(new, first_epoch, first_epoch)[0] == FENCED_LEADER_EPOCH
    assert _epoch_end(new, first_epoch, current + 1)[0] == UNKNOWN_LEADER_EPOCH
    assert _fetch(new, CUT, first_epoch) == FENCED_LEADER_EPOCH
    assert _fetch(new, CUT, current + 1) == UNKNOWN_LEADER_EPOCH
    assert _fetch(new, CUT, current) == NONE
    assert _earliest(new, first_epoch)[0] == FENCED_LEADER_EPOCH
    assert _earliest(new, current) == (NONE, CUT)
    follower = next(n for n in cluster.nodes.values() if n is not new and n.alive())
    assert _epoch_end(follower, first_epoch)[0] == NOT_LEADER_OR_FOLLOWER
    # The old leader restarts as a follower: it keeps the log start and its segments
    # below it stay gone.
    old.start()
    _wait_trimmed(old)
