"""Leader epochs in Metadata (KIP-320) on three real nodes, with confluent-kafka and
kafka-python.

Every node's Metadata names a partition's leader with the Raft term of its leadership,
which is the epoch stamped into the batches that leader appends and the one ListOffsets v4+
reports. With epochs in Metadata both clients validate their positions after a leader
change (OffsetForLeaderEpoch); consumers that are killed the leader from under them, mid
consumption, go on reading from the new leader without loss, duplicates or a reset.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from tests.integration.cluster_support import Cluster
from tests.integration.kafka_clients import confluent_produce
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until

# A 3-node cluster of its own and a leader killed: slow (Metadata's and ListOffsets'
# epochs are tested on a node in tests/unit/kafka/test_metadata_epochs.py, by default).
pytestmark = pytest.mark.slow

TOPIC = "epochs"
FENCED_LEADER_EPOCH = 74  # the Kafka protocol guide's error codes
UNKNOWN_LEADER_EPOCH = 75
LATEST, EARLIEST = -1, -2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("leader-epochs")
    cluster = Cluster(root)
    cluster.start()
    try:
        cluster.create_topic(TOPIC, 1)
        # Leader balancing moves the first leader to the preferred replica (a new term):
        # from then on the epoch stays until the kill.
        cluster.wait_for_preferred_leader(TOPIC)
        yield cluster
    finally:
        cluster.stop()


def _ask(node: NodeProcess, request: Any, response: Any, version: int) -> Any:
    """One request on a socket of our own to `node`, its decoded answer."""
    request.with_header(correlation_id=1, client_id="epochs-test")
    with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        head = sock.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            raise ConnectionError(f"node at {node.bootstrap} closed the connection")
        body = sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    return response.decode(head + body, version=version, header=True, framed=True)


def leader_and_epoch(node: NodeProcess, version: int = 9) -> tuple[int, int]:
    """(leader, leader epoch) of the partition in `node`'s own Metadata answer."""
    request = MetadataRequest(
        version=version,
        topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
        allow_auto_topic_creation=False,
    )
    answer = _ask(node, request, MetadataResponse, version)
    (part,) = [p for t in answer.topics if t.name == TOPIC for p in t.partitions]
    return int(part.leader_id), int(part.leader_epoch)


def agreed(cluster: Cluster) -> tuple[int, int]:
    """(leader, epoch) once every live node names the same leader with an epoch."""
    views = wait_until(
        lambda: {leader_and_epoch(n) for n in cluster.nodes.values() if n.alive()},
        "every node naming one leader with its epoch",
        done=lambda seen: len(seen) == 1 and min(seen)[0] > 0 and min(seen)[1] > 0,
        tolerate=(OSError, ValueError),
    )
    return min(views)


def list_offset(node: NodeProcess, timestamp: int, current_epoch: int) -> tuple[int, int, int]:
    """ListOffsets v4: (error code, offset, leader epoch) of the partition."""
    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, current_leader_epoch=current_epoch, timestamp=timestamp
    )
    request = ListOffsetsRequest(
        version=4,
        replica_id=-1,
        isolation_level=0,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[partition])],
    )
    answer = _ask(node, request, ListOffsetsResponse, 4)
    (part,) = answer.topics[0].partitions
    return int(part.error_code), int(part.offset), int(part.leader_epoch)


def _values(first: int, count: int) -> list[tuple[bytes, bytes]]:
    return [(b"k", b"%07d" % i) for i in range(first, first + count)]


