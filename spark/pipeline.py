"""Structured Streaming over VDL: shop events -> windowed aggregates -> Parquet and a VDL topic.

    python spark/pipeline.py --bootstrap 127.0.0.1:9092 --trigger available-now
    spark-submit --master 'local[2]' spark/pipeline.py --bootstrap 127.0.0.1:9092

Reads JSON events (see spark/generate_events.py) from ``--input-topic``, parses them, keys
them by their *event* time with a watermark (late events up to ``--watermark`` still count;
later ones are dropped), and counts per ``--window`` and event type: events, distinct users,
units and revenue. Each closed window is written once to

- Parquet files under ``--output-path`` (Spark's file sink: exactly once via its own log), and
- the VDL topic ``--output-topic`` as JSON keyed by "<window start>/<type>" (the ``vdl`` sink:
  exactly once via commit markers, see vdl/adapters/spark/sink.py).

The two outputs are two streaming queries with their own checkpoints under ``--checkpoint``;
restarting the job resumes both where they stopped. Append mode emits a window once the
watermark passes its end, so the newest windows appear only when later events arrive.

When the queries end on their own (``--trigger available-now``, or ``--run-seconds``), the job
prints what this run did: the windows it wrote, the windows still open (from the Parquet
query's state, read with Spark's state data source), and how the events it read add up:
read + held in open windows before = written + held in open windows now + dropped as late.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

EVENT_TYPES = ("page_view", "search", "add_to_cart", "purchase")
EVENT_SCHEMA = (
    "event_id string, user_id string, type string, product string, category string, "
    "price double, quantity int, event_time long"
)


def parse_events(raw: Any) -> Any:
    """VDL records -> typed events; unparsable records are dropped, not fatal."""
    from pyspark.sql import functions as F

    parsed = raw.select(
        F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"),
        F.col("timestamp").alias("log_time"),
    )
    return (
        parsed.where(F.col("e.event_time").isNotNull() & F.col("e.type").isNotNull())
        .select("e.*", "log_time")
        .withColumn("event_time", F.timestamp_millis("event_time"))
    )


def aggregate(events: Any, window: str, watermark: str) -> Any:
    from pyspark.sql import functions as F

    revenue = F.when(F.col("type") == "purchase", F.col("price") * F.col("quantity"))
    return (
        events.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window).alias("window"), F.col("type"))
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.approx_count_distinct("user_id").alias("users"),
            F.sum("quantity").alias("units"),
            F.round(F.coalesce(F.sum(revenue), F.lit(0.0)), 2).alias("revenue"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "type",
            "events",
            "users",
            "units",
            "revenue",
        )
    )


def start_queries(spark: Any, args: argparse.Namespace) -> list[Any]:
    """Start the Parquet query and the VDL query; returns both, running."""
    from pyspark.sql import functions as F

    from vdl.adapters.spark import register

    register(spark)
    raw = (
        spark.readStream.format("vdl")
        .option("bootstrap", args.bootstrap)
        .option("subscribe", args.input_topic)
        .option("startingOffsets", args.starting_offsets)
    )
    if args.max_offsets_per_trigger:
        raw = raw.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    stats = aggregate(parse_events(raw.load()), args.window, args.watermark)
    checkpoint = Path(args.checkpoint)

    def with_trigger(writer: Any) -> Any:
        if args.trigger == "available-now":
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=args.trigger)

    to_parquet = with_trigger(
        stats.writeStream.format("parquet")
        .outputMode("append")
        .option("path", args.output_path)
        .option("checkpointLocation", str(checkpoint / "parquet"))
        .queryName("stats_to_parquet")
    ).start()
    as_records = stats.select(
        F.concat_ws("/", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss"), "type").alias(
            "key"
        ),
        F.to_json(F.struct(*stats.columns)).alias("value"),
    )
    to_topic = with_trigger(
        as_records.writeStream.format("vdl")
        .outputMode("append")
        .option("bootstrap", args.bootstrap)
        .option("topic", args.output_topic)
        .option("checkpointLocation", str(checkpoint / "vdl"))
        .queryName("stats_to_vdl")
    ).start()
    return [to_parquet, to_topic]


@dataclass
class Windows:
    """Event counts per window (start and end in epoch ms) and event type."""

    counts: dict[tuple[int, int], dict[str, int]] = field(default_factory=lambda: defaultdict(dict))

    def add(self, start_ms: int, end_ms: int, kind: str, events: int) -> None:
        per_type = self.counts[(start_ms, end_ms)]
        per_type[kind] = per_type.get(kind, 0) + events

    def total(self) -> int:
        return sum(sum(per_type.values()) for per_type in self.counts.values())

    def table(self) -> list[str]:
        def cell(text: object) -> str:
            return f"{text!s:>12}"

        lines = [f"{'window (UTC)':<24}" + "".join(cell(t) for t in (*EVENT_TYPES, "total"))]
        for (start, end), per_type in sorted(self.counts.items()):
            when = f"{utc(start):%Y-%m-%d %H:%M}-{utc(end):%H:%M}"
            counts = [per_type.get(t, 0) for t in EVENT_TYPES]
            lines.append(f"{when:<24}" + "".join(cell(n) for n in (*counts, sum(counts))))
        return lines


def utc(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC)


def iso_ms(text: str) -> int:
    """A progress report's ISO timestamp ("2025-11-22T12:07:59.000Z") -> epoch ms."""
    return round(datetime.fromisoformat(text).timestamp() * 1000)


