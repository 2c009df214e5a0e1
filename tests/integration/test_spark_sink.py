"""The ``vdl`` Spark sink against a real node: read back with a Kafka client, across restarts."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kafka_clients import confluent_create_topic, confluent_produce
from tests.integration.node_process import NodeProcess
from tests.integration.spark_support import Record, local_spark, read_topic
from vdl.adapters.spark.sink import TAG_HEADER


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


def source_messages(first: int, count: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i}".encode(), f"v{i}".encode()) for i in range(first, first + count)]


def expected(messages: list[tuple[bytes, bytes]]) -> Counter[Record]:
    return Counter((k, v.upper()) for k, v in messages)


def start_copy(
    spark: Any, node: NodeProcess, source: str, target: str, checkpoint: Path, transform: Any = None
) -> Any:
    df = (
        spark.readStream.format("vdl")
        .option("bootstrap", node.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
    )
    if transform is not None:
        df = transform(df)
    return (
        df.writeStream.format("vdl")
        .option("bootstrap", node.bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_stream_into_a_topic_across_restarts(spark: Any, node: NodeProcess, tmp_path: Path) -> None:
    confluent_create_topic(node.bootstrap, "copy-in", 2)
    confluent_create_topic(node.bootstrap, "copy-out", 2)
    produced = source_messages(0, 200)
    confluent_produce(node.bootstrap, "copy-in", produced)
    checkpoint = tmp_path / "checkpoint"

    query = start_copy(spark, node, "copy-in", "copy-out", checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None
    records = read_topic(node.bootstrap, "copy-out", 2)
    assert Counter(r for r, _ in records) == expected(produced)
    # Every record carries the sink's tag, which is what makes replays recognisable.
    assert all(any(name == TAG_HEADER for name, _ in headers) for _, headers in records)

    more = source_messages(200, 100)
    confluent_produce(node.bootstrap, "copy-in", more)
    query = start_copy(spark, node, "copy-in", "copy-out", checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None
    assert Counter(r for r, _ in read_topic(node.bootstrap, "copy-out", 2)) == expected(
        produced + more
    )

    # Spark crashed after our commit but before its own commit log entry: it replays the
    # batch. Simulated by removing the last commit entry; the sink must write nothing again.
    last = max((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    query = start_copy(spark, node, "copy-in", "copy-out", checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None
    assert Counter(r for r, _ in read_topic(node.bootstrap, "copy-out", 2)) == expected(
        produced + more
    )


def test_batch_that_failed_half_written_is_completed_without_duplicates(
    spark: Any, node: NodeProcess, tmp_path: Path
) -> None:
    from pyspark.sql.functions import udf

    confluent_create_topic(node.bootstrap, "fail-in", 2)
    confluent_create_topic(node.bootstrap, "fail-out", 2)
    produced = source_messages(0, 300)
    confluent_produce(node.bootstrap, "fail-in", produced)
    checkpoint, tripped = tmp_path / "checkpoint", tmp_path / "tripped"
    trip_path = str(tripped)

    @udf(returnType="string")
    def fail_once(value):  # type: ignore[no-untyped-def]  # hints would make Spark guess a type
        import os
        import time

        if value == "V250" and not os.path.exists(trip_path):
            open(trip_path, "w").close()
            # Let the producer deliver what it has, so the failure leaves a partial batch.
            time.sleep(2)
            raise RuntimeError("injected failure in the middle of a batch")
        return value

    def failing(df: Any) -> Any:
        return df.withColumn("value", fail_once("value"))

    query = start_copy(spark, node, "fail-in", "fail-out", checkpoint, failing)
    with pytest.raises(Exception, match="injected failure"):
        query.awaitTermination(120)
    partial = read_topic(node.bootstrap, "fail-out", 2)
    assert 0 < len(partial) < len(produced), "the failure did not leave a partial batch"

    query = start_copy(spark, node, "fail-in", "fail-out", checkpoint, failing)
    query.awaitTermination(120)
    assert query.exception() is None
    assert Counter(r for r, _ in read_topic(node.bootstrap, "fail-out", 2)) == expected(produced)


def test_batch_write(spark: Any, node: NodeProcess) -> None:
    confluent_create_topic(node.bootstrap, "batch-out", 1)
    rows = [(f"k{i}", f"v{i}", [("h", b"x")]) for i in range(50)]
    schema = "key string, value string, headers array<struct<key: string, value: binary>>"
    df = spark.createDataFrame(rows, schema)
    writer = df.write.format("vdl").mode("append").option("bootstrap", node.bootstrap)
    writer.option("topic", "batch-out").save()
    records = read_topic(node.bootstrap, "batch-out", 1)
    assert Counter(r for r, _ in records) == Counter((k.encode(), v.encode()) for k, v, _ in rows)
    assert all(headers == [("h", b"x")] for _, headers in records)


def test_pipeline_windows_reach_parquet_and_a_topic(
    spark: Any, node: NodeProcess, tmp_path: Path
) -> None:
    from spark import generate_events, pipeline

    # A fixed schedule: 600 events 250 ms apart (2.5 minutes of event time), none late; the
    # same seed and start give the generator's events here and in the topic.
    start_ms = 1_763_000_040_000
    events = list(generate_events.events(600, 50, 3, 0.0, 1000, start_ms, 150_000))
    assert (
        generate_events.generate(
            node.bootstrap,
            "shop",
            600,
            seed=3,
            users=50,
            late_fraction=0.0,
            max_lateness_s=1,
            minutes=2.5,
            start_ms=start_ms,
        )
        == 600
    )
    args = pipeline.build_parser().parse_args(
        [
            "--bootstrap",
            node.bootstrap,
            "--input-topic",
            "shop",
            "--output-topic",
            "shop-stats",
            "--output-path",
            str(tmp_path / "stats"),
            "--checkpoint",
            str(tmp_path / "checkpoints"),
            "--window",
            "1 minute",
            "--watermark",
            "10 seconds",
            "--trigger",
            "available-now",
        ]
    )
    for query in pipeline.start_queries(spark, args):
        query.awaitTermination(180)
        assert query.exception() is None

    # Windows closed by the watermark: those ending before (latest event - 10 s).
    latest_ms = max(e["event_time"] for e in events)
    expected: Counter[tuple[int, str]] = Counter()
    for e in events:
        start = e["event_time"] // 60_000 * 60_000
        if start + 60_000 <= latest_ms - 10_000:
            expected[(start, e["type"])] += 1
    assert expected, "the test data closes no window"

    parquet = spark.read.parquet(str(tmp_path / "stats")).collect()
    got = Counter(
        {(round(r["window_start"].timestamp() * 1000), r["type"]): r["events"] for r in parquet}
    )
    assert len(parquet) == len(got)
    assert got == expected

    topic_rows = [
        json.loads(value or b"") for (_, value), _ in read_topic(node.bootstrap, "shop-stats", 1)
    ]
    assert len(topic_rows) == len(parquet)
    assert sorted((r["type"], r["events"]) for r in topic_rows) == sorted(
        (t, n) for (_, t), n in expected.items()
    )
