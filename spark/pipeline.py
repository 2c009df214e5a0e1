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
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

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
            if query.exception() is not None:
                print(f"{query.name} failed: {query.exception()}", file=sys.stderr)
                return 1
            progress = query.lastProgress or {}
            print(
                f"{query.name}: last batch {progress.get('batchId')}, "
                f"{progress.get('numInputRows', 0)} rows",
                file=sys.stderr,
            )
        return 0
    finally:
        for query in queries:
            query.stop()
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
