"""Topic semantics YDB users rely on, through real clients against real node processes:

- dropping a topic drops its consumers and every committed offset on it, at once (YDB
  keeps consumers in the topic; Kafka removes a deleted topic's offsets at deletion), on
  every node and across restarts: a new topic of an old name starts clean;
- reading chosen partitions without a consumer (nothing committed, commits refused with
  BAD_REQUEST as YDB's read session does);
- creating a topic that exists succeeds and leaves it as it was, as YDB answers;
- a reader closed while its session starts is normal: no ERROR in the node's log.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import ydb
from confluent_kafka import OFFSET_INVALID, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.cluster_support import Cluster
from tests.integration.node_process import NodeProcess
from tests.integration.test_ydb_sdk import DATABASE, read_messages, sync_driver
from vdl.net.grpc import GrpcChannel
from vdl.net.ydb.protos import ydb_topic_pb2

STREAM_READ = "/Ydb.Topic.V1.TopicService/StreamRead"
METADATA = (("x-ydb-database", DATABASE),)
SUCCESS = 400000
BAD_REQUEST = 400010
FromClient = ydb_topic_pb2.StreamReadMessage.FromClient
FromServer = ydb_topic_pb2.StreamReadMessage.FromServer


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("lifecycle") / "data") as process:
        yield process


def _committed(driver: ydb.Driver, path: str, consumer: str) -> list[int]:
    described = driver.topic_client.describe_consumer(path, consumer, include_stats=True)
    stats = [p.partition_consumer_stats for p in described.partitions]
    return [s.committed_offset for s in stats if s is not None]


def _write(driver: ydb.Driver, path: str, values: list[bytes], partition: int = 0) -> None:
    with driver.topic_client.writer(path, partition_id=partition) as writer:
        writer.write([ydb.TopicWriterMessage(v) for v in values])
        writer.flush()


def test_a_dropped_topic_takes_its_consumers_offsets_with_it(node: NodeProcess) -> None:
    path = f"{DATABASE}/dropped"
    endpoint = f"grpc://{node.grpc_address}"
    with sync_driver(endpoint) as driver:
        driver.topic_client.create_topic(path, consumers=["c"])
        _write(driver, path, [b"old-%d" % i for i in range(4)])
        with driver.topic_client.reader(path, consumer="c") as reader:
            assert len(read_messages(reader, 4)) == 4
        assert _committed(driver, path, "c") == [4]

        driver.topic_client.drop_topic(path)
        driver.topic_client.create_topic(path, consumers=["c"])
        assert _committed(driver, path, "c") == [0]

    # Nothing comes back from disk either.
    node.stop()
    node.start()
    with sync_driver(endpoint) as driver:
        assert _committed(driver, path, "c") == [0]
        _write(driver, path, [b"new-0", b"new-1"])
        with driver.topic_client.reader(path, consumer="c") as reader:
            got = read_messages(reader, 2)
        assert [(m.offset, m.data) for m in got] == [(0, b"new-0"), (1, b"new-1")]


def _kafka_committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        return int(tp.offset)
    finally:
        consumer.close()


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0


def _recreate(cluster: Cluster, topic: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        admin = AdminClient({"bootstrap.servers": cluster.alive_bootstrap()})
        if topic not in admin.list_topics(timeout=10).topics:
            break
        assert time.monotonic() < deadline, "the deleted topic is still listed"
        time.sleep(0.2)
    cluster.create_topic(topic, 1)


def test_kafka_offsets_of_a_deleted_topic_are_gone_on_every_node(cluster: Cluster) -> None:
    topic, group = "deleted", "g"
    cluster.create_topic(topic, 1)
    _produce(cluster.bootstrap, topic, [b"old-%d" % i for i in range(5)])
    committer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    finally:
        committer.close()
    assert _kafka_committed(cluster.bootstrap, group, topic) == 5

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=30)
    _recreate(cluster, topic)
    assert _kafka_committed(cluster.bootstrap, group, topic) == OFFSET_INVALID

    # Every node applied the deletion: restarted, whichever coordinates finds nothing.
    cluster.stop()
    cluster.start()
    assert _kafka_committed(cluster.bootstrap, group, topic) == OFFSET_INVALID

    _produce(cluster.bootstrap, topic, [b"new-0", b"new-1", b"new-2"])
    reader = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    )
    try:
        reader.subscribe([topic])
        got: list[tuple[int | None, bytes | None]] = []
        deadline = time.monotonic() + 60
        while len(got) < 3:
            assert time.monotonic() < deadline, got
            message = reader.poll(1.0)
            if message is not None and message.error() is None:
                got.append((message.offset(), message.value()))
        assert got == [(0, b"new-0"), (1, b"new-1"), (2, b"new-2")]
    finally:
        reader.close()


class _StartAt(ydb.TopicReaderEvents.EventHandler):
    """The SDK asks the application where a partition starts when there is no consumer."""

    def __init__(self, offsets: dict[int, int]) -> None:
        self._offsets = offsets

    def on_partition_get_start_offset(self, event: Any) -> Any:
        return ydb.TopicReaderEvents.OnPartitionGetStartOffsetResponse(
            start_offset=self._offsets[event.partition_id]
        )


def test_reading_chosen_partitions_without_a_consumer(node: NodeProcess) -> None:
    path = f"{DATABASE}/no-consumer"
    with sync_driver(f"grpc://{node.grpc_address}") as driver:
        driver.topic_client.create_topic(path, min_active_partitions=3)
        for partition in range(3):
            _write(driver, path, [b"p%d-%d" % (partition, i) for i in range(3)], partition)
        selector = ydb.TopicReaderSelector(path=path, partitions=[0, 2])
        expected = sorted([b"p0-0", b"p0-1", b"p0-2", b"p2-1", b"p2-2"])
        for _ in range(2):  # nothing is committed: a second reader reads the same
            with driver.topic_client.reader(
                selector, consumer=None, event_handler=_StartAt({0: 0, 2: 1})
            ) as reader:
                got = read_messages(reader, len(expected), commit=False)
            assert sorted(m.data for m in got) == expected


async def _refusal(node: NodeProcess, init: Any, commit: bool) -> Any:
    """The first reply of a raw StreamRead session that is not SUCCESS: after `init` (and,
    with `commit`, a commit of the first partition session it is given)."""
    async with GrpcChannel.connect("127.0.0.1", node.grpc_port) as channel:
        async with channel.stream(STREAM_READ, METADATA, 10) as call:
            request = FromClient()
            request.init_request.CopyFrom(init)
            await call.send(request.SerializeToString())
            while True:
                raw = await call.receive()
                assert raw is not None
                reply = FromServer.FromString(raw)
                if reply.status != SUCCESS:
                    return reply
                assert commit, reply
                if reply.WhichOneof("server_message") == "start_partition_session_request":
                    started = reply.start_partition_session_request.partition_session
                    assert started.partition_id == 1
                    request = FromClient()
                    request.commit_offset_request.commit_offsets.add(
                        partition_session_id=started.partition_session_id
                    ).offsets.add(start=0, end=1)
                    await call.send(request.SerializeToString())


async def test_without_a_consumer_partitions_are_named_and_commits_refused(
    node: NodeProcess,
) -> None:
    with sync_driver(f"grpc://{node.grpc_address}") as driver:
        driver.topic_client.create_topic(f"{DATABASE}/raw-no-consumer", min_active_partitions=2)

    unnamed = ydb_topic_pb2.StreamReadMessage.InitRequest()
    unnamed.topics_read_settings.add(path="raw-no-consumer")
    refused = await _refusal(node, unnamed, commit=False)
    assert refused.status == BAD_REQUEST
    assert "explicitly specify the partitions" in refused.issues[0].message

    named = ydb_topic_pb2.StreamReadMessage.InitRequest()
    named.topics_read_settings.add(path="raw-no-consumer", partition_ids=[1])
    refused = await _refusal(node, named, commit=True)
    assert refused.status == BAD_REQUEST
    assert refused.issues[0].message == "can't commit when reading without a consumer"


def test_readers_closed_at_once_log_no_error(node: NodeProcess) -> None:
    path = f"{DATABASE}/churn"
    with sync_driver(f"grpc://{node.grpc_address}") as driver:
        driver.topic_client.create_topic(path, consumers=["c"], min_active_partitions=4)
        for partition in range(4):
            _write(driver, path, [b"x" * 1000] * 500, partition)
        for i in range(30):
            reader = driver.topic_client.reader(path, consumer="c")
            time.sleep(0.01 * (i % 10))
            try:
                reader.close(timeout=10)
            except TimeoutError:
                # The SDK's sync close can wait forever on a stream its reconnect loop was
                # opening while it closed: it never cancels that call, and keeps waiting for
                # the server's next message in it. What this test checks is the node's side;
                # the driver's stop below ends that call.
                pass
    _, counters = node.stage_snapshot()
    assert counters.get(f"grpc_request_errors{{code=INTERNAL,method={STREAM_READ}}}", 0) == 0
    assert counters.get(f"grpc_request_errors{{code=CANCELLED,method={STREAM_READ}}}", 0) >= 1
    errors = [line for line in node.log().splitlines() if " ERROR " in line]
    assert errors == []
