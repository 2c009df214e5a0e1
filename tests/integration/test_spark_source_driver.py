"""The ``vdl`` source's driver-side decisions against a real node, without a JVM.

What Spark asks the source between micro-batches (initial offset, latest offset under a read
limit, the ranges of a batch read) is plain Python: these tests call it directly, so pattern
discovery, offsets by timestamp and the minOffsetsPerTrigger gate are checked against a real
node in well under a second each. tests/integration/test_spark_kafka_options.py runs the
same options through Spark.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMinRows

from tests.integration.kafka_clients import confluent_create_topic
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until
from vdl.adapters.spark.options import OptionError, SourceOptions
from vdl.adapters.spark.source import OffsetRangePartition, VdlBatchReader, VdlStreamReader

BASE_MS = 1_760_000_000_000


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("node") / "data") as process:
        yield process


def produce(bootstrap: str, topic: str, count: int, first: int = 0, partitions: int = 1) -> None:
    """Values ``first..``, timestamp BASE_MS + n seconds, partition n % partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for n in range(first, first + count):
        producer.produce(
            topic, value=str(n).encode(), partition=n % partitions, timestamp=BASE_MS + n * 1000
        )
    assert producer.flush(30) == 0


def stream_reader(node: NodeProcess, **options: str) -> VdlStreamReader:
    opts = {"bootstrap": node.bootstrap, "startingOffsets": "earliest", **options}
    return VdlStreamReader(SourceOptions.parse(opts, streaming=True))


def batch_ranges(node: NodeProcess, **options: str) -> list[tuple[str, int, int, int]]:
    reader = VdlBatchReader(
        SourceOptions.parse({"bootstrap": node.bootstrap, **options}, streaming=False)
    )
    ranges = reader.partitions()
    assert all(isinstance(r, OffsetRangePartition) for r in ranges)
    return [(r.topic, r.partition, r.start, r.end) for r in ranges]  # type: ignore[attr-defined]


def read_values(reader: VdlStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[int]:
    out: list[int] = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            out.extend(int(v) for v in batch.column("value").to_pylist())
    return sorted(out)


def test_pattern_discovers_topics_created_later(node: NodeProcess) -> None:
    reader = stream_reader(node, subscribePattern="^drv-")
    try:
        # Nothing matches yet: the stream starts with no partitions and waits.
        start = reader.initialOffset()
        assert start == {}
        assert reader.latestOffset(start, ReadAllAvailable()) == {}
        confluent_create_topic(node.bootstrap, "drv-a", 2)
        confluent_create_topic(node.bootstrap, "other-drv", 1)
        produce(node.bootstrap, "drv-a", 4, partitions=2)
        # A partition seen for the first time enters at its earliest offset, empty...
        first = reader.latestOffset(start, ReadAllAvailable())
        assert first == {"drv-a": {"0": 0, "1": 0}}
        # ...and is read from the next micro-batch on.
        second = reader.latestOffset(first, ReadAllAvailable())
        assert second == {"drv-a": {"0": 2, "1": 2}}
        assert read_values(reader, first, second) == [0, 1, 2, 3]
    finally:
        reader.close()


def test_offsets_by_timestamp_resolve_on_the_node(node: NodeProcess) -> None:
    confluent_create_topic(node.bootstrap, "drv-when", 2)
    produce(node.bootstrap, "drv-when", 20, partitions=2)
    # Partition p holds n = 2 * offset + p, stamped BASE_MS + n seconds.
    assert batch_ranges(
        node,
        subscribe="drv-when",
        startingTimestamp=str(BASE_MS + 5_000),
        endingOffsetsByTimestamp=json.dumps(
            {"drv-when": {"0": BASE_MS + 12_000, "1": BASE_MS * 2}}
        ),
    ) == [("drv-when", 0, 3, 6), ("drv-when", 1, 2, 10)]
    with pytest.raises(OptionError, match="topic-partition drv-when-0 and timestamp"):
        batch_ranges(node, subscribe="drv-when", startingTimestamp=str(BASE_MS * 2))
    lenient = batch_ranges(
        node,
        subscribe="drv-when",
        startingTimestamp=str(BASE_MS * 2),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert lenient == []
    reader = stream_reader(
        node,
        subscribe="drv-when",
        startingOffsetsByTimestamp=json.dumps(
            {"drv-when": {"0": BASE_MS + 18_000, "1": BASE_MS * 2}}
        ),
        startingOffsetsByTimestampStrategy="latest",
    )
    try:
        assert reader.initialOffset() == {"drv-when": {"0": 9, "1": 10}}
    finally:
        reader.close()


def test_min_offsets_gate_holds_until_enough_or_the_delay(node: NodeProcess) -> None:
    confluent_create_topic(node.bootstrap, "drv-gate", 1)
    limit = ReadMinRows(10)
    reader = stream_reader(
        node, subscribe="drv-gate", minOffsetsPerTrigger="10", maxTriggerDelay="1h"
    )
    try:
        start = reader.initialOffset()
        # The first question after a start is answered at once (nothing to wait from).
        assert reader.latestOffset(start, limit) == start
        produce(node.bootstrap, "drv-gate", 3)
        assert reader.latestOffset(start, limit) == start
        # Trigger.Once passes ReadAllAvailable: every limit is ignored, as in Spark.
        assert reader.latestOffset(start, ReadAllAvailable()) == {"drv-gate": {"0": 3}}
        produce(node.bootstrap, "drv-gate", 7, first=3)
        assert reader.latestOffset(start, limit) == {"drv-gate": {"0": 10}}
    finally:
        reader.close()

    delayed = stream_reader(
        node, subscribe="drv-gate", minOffsetsPerTrigger="1000", maxTriggerDelay="300ms"
    )
    try:
        start = delayed.initialOffset()
        assert delayed.latestOffset(start, limit) == {"drv-gate": {"0": 10}}
        produce(node.bootstrap, "drv-gate", 2, first=10)
        then = {"drv-gate": {"0": 10}}
        assert delayed.latestOffset(then, limit) == then
        # Fewer than 1000 records, but once the delay has passed they are read.
        wait_until(
            lambda: delayed.latestOffset(then, limit),
            "the delayed micro-batch",
            done=lambda end: end == {"drv-gate": {"0": 12}},
            every=0.05,
        )
    finally:
        delayed.close()
