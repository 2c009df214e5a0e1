"""Transaction markers on a 3-node cluster: partitions led by other nodes than the
transaction coordinator (the metadata group's leader) get their markers through a forward
to their leader (`vdl/txn/markers.py`), and read_committed readers see exactly the
committed transactions on every partition, from the leaders (Kafka) and from a follower's
replica (a YDB reader).

Marked slow: a 3-node cluster takes most of the default suite's time budget to start on a
busy 2-core machine (run with `-m slow`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import ydb
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.integration.cluster_support import Cluster, group0_leader
from tests.integration.waiting import wait_until

TOPIC = "txc"
PARTITIONS = 3
DATABASE = "/local"


@contextlib.contextmanager
def _driver(address: str) -> Iterator[ydb.Driver]:
    config = ydb.DriverConfig(
        endpoint=f"grpc://{address}", database=DATABASE, disable_discovery=True
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=10, fail_fast=True)
        yield driver
    finally:
        driver.stop(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("txn-partition-cluster")) as c:
        # Through YDB, to declare the consumer its readers use.
        with _driver(c.nodes[1].grpc_address) as driver:
            driver.topic_client.create_topic(
                f"{DATABASE}/{TOPIC}", consumers=["ydb"], min_active_partitions=PARTITIONS
            )
        for partition in range(PARTITIONS):
            c.wait_for_preferred_leader(TOPIC, partition)
        yield c


def _committed_values(cluster: Cluster) -> dict[int, list[bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "committed-reader",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    values: dict[int, list[bytes | None]] = {p: [] for p in range(PARTITIONS)}
    at_end: set[int] = set()
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])

        def all_at_end() -> bool:
            message = consumer.poll(0.5)
            if message is not None:
                error, partition = message.error(), message.partition()
                assert partition is not None
                if error is None:
                    values[partition].append(message.value())
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
            return len(at_end) == PARTITIONS

        wait_until(all_at_end, "every partition read to its end", every=0)
    finally:
        consumer.close()
    return values


@pytest.mark.slow
def test_markers_reach_partitions_led_by_other_nodes(cluster: Cluster) -> None:
    coordinator = wait_until(lambda: group0_leader(cluster.nodes[1]), done=lambda n: n > 0)
    leaders = cluster.leaders(TOPIC)
    # The markers of at least one partition go through a forward to its leader.
    assert set(leaders.values()) - {coordinator}, (coordinator, leaders)

    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": "txc-1", "linger.ms": 5}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for partition in range(PARTITIONS):
        producer.produce(TOPIC, value=b"aborted-%d" % partition, partition=partition)
    producer.flush(30)
    producer.abort_transaction(60)
    producer.begin_transaction()
    for partition in range(PARTITIONS):
        producer.produce(TOPIC, value=b"committed-%d" % partition, partition=partition)
    producer.commit_transaction(60)

    assert _committed_values(cluster) == {p: [b"committed-%d" % p] for p in range(PARTITIONS)}

    # A YDB reader on a node that follows partition 0 reads the replicas it holds, the
    # followers' too: the same committed records, never the aborted ones.
    follower = next(n for n in cluster.nodes if n != leaders[0])
    with _driver(cluster.nodes[follower].grpc_address) as driver:
        with driver.topic_client.reader(f"{DATABASE}/{TOPIC}", consumer="ydb") as reader:
            messages: list[Any] = []

            def read() -> int:
                with contextlib.suppress(TimeoutError):
                    messages.extend(reader.receive_batch(timeout=0.5).messages)
                return len(messages)

            wait_until(read, "the committed records", done=lambda n: n >= PARTITIONS)
            with pytest.raises(TimeoutError):
                reader.receive_batch(timeout=1.0)
            reader.close(timeout=10)
    assert sorted(m.data for m in messages) == [b"committed-%d" % p for p in range(PARTITIONS)]
