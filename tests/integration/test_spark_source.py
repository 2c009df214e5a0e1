"""The ``vdl`` Spark source against a real node: batch reads, availableNow streams, restarts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.kafka_clients import confluent_create_topic
from tests.integration.node_process import NodeProcess
from tests.integration.spark_support import local_spark

BASE_MS = 1_760_000_000_000


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("node") / "data") as process:
        yield process


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory, node: NodeProcess) -> Iterator[Any]:
    # Depends on the node so that it stops first: its Python workers (and their Kafka
    # clients) are gone before the node is asked to shut down.
    with local_spark(tmp_path_factory.mktemp("spark")) as session:
        yield session


Headers = list[tuple[str, str | bytes | None]]
Produced = dict[tuple[int, int], tuple[bytes, bytes, int, Headers]]


def produce(
    bootstrap: str, topic: str, count: int, first: int = 0, partitions: int = 2, **config: Any
) -> Produced:
    """Records with keys, values, explicit timestamps and headers; returns them by offset."""
    out: Produced = {}
    errors: list[str] = []

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, **config}
    )
    for i in range(first, first + count):
        key, value = f"k{i}".encode(), json.dumps({"n": i}).encode()
        headers: Headers = [
            ("source", b"test"),
            ("n", str(i).encode()),
        ]
        stamp = BASE_MS + i * 1000

        def done(
            err: Any,
            msg: Any,
            key: bytes = key,
            value: bytes = value,
            stamp: int = stamp,
            headers: Headers = headers,
        ) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                out[(msg.partition(), msg.offset())] = (key, value, stamp, headers)

        producer.produce(
            topic,
            key=key,
            value=value,
            partition=i % partitions,
            timestamp=stamp,
            headers=headers,
            on_delivery=done,
        )
    assert producer.flush(30) == 0
    assert not errors, errors
    return out


def rows_by_offset(rows: list[Any]) -> dict[tuple[int, int], Any]:
    return {(r["partition"], r["offset"]): r for r in rows}


def test_batch_read_equals_what_was_produced(spark: Any, node: NodeProcess) -> None:
    confluent_create_topic(node.bootstrap, "batch", 2)
    produced = produce(node.bootstrap, "batch", 300)
    df = (
        spark.read.format("vdl")
        .option("bootstrap", node.bootstrap)
        .option("subscribe", "batch")
        .option("includeHeaders", "true")
        .load()
    )
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    rows = rows_by_offset(df.collect())
    assert set(rows) == set(produced)
    for where, (key, value, stamp, headers) in produced.items():
        row = rows[where]
        assert (row["key"], row["value"], row["topic"]) == (key, value, "batch")
        # collect() gives naive local datetimes; .timestamp() reads them back the same way.
        assert round(row["timestamp"].timestamp() * 1000) == stamp
        assert row["timestampType"] == 0  # CreateTime, as Spark's Kafka source reports it
        assert [(h["key"], h["value"]) for h in row["headers"]] == headers

    # A sub-range, split into more tasks than partitions, reads exactly that range.
    start = json.dumps({"batch": {"0": 10, "1": -2}})
    end = json.dumps({"batch": {"0": 100, "1": 40}})
    sub = (
        spark.read.format("vdl")
        .option("bootstrap", node.bootstrap)
        .option("subscribe", "batch")
        .option("startingOffsets", start)
        .option("endingOffsets", end)
        .option("minPartitions", "7")
        .load()
    )
    assert sub.rdd.getNumPartitions() >= 7
    got = sorted((r["partition"], r["offset"]) for r in sub.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 100)] + [(1, o) for o in range(0, 40)]


def _stream(spark: Any, node: NodeProcess, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("vdl").option("bootstrap", node.bootstrap)
    reader = reader.option("subscribe", topic).option("startingOffsets", "earliest")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load().selectExpr("partition", "offset", "CAST(value AS STRING) AS value")


def _parquet_rows(spark: Any, path: Path) -> list[tuple[int, int, str]]:
    rows = spark.read.parquet(str(path)).collect()
    return [(r["partition"], r["offset"], r["value"]) for r in rows]


def _expected(produced: Produced) -> list[tuple[int, int, str]]:
    return sorted((p, o, v.decode()) for (p, o), (_, v, _, _) in produced.items())


def test_available_now_runs_are_exactly_once(spark: Any, node: NodeProcess, tmp_path: Path) -> None:
    confluent_create_topic(node.bootstrap, "stream", 2)
    produced = produce(node.bootstrap, "stream", 250)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> Any:
        query = (
            _stream(spark, node, "stream", maxOffsetsPerTrigger="100")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return query

    first = run()
    # availableNow honours the per-trigger limit: 250 records in batches of at most 100.
    sizes = [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]]
    assert sizes == [100, 100, 50]
    assert sorted(_parquet_rows(spark, out)) == _expected(produced)

    produced.update(produce(node.bootstrap, "stream", 120, first=250))
    second = run()
    assert sum(p["numInputRows"] for p in second.recentProgress) == 120
    rows = _parquet_rows(spark, out)
    assert len(rows) == len(set(rows)) == 370
    assert sorted(rows) == _expected(produced)


def test_kafka_source_options_pattern_timestamps_and_min_offsets(
    spark: Any, node: NodeProcess, tmp_path: Path
) -> None:
    # The Spark wiring of subscribePattern, offsets by timestamp and minOffsetsPerTrigger;
    # test_spark_kafka_options.py (slow) and test_spark_source_driver.py cover them in depth.
    confluent_create_topic(node.bootstrap, "options", 2)
    produce(node.bootstrap, "options", 100)
    window = (
        spark.read.format("vdl")
        .option("bootstrap", node.bootstrap)
        .option("subscribePattern", "^opt.ons$")
        .option("startingTimestamp", str(BASE_MS + 20_000))
        .option("endingTimestamp", str(BASE_MS + 50_000))
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
    )
    assert sorted(json.loads(r["value"])["n"] for r in window.collect()) == list(range(20, 50))

    # availableNow keeps maxOffsetsPerTrigger but ignores minOffsetsPerTrigger: the last 20
    # records are fewer than 30, and are read all the same.
    query = (
        _stream(spark, node, "options", maxOffsetsPerTrigger="40", minOffsetsPerTrigger="30")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [40, 40, 20]


def _batch_in_flight(checkpoint: Path) -> bool:
    """True while a batch's offsets are logged but its commit is not: it is mid-batch."""
    offsets = {p.name for p in (checkpoint / "offsets").glob("[0-9]*")}
    commits = {p.name for p in (checkpoint / "commits").glob("[0-9]*")}
    return bool(offsets - commits) and bool(commits)