def test_metadata_names_the_epoch_the_leader_stamps(cluster: Cluster) -> None:
    leader, epoch = agreed(cluster)
    # v7 is the first Metadata with the field; v12 the newest served.
    assert leader_and_epoch(cluster.nodes[leader], 7) == (leader, epoch)
    assert leader_and_epoch(cluster.nodes[leader], 12) == (leader, epoch)
    confluent_produce(cluster.bootstrap, TOPIC, _values(0, 10))
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False)
    try:
        tp = KTopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        records: list[Any] = []
        wait_until(
            lambda: len(records) >= 10,
            "the ten records",
            step=lambda: records.extend(consumer.poll(timeout_ms=200).get(tp, [])),
        )
    finally:
        consumer.close()
    assert {r.leader_epoch for r in records} == {epoch}
    node = cluster.nodes[leader]
    assert list_offset(node, EARLIEST, epoch) == (0, 0, epoch)
    assert list_offset(node, LATEST, -1) == (0, 10, epoch)
    assert list_offset(node, 0, epoch) == (0, 0, epoch)  # by timestamp: the first record
    # An older epoch is fenced (0 and -1 mean "unknown": Raft terms start at 1).
    assert list_offset(node, LATEST, epoch - 1)[0] == (FENCED_LEADER_EPOCH if epoch > 1 else 0)
    assert list_offset(node, LATEST, epoch + 1) == (UNKNOWN_LEADER_EPOCH, -1, -1)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_consumers_go_on_past_a_killed_leader(cluster: Cluster) -> None:
    """Kills the partition's leader (-9): the last test of the module."""
    before, after = 3000, 3000
    leader, epoch = agreed(cluster)
    base = int(list_offset(cluster.nodes[leader], LATEST, -1)[1])
    # Batches of 100 records, so the consumers fetch many times.
    confluent_produce(cluster.bootstrap, TOPIC, _values(0, before), **{"batch.num.messages": 100})
    librdkafka = _Lines()
    rd_logger = logging.getLogger("epochs-test.librdkafka")
    rd_logger.addHandler(librdkafka)
    rd_logger.setLevel(logging.DEBUG)
    fetcher = _Lines()
    kp_logger = logging.getLogger("kafka.consumer.fetcher")
    kp_logger.addHandler(fetcher)
    kp_level = kp_logger.level
    kp_logger.setLevel(logging.DEBUG)
    rd = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "epochs-rd",
            "enable.auto.commit": False,
            # Small fetches and a short queue: the kill lands mid-consumption.
            "max.partition.fetch.bytes": 4096,
            "queued.min.messages": 200,
            "fetch.queue.backoff.ms": 10,
            "debug": "metadata,fetch",
            "logger": rd_logger,
        }
    )
    kp = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=4096,
    )
    got_rd: list[tuple[int, bytes]] = []
    got_kp: list[tuple[int, bytes, int]] = []
    tp = KTopicPartition(TOPIC, 0)

    quota = [base + 500]  # until the kill each consumer stops there, mid-log

    def step() -> None:
        if not got_rd or got_rd[-1][0] < quota[0]:
            for msg in rd.consume(num_messages=100, timeout=0.05):
                assert msg.error() is None, msg.error()
                got_rd.append((int(msg.offset() or 0), bytes(msg.value() or b"")))
        if not got_kp or got_kp[-1][0] < quota[0]:
            for r in kp.poll(timeout_ms=50, max_records=100).get(tp, []):
                got_kp.append((r.offset, r.value, r.leader_epoch))

    try:
        rd.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        kp.assign([tp])
        kp.seek(tp, base)
        wait_until(
            lambda: (
                min(got_rd[-1][0] if got_rd else -1, got_kp[-1][0] if got_kp else -1) >= quota[0]
            ),
            "both consumers part-way",
            step=step,
        )
        cluster.nodes[leader].kill()
        confluent_produce(
            cluster.alive_bootstrap(), TOPIC, _values(before, after), **{"batch.num.messages": 100}
        )
        new_leader, new_epoch = agreed(cluster)
        assert new_leader != leader and new_epoch > epoch
        end = base + before + after
        quota[0] = end
        wait_until(
            lambda: (got_rd[-1][0] if got_rd else -1, got_kp[-1][0] if got_kp else -1),
            "both consumers at the end",
            done=lambda last: last == (end - 1, end - 1),
            step=step,
        )
    finally:
        rd.close()
        kp.close()
        rd_logger.removeHandler(librdkafka)
        kp_logger.removeHandler(fetcher)
        kp_logger.setLevel(kp_level)
    expected = [v for _, v in _values(0, before + after)]
    # Each consumer read every record once, in offset order, with no reset or gap.
    rd_tail = [(o, v) for o, v in got_rd if o >= base]
    assert [o for o, _ in rd_tail] == list(range(base, end))
    assert [v for _, v in rd_tail] == expected
    assert [o for o, _, _ in got_kp] == list(range(base, end))
    assert [v for _, v, _ in got_kp] == expected
    # The batches written after the kill carry the new leader's epoch.
    assert {e for o, _, e in got_kp if o < base + before} == {epoch}
    assert all(epoch < e <= new_epoch for _, _, e in got_kp[before:])
    # ListOffsets names the epoch of the batch at the log start, and the current one.
    survivor = cluster.nodes[new_leader]
    assert list_offset(survivor, EARLIEST, new_epoch) == (0, 0, epoch)
    assert list_offset(survivor, LATEST, new_epoch) == (0, end, new_epoch)
    # Both validated their positions against the new leader (OffsetForLeaderEpoch).
    assert any("Validating offsets" in line for line in fetcher.lines), fetcher.lines[-20:]
    validated = [line for line in librdkafka.lines if "validat" in line.lower()]
    assert any("epoch validation succeeded" in line for line in validated), validated
    assert not any("truncat" in line.lower() for line in librdkafka.lines), validated
