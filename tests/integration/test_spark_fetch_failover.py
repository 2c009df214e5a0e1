"""The source's fetch path follows a leader change in the middle of a range.

Three nodes, one partition replicated three times. ``read_range`` starts reading (several
Fetch responses' worth of records), the partition's leader is killed -9 between two of its
Arrow batches, and the rest of the range must come from the new leader: every row exactly
once, equal to what a confluent-kafka consumer read before the kill.

Marked slow: a three-node cluster, an election and 30 MB of records.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer

from tests.integration.cluster_support import Cluster
from vdl.adapters.spark.reader import iter_chunks, read_range, reader_config
from vdl.adapters.spark.schema import source_arrow

pytestmark = pytest.mark.slow

TOPIC = "failover-read"
COUNT = 3000
VALUE = 10_000  # bytes: 30 MB, several Fetch responses of at most 8 MiB each


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("cluster")) as nodes:
        yield nodes


def test_a_killed_leader_mid_range_is_followed(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, 1)
    leader = cluster.wait_for_preferred_leader(TOPIC)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(COUNT):
        producer.produce(TOPIC, key=b"%d" % i, value=bytes([i % 256]) * VALUE, partition=0)
    assert producer.flush(60) == 0
    consumer = Consumer(reader_config(cluster.bootstrap, {}))
    try:
        expected = [
            (m.offset(), m.key(), m.value())
            for chunk in iter_chunks(consumer, TOPIC, 0, 0, COUNT, 30_000)
            for m in chunk
        ]
    finally:
        consumer.close()
    assert len(expected) == COUNT

    batches = read_range(
        cluster.bootstrap,
        {},
        TOPIC,
        0,
        0,
        COUNT,
        include_headers=False,
        fail_on_data_loss=True,
        poll_timeout_ms=60_000,
    )
    first = next(batches)
    assert 0 < first.num_rows < COUNT  # the range needs more than one Fetch response
    cluster.nodes[leader].kill()
    rest = list(batches)
    table = pa.Table.from_batches([first, *rest], source_arrow(False))
    got = list(
        zip(
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )
    assert got == expected
    assert cluster.wait_for_leader(TOPIC, 0, exclude=leader) != leader
