"""The official YDB SDK against three real nodes: Discovery lists every node, topic admin
and commits go through the metadata group from any node, writers reach each partition's
leader, and after the leader of a partition is killed mid-write the writer carries on with
no duplicates or gaps (seq_no dedup) and a reader resumes at the committed offset — a
cursor shared with the Kafka consumer group of the same name."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import ydb
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPartition

from tests.integration.cluster_support import Cluster
from vdl.net.ydb.protos import ydb_discovery_pb2

DATABASE = "/local"
TOPIC = "/local/events"
CONSUMER = "billing"
TIMEOUT = 60


def list_endpoints(address: str) -> set[int]:
    """Node ids of the endpoints a node lists (our own protos, no SDK in between)."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            "/Ydb.Discovery.V1.DiscoveryService/ListEndpoints",
            request_serializer=ydb_discovery_pb2.ListEndpointsRequest.SerializeToString,
            response_deserializer=ydb_discovery_pb2.ListEndpointsResponse.FromString,
        )
        response = call(ydb_discovery_pb2.ListEndpointsRequest(database=DATABASE), timeout=5)
    result = ydb_discovery_pb2.ListEndpointsResult()
    response.operation.result.Unpack(result)
    return {e.node_id for e in result.endpoints}


def wait_for_endpoints(cluster: Cluster, expected: set[int]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while True:
        seen = {i: list_endpoints(n.grpc_address) for i, n in cluster.nodes.items() if n.alive()}
        if all(ids == expected for ids in seen.values()):
            return
        assert time.monotonic() < deadline, f"ListEndpoints answers: {seen}"
        time.sleep(0.2)


@contextlib.contextmanager
def driver_for(endpoint: str, *, discovery: bool = True) -> Iterator[ydb.Driver]:
    config = ydb.DriverConfig(
        endpoint=f"grpc://{endpoint}", database=DATABASE, disable_discovery=not discovery
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=10, fail_fast=True)
        yield driver
    finally:
        driver.stop(timeout=10)


def retry(action: Any) -> Any:
    """The metadata group may still be electing, or failing over: UNAVAILABLE is retried."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            return action()
        except (ydb.Unavailable, ydb.ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def read_all(driver: ydb.Driver, count: int) -> list[Any]:
    """Exactly ``count`` messages (committing each batch), then nothing more."""
    reader: Any = driver.topic_client.reader(TOPIC, consumer=CONSUMER)
    messages: list[Any] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(messages) < count:
            assert time.monotonic() < deadline, f"only {len(messages)} of {count} messages"
            try:
                batch = reader.receive_batch(timeout=5)
            except TimeoutError:
                continue
            messages.extend(batch.messages)
            reader.commit_with_ack(batch, timeout=TIMEOUT)
        with pytest.raises(TimeoutError):
            extra = reader.receive_batch(timeout=1.5)
            pytest.fail(
                f"unexpected messages: {[(m.partition_id, m.offset) for m in extra.messages]}"
            )
    finally:
        reader.close(timeout=10)
    return messages


def by_partition(messages: list[Any]) -> dict[int, list[tuple[int, int]]]:
    result: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    for m in messages:
        result[m.partition_id].append((m.offset, m.seqno))
    return result


def test_sdk_on_a_cluster_survives_the_loss_of_a_partition_leader(cluster: Cluster) -> None:
    wait_for_endpoints(cluster, {1, 2, 3})
    with driver_for(cluster.nodes[3].grpc_address) as admin_driver:
        # Through node 3, whether or not it leads the metadata group.
        retry(
            lambda: admin_driver.topic_client.create_topic(
                TOPIC, consumers=[CONSUMER], min_active_partitions=2
            )
        )
        retry(lambda: admin_driver.topic_client.alter_topic(TOPIC, set_retention_storage_mb=64))
        described = admin_driver.topic_client.describe_topic(TOPIC)
        assert len(described.partitions) == 2
        assert [c.name for c in described.consumers] == [CONSUMER]

    first, total = 100, 300
    with driver_for(cluster.nodes[1].grpc_address) as driver:
        writers = [
            driver.topic_client.writer(TOPIC, producer_id=f"w{p}", partition_id=p) for p in (0, 1)
        ]
        try:
            for writer in writers:
                writer.wait_init(timeout=TIMEOUT)
                writer.write_with_ack(
                    [ydb.TopicWriterMessage(f"m{i}".encode()) for i in range(1, first + 1)],
                    timeout=TIMEOUT,
                )
            # Read and commit the first part; the cursor is the Kafka group's too.
            assert len(read_all(driver, 2 * first)) == 2 * first
            assert kafka_committed(cluster) == {0: first, 1: first}

            victim = cluster.wait_for_leader("events", 0)
            errors: list[BaseException] = []

            def produce(writer: Any) -> None:
                try:
                    for i in range(first + 1, total + 1):
                        writer.write(ydb.TopicWriterMessage(f"m{i}".encode()))
                        time.sleep(0.005)
                    writer.flush(timeout=TIMEOUT)
                except BaseException as exc:  # reported by the main thread
                    errors.append(exc)

            threads = [threading.Thread(target=produce, args=(w,)) for w in writers]
            for thread in threads:
                thread.start()
            time.sleep(0.4)
            cluster.nodes[victim].kill()
            for thread in threads:
                thread.join(TIMEOUT * 2)
            assert not errors, errors
            assert not any(t.is_alive() for t in threads)
        finally:
            for writer in writers:
                with contextlib.suppress(Exception):
                    writer.close(timeout=10)

        survivor = next(i for i, n in cluster.nodes.items() if n.alive())
        wait_for_endpoints(cluster, set(cluster.nodes) - {victim})
    with driver_for(cluster.nodes[survivor].grpc_address) as driver:
        rest = by_partition(read_all(driver, 2 * (total - first)))
    for partition in (0, 1):
        # Resumed at the committed offset; every message once, in order, no gap.
        assert rest[partition] == [(i - 1, i) for i in range(first + 1, total + 1)], partition
    assert kafka_committed(cluster) == {0: total, 1: total}

    # The killed node comes back; replaying the metadata log leaves its cursor at the end.
    cluster.nodes[victim].start()
    with driver_for(cluster.nodes[victim].grpc_address, discovery=False) as driver:
        deadline = time.monotonic() + TIMEOUT
        while True:
            stats: Any = driver.topic_client.describe_consumer(TOPIC, CONSUMER, include_stats=True)
            committed = {
                p.partition_id: p.partition_consumer_stats.committed_offset
                for p in stats.partitions
            }
            if committed == {0: total, 1: total}:
                break
            assert time.monotonic() < deadline, committed
            time.sleep(0.3)


def kafka_committed(cluster: Cluster) -> dict[int, int]:
    """The Kafka consumer group's committed offsets (asked of its coordinator)."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.alive_bootstrap().split(","),
        group_id=CONSUMER,
        enable_auto_commit=False,
        request_timeout_ms=20000,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                return {p: consumer.committed(KafkaPartition("events", p)) for p in (0, 1)}
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()