def open_windows(spark: Any, checkpoint: Path, batch_id: int | None) -> Windows:
    """The windows held in the aggregation's state after ``batch_id`` (default: the last).

    Read with Spark's state data source (format "statestore", see "State Data Source
    Integration Guide" in the Structured Streaming docs): the key is (window, type), the value
    the aggregation buffer, whose ``count`` is the count(1) column's."""
    reader = spark.read.format("statestore")
    if batch_id is not None:
        reader = reader.option("batchId", str(batch_id))
    rows = reader.load(str(checkpoint)).selectExpr(
        "unix_millis(key.window.start) AS start_ms",
        "unix_millis(key.window.end) AS end_ms",
        "key.type AS type",
        "value.count AS events",
    )
    windows = Windows()
    for row in rows.collect():
        windows.add(row["start_ms"], row["end_ms"], row["type"], row["events"])
    return windows


def report(spark: Any, args: argparse.Namespace, queries: list[Any]) -> None:
    """Print what this run of the queries did (see the module docstring)."""
    for query in queries:
        progress = query.recentProgress
        read = sum(p["numInputRows"] for p in progress)
        watermark = progress[-1]["eventTime"].get("watermark") if progress else None
        print(
            f"{query.name}: {len(progress)} batches, {read} events read, watermark {watermark}",
            file=sys.stderr,
        )
    to_parquet = queries[0]
    progress = to_parquet.recentProgress
    if not progress:
        print("nothing new to read", file=sys.stderr)
        return
    first_batch = progress[0]["batchId"]
    before_ms = iso_ms(progress[0]["eventTime"]["watermark"])
    now_ms = iso_ms(progress[-1]["eventTime"]["watermark"])
    read = sum(p["numInputRows"] for p in progress)

    # Windows are written once, when the watermark passes their end: this run's are those
    # that end after the watermark it started with and no later than the one it ended with.
    written = Windows()
    if Path(args.output_path).exists():
        rows = (
            spark.read.parquet(args.output_path)
            .selectExpr(
                "unix_millis(window_start) AS start_ms",
                "unix_millis(window_end) AS end_ms",
                "type",
                "events",
            )
            .where(f"end_ms > {before_ms} AND end_ms <= {now_ms}")
            .collect()
        )
        for row in rows:
            written.add(row["start_ms"], row["end_ms"], row["type"], row["events"])
    checkpoint = Path(args.checkpoint) / "parquet"
    held_before = open_windows(spark, checkpoint, first_batch - 1) if first_batch else Windows()
    held_now = open_windows(spark, checkpoint, None)
    dropped = read + held_before.total() - written.total() - held_now.total()

    print(
        f"\nWindows written by this run to {args.output_path} (Parquet) and to the topic "
        f"{args.output_topic!r} (events per type):",
    )
    for line in written.table():
        print(line)
    print(
        f"\nStill open (they end after the watermark, {utc(now_ms):%Y-%m-%d %H:%M:%S}; written "
        "once later events move it past their end):",
    )
    for line in held_now.table():
        print(line)
    print(
        f"\n{read} events read + {held_before.total()} held in open windows before = "
        f"{written.total()} in {len(written.counts)} windows written + "
        f"{held_now.total()} in {len(held_now.counts)} windows still open + "
        f"{dropped} dropped as late",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="VDL node address(es)")
    parser.add_argument("--input-topic", default="events")
    parser.add_argument("--output-topic", default="event-stats")
    parser.add_argument("--output-path", default="spark-output/stats")
    parser.add_argument("--checkpoint", default="spark-output/checkpoints")
    parser.add_argument("--window", default="1 minute")
    parser.add_argument("--watermark", default="2 minutes")
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        help="for a new query only; restarts resume from the checkpoint",
    )
    parser.add_argument("--max-offsets-per-trigger", type=int, default=0)
    parser.add_argument(
        "--trigger",
        default="10 seconds",
        help='"available-now" (process what is there, then stop) or an interval',
    )
    parser.add_argument(
        "--run-seconds",
        type=float,
        default=0,
        help="with an interval trigger: stop after this long (0 = run until killed)",
    )
    parser.add_argument("--master", default=None, help="when run with python; spark-submit sets it")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Workers must run an interpreter that has vdl, pyarrow and confluent-kafka: this one.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("vdl-event-stats")
    if args.master:
        builder = builder.master(args.master)
    spark = (
        builder.config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        # The report sums this run's progress updates: keep them all (default 100).
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    queries = start_queries(spark, args)
    try:
        if args.trigger == "available-now":
            for query in queries:
                query.awaitTermination()
        elif args.run_seconds > 0:
            deadline = time.monotonic() + args.run_seconds
            while time.monotonic() < deadline and all(q.isActive for q in queries):
                time.sleep(0.5)
        else:
            spark.streams.awaitAnyTermination()
        for query in queries:
            query.stop()
            if query.exception() is not None:
                print(f"{query.name} failed: {query.exception()}", file=sys.stderr)
                return 1
        report(spark, args, queries)
        return 0
    finally:
        for query in queries:
            query.stop()
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