def test_query_stopped_mid_batch_restarts_exactly_once(
    spark: Any, node: NodeProcess, tmp_path: Path
) -> None:
    from pyspark.sql.functions import udf

    confluent_create_topic(node.bootstrap, "crash", 2)
    produced = produce(node.bootstrap, "crash", 400)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    @udf(returnType="string")
    def slow(value):  # type: ignore[no-untyped-def]  # hints would make Spark guess a type
        # Each batch takes a while, so a stop lands inside one rather than between two.
        time.sleep(0.01)
        return value

    query = (
        _stream(spark, node, "crash", maxOffsetsPerTrigger="60")
        .withColumn("value", slow("value"))
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    deadline = time.monotonic() + 90
    while not _batch_in_flight(checkpoint) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _batch_in_flight(checkpoint)
    query.stop()
    # The interrupted batch is logged but not committed: the restart must replay it.
    offsets = {p.name for p in (checkpoint / "offsets").glob("[0-9]*")}
    commits = {p.name for p in (checkpoint / "commits").glob("[0-9]*")}
    assert offsets - commits, "the stop did not interrupt a batch"

    produced.update(produce(node.bootstrap, "crash", 50, first=400))
    restarted = (
        _stream(spark, node, "crash", maxOffsetsPerTrigger="200")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    restarted.awaitTermination(120)
    assert restarted.exception() is None
    rows = _parquet_rows(spark, out)
    assert len(rows) == len(set(rows)) == 450
    assert sorted(rows) == _expected(produced)


def _error_of(action: Any) -> str:
    with pytest.raises(Exception) as caught:
        action()
    return str(caught.value)


def test_bad_options_are_reported_clearly(spark: Any, node: NodeProcess) -> None:
    def load(**options: str) -> Any:
        reader = spark.read.format("vdl").option("bootstrap", node.bootstrap)
        for name, value in options.items():
            reader = reader.option(name, value)
        return reader.load()

    message = _error_of(lambda: load(subscribe="no-such-topic").collect())
    assert 'topic "no-such-topic" does not exist' in message

    message = _error_of(lambda: load(subscribe="batch", startingOffsets="{not json"))
    assert 'option "startingOffsets" is neither "earliest", "latest" nor valid JSON' in message

    message = _error_of(lambda: load(subscribe="batch", assign='{"batch": [0]}'))
    assert "Only one of the following options can be specified for Kafka source" in message

    message = _error_of(lambda: spark.readStream.format("vdl").option("subscribe", "batch").load())
    assert 'option "bootstrap" is required' in message

    stream = (
        spark.readStream.format("vdl")
        .option("bootstrap", node.bootstrap)
        .option("subscribe", "no-such-stream")
        .load()
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .start()
    )
    message = _error_of(lambda: stream.awaitTermination(60))
    assert 'topic "no-such-stream" does not exist' in message


def test_records_removed_by_retention_fail_or_are_skipped(spark: Any, tmp_path: Path) -> None:
    # A node of its own, with tiny segments and a fast retention check.
    args = ("--segment-bytes", "4096", "--retention-bytes", "8192", "--retention-check-ms", "100")
    with NodeProcess(tmp_path / "data", *args) as small:
        # Small record batches, so the log spans many segments and retention can drop some.
        produce(small.bootstrap, "trimmed", 400, partitions=1, **{"batch.num.messages": 10})
        consumer = Consumer({"bootstrap.servers": small.bootstrap, "group.id": "probe"})
        deadline = time.monotonic() + 30
        low = 0
        while low == 0 and time.monotonic() < deadline:
            low, high = consumer.get_watermark_offsets(TopicPartition("trimmed", 0), 10, False)
            time.sleep(0.1)
        consumer.close()
        assert 0 < low < high == 400, "retention removed nothing"

        def read(fail: str) -> Any:
            return (
                spark.read.format("vdl")
                .option("bootstrap", small.bootstrap)
                .option("subscribe", "trimmed")
                .option("startingOffsets", '{"trimmed": {"0": 0}}')
                .option("failOnDataLoss", fail)
                .load()
                .select("offset")
            )

        message = _error_of(lambda: read("true").collect())
        assert "are no longer in the log" in message
        assert 'Set option "failOnDataLoss" to "false"' in message
        offsets = sorted(r["offset"] for r in read("false").collect())
        assert offsets[0] >= low and offsets[-1] == 399
        assert offsets == list(range(offsets[0], 400))
