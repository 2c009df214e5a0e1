"""Spark Kafka-source options of the ``vdl`` source against a real node.

``subscribePattern`` (topics discovered at each micro-batch), starting/ending offsets by
timestamp (ListOffsets by time) with ``startingOffsetsByTimestampStrategy``, and
``minOffsetsPerTrigger`` + ``maxTriggerDelay`` with ``maxOffsetsPerTrigger``. One node and one
Spark session for the module, whose start alone takes longer than the default suite can
spare: the module is marked slow. The default suite checks the same decisions against a node
without a JVM (test_spark_source_driver.py) and their Spark wiring in the session that
test_spark_source.py already starts.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.integration.kafka_clients import confluent_create_topic
from tests.integration.node_process import NodeProcess
from tests.integration.spark_support import local_spark
from tests.integration.waiting import wait_until

BASE_MS = 1_760_000_000_000

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("node") / "data") as process:
        yield process


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory, node: NodeProcess) -> Iterator[Any]:
    # Depends on the node so that it stops first (its workers' Kafka clients go first).
    with local_spark(tmp_path_factory.mktemp("spark")) as session:
        yield session


def produce(bootstrap: str, topic: str, count: int, first: int = 0, partitions: int = 1) -> None:
    """Records ``first..first+count-1``: value ``n``, timestamp BASE_MS + n s, partition n % p.

    One flush, so that the records of a partition reach the log as one record batch.
    """
    errors: list[str] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50, "enable.idempotence": True}
    )
    for n in range(first, first + count):
        producer.produce(
            topic,
            value=str(n).encode(),
            partition=n % partitions,
            timestamp=BASE_MS + n * 1000,
            on_delivery=lambda err, _msg: errors.append(str(err)) if err else None,
        )
    assert producer.flush(30) == 0
    assert not errors, errors


def new_topic(node: NodeProcess, prefix: str, count: int) -> str:
    """A topic of its own for a test, one partition, holding records ``0..count-1``."""
    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    confluent_create_topic(node.bootstrap, topic, 1)
    produce(node.bootstrap, topic, count)
    return topic


def vdl_source(reader: Any, node: NodeProcess, options: dict[str, str]) -> Any:
    """The ``vdl`` source on ``node`` with ``options``, through Spark's batch
    (``spark.read``) or streaming (``spark.readStream``) reader."""
    return reader.format("vdl").option("bootstrap", node.bootstrap).options(**options).load()


def read(spark: Any, node: NodeProcess, **options: str) -> Any:
    return vdl_source(spark.read, node, options)


def stream(spark: Any, node: NodeProcess, **options: str) -> Any:
    return vdl_source(spark.readStream, node, options).selectExpr(
        "topic", "partition", "offset", "CAST(value AS STRING) AS value"
    )


def to_memory(frame: Any, name: str, tmp: Any, **trigger: Any) -> Any:
    return (
        frame.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp / name))
        .trigger(**trigger)
        .start()
    )


def values(spark: Any, table: str) -> list[int]:
    return sorted(int(r["value"]) for r in spark.table(table).collect())


def batch_sizes(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def error_of(action: Any) -> str:
    with pytest.raises(Exception) as caught:
        action()
    return str(caught.value)


def test_subscribe_pattern_reads_matching_topics(spark: Any, node: NodeProcess) -> None:
    confluent_create_topic(node.bootstrap, "pat-a", 2)
    confluent_create_topic(node.bootstrap, "xpat-z", 1)
    produce(node.bootstrap, "pat-a", 6, partitions=2)
    produce(node.bootstrap, "xpat-z", 3)
    # Every topic whose name the pattern matches (found anywhere in it, as in Spark).
    rows = read(spark, node, subscribePattern="^pat-").select("topic").collect()
    assert sorted(r["topic"] for r in rows) == ["pat-a"] * 6
    assert read(spark, node, subscribePattern="pat-").count() == 9


def test_subscribe_pattern_discovers_topics_at_each_micro_batch(
    spark: Any, node: NodeProcess, tmp_path: Any
) -> None:
    confluent_create_topic(node.bootstrap, "disc-a", 2)
    produce(node.bootstrap, "disc-a", 6, partitions=2)
    query = to_memory(
        stream(spark, node, subscribePattern="^disc-", startingOffsets="earliest"),
        "pattern_stream",
        tmp_path,
        processingTime="100 milliseconds",
    )
    try:
        wait_until(lambda: len(values(spark, "pattern_stream")) == 6, "the first topic read")
        # A topic created while the query runs is found by a later micro-batch, from offset 0.
        confluent_create_topic(node.bootstrap, "disc-b", 1)
        produce(node.bootstrap, "disc-b", 4, first=100)
        wait_until(lambda: len(values(spark, "pattern_stream")) == 10, "the new topic read")
        assert query.exception() is None
    finally:
        query.stop()
    assert values(spark, "pattern_stream") == [0, 1, 2, 3, 4, 5, 100, 101, 102, 103]


def test_offsets_by_timestamp_bound_a_batch_read(spark: Any, node: NodeProcess) -> None:
    confluent_create_topic(node.bootstrap, "when", 2)
    produce(node.bootstrap, "when", 40, partitions=2)

    def got(**options: str) -> list[int]:
        frame = read(spark, node, subscribe="when", **options)
        return sorted(int(r["value"]) for r in frame.select("value").collect())

    # One timestamp for all partitions: records stamped in [BASE+10s, BASE+30s).
    assert got(startingTimestamp=str(BASE_MS + 10_000), endingTimestamp=str(BASE_MS + 30_000)) == (
        list(range(10, 30))
    )
    # Per partition; an ending timestamp past every record ends at the latest offset.
    by_partition = got(
        startingOffsetsByTimestamp=json.dumps({"when": {"0": BASE_MS + 20_000, "1": BASE_MS}}),
        endingOffsetsByTimestamp=json.dumps({"when": {"0": BASE_MS * 2, "1": BASE_MS + 6_000}}),
    )
    assert by_partition == [1, 3, 5, *range(20, 40, 2)]
    # Spark's preference: startingTimestamp, then startingOffsetsByTimestamp, then offsets.
    assert got(
        startingTimestamp=str(BASE_MS + 35_000),
        startingOffsetsByTimestamp=json.dumps({"when": {"0": BASE_MS, "1": BASE_MS}}),
        startingOffsets="earliest",
    ) == [35, 36, 37, 38, 39]

    # No record that late: an error by default, the latest offset with strategy "latest".
    late = str(BASE_MS * 2)
    message = error_of(lambda: got(startingTimestamp=late))
    assert "No offset matched from request of topic-partition when-0 and timestamp" in message
    assert got(startingTimestamp=late, startingOffsetsByTimestampStrategy="latest") == []
    # The node kept serving the ordinary read after the refused one.
    assert len(got()) == 40


def test_stream_starts_at_a_timestamp(spark: Any, node: NodeProcess, tmp_path: Any) -> None:
    confluent_create_topic(node.bootstrap, "when-stream", 2)
    produce(node.bootstrap, "when-stream", 20, partitions=2)
    query = to_memory(
        stream(spark, node, subscribe="when-stream", startingTimestamp=str(BASE_MS + 15_000)),
        "from_time",
        tmp_path,
        availableNow=True,
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert values(spark, "from_time") == [15, 16, 17, 18, 19]


def test_conflicting_options_fail_with_sparks_messages(spark: Any, node: NodeProcess) -> None:
    message = error_of(lambda: read(spark, node, subscribe="when", subscribePattern="w.*"))
    assert (
        "Only one of the following options can be specified for Kafka source: "
        "subscribe, subscribepattern, assign. See the docs for more details." in message
    )
    message = error_of(
        lambda: (
            stream(spark, node, subscribe="when", endingOffsetsByTimestamp='{"when": {"0": 1}}')
            .writeStream.format("noop")
            .start()
            .awaitTermination(60)
        )
    )
    assert "ending timestamp not valid in streaming queries" in message
    message = error_of(
        lambda: read(
            spark, node, subscribe="when", startingOffsetsByTimestamp='{"when": {"0": 1}}'
        ).collect()
    )
    assert "you must specify all topics" in message
    assert read(spark, node, subscribe="when", startingTimestamp=str(BASE_MS)).count() == 40


def test_min_offsets_per_trigger_holds_small_batches_back(
    spark: Any, node: NodeProcess, tmp_path: Any
) -> None:
    topic = new_topic(node, "gate", 5)
    query = to_memory(
        stream(
            spark,
            node,
            subscribe=topic,
            startingOffsets="earliest",
            minOffsetsPerTrigger="20",
            maxOffsetsPerTrigger="25",
            maxTriggerDelay="1h",
        ),
        "gated",
        tmp_path,
        processingTime="100 milliseconds",
    )
    try:
        # As in Spark, the first micro-batch after a start does not wait.
        wait_until(lambda: len(values(spark, "gated")) == 5, "the first micro-batch")
        produce(node.bootstrap, topic, 30, first=5)
        # 30 waiting >= 20: a batch runs, capped at 25; the 5 left over wait for more.
        wait_until(lambda: len(values(spark, "gated")) == 30, "the capped micro-batch")
        produce(node.bootstrap, topic, 20, first=35)
        wait_until(lambda: len(values(spark, "gated")) == 55, "the next full micro-batch")
        # The progress of a batch is reported just after its rows reach the sink.
        wait_until(lambda: sum(batch_sizes(query)) == 55, "the progress of every batch")
        assert query.exception() is None
        assert batch_sizes(query) == [5, 25, 25]
    finally:
        query.stop()
    assert values(spark, "gated") == list(range(55))


def test_max_trigger_delay_runs_a_small_batch_in_the_end(
    spark: Any, node: NodeProcess, tmp_path: Any
) -> None:
    topic = new_topic(node, "delay", 5)
    query = to_memory(
        stream(
            spark,
            node,
            subscribe=topic,
            startingOffsets="earliest",
            minOffsetsPerTrigger="1000",
            maxTriggerDelay="1s",
        ),
        "delayed",
        tmp_path,
        processingTime="100 milliseconds",
    )
    try:
        wait_until(lambda: len(values(spark, "delayed")) == 5, "the first micro-batch")
        produce(node.bootstrap, topic, 7, first=5)
        # Far fewer than 1000 records, but a second after the last batch they are read anyway.
        wait_until(lambda: len(values(spark, "delayed")) == 12, "the delayed micro-batch")
        wait_until(lambda: sum(batch_sizes(query)) == 12, "the progress of every batch")
        assert query.exception() is None
        assert batch_sizes(query) == [5, 7]
    finally:
        query.stop()


def test_available_now_ignores_min_offsets_but_keeps_the_cap(
    spark: Any, node: NodeProcess, tmp_path: Any
) -> None:
    topic = new_topic(node, "now", 100)
    query = to_memory(
        stream(
            spark,
            node,
            subscribe=topic,
            startingOffsets="earliest",
            # The last 20 records are fewer than 30: a stream would wait for more, not this.
            minOffsetsPerTrigger="30",
            maxOffsetsPerTrigger="40",
            maxTriggerDelay="1h",
        ),
        "available_now",
        tmp_path,
        availableNow=True,
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert batch_sizes(query) == [40, 40, 20]
    assert values(spark, "available_now") == list(range(100))
