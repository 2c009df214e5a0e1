"""What the README's Spark pipeline (spark/pipeline.py) must write, computed from its input.

The pipeline counts events per one-minute event-time window and type with a two-minute
watermark, in append mode: a window is written once the watermark (latest event time - 2
minutes) passes its end; the rest stay open. These helpers compute that from the events as
stored, and read back what was written to Parquet and to the `event-stats` topic, failing on
any window written twice.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka.admin import AdminClient

WINDOW_MS, WATERMARK_MS = 60_000, 120_000  # the pipeline's defaults, which the README uses
TYPES = ("page_view", "search", "add_to_cart", "purchase")

Windows = Counter[tuple[int, str]]  # (window start ms, event type) -> events


def partitions_of(bootstrap: str, topic: str) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return len(metadata.topics[topic].partitions)


def expected_windows(events: Sequence[dict[str, Any]]) -> tuple[Windows, Windows]:
    """(closed, still open) after one micro-batch holding all of `events`."""
    watermark = max(e["event_time"] for e in events) - WATERMARK_MS
    closed: Windows = Counter()
    still_open: Windows = Counter()
    for e in events:
        start = e["event_time"] // WINDOW_MS * WINDOW_MS
        (closed if start + WINDOW_MS <= watermark else still_open)[(start, e["type"])] += 1
    return closed, still_open


def _epoch_ms(column: pa.ChunkedArray) -> list[int]:
    """Parquet timestamps (Spark writes INT96 or micros, UTC) as epoch milliseconds."""
    as_ms = column.cast(pa.timestamp("ms", tz=column.type.tz))
    return [int(v) for v in as_ms.cast(pa.int64()).to_pylist()]


def parquet_windows(path: Path) -> Windows:
    table = pq.read_table(path)
    parquet: Windows = Counter()
    for start, end, kind, count in zip(
        _epoch_ms(table.column("window_start")),
        _epoch_ms(table.column("window_end")),
        table.column("type").to_pylist(),
        table.column("events").to_pylist(),
        strict=True,
    ):
        assert end == start + WINDOW_MS
        assert (start, kind) not in parquet, "a window written twice"
        parquet[(start, kind)] = count
    return parquet


def topic_windows(records: Sequence[tuple[tuple[bytes | None, bytes | None], Any]]) -> Windows:
    """The windows in the `event-stats` records (as spark_support.read_topic returns them)."""
    topic: Windows = Counter()
    for (key, value), _ in records:
        row = json.loads(value or b"")
        start = round(datetime.fromisoformat(row["window_start"]).timestamp() * 1000)
        assert key == f"{row['window_start'][:19]}/{row['type']}".encode()
        assert (start, row["type"]) not in topic, "a window written twice"
        topic[(start, row["type"])] = row["events"]
    return topic
