"""The row shapes of the source and the sink, in Spark DDL and in Arrow.

The source's columns are those of Spark's Kafka source, so queries written for Kafka run
unchanged. ``read()`` yields Arrow record batches, and Spark checks them with a strict schema
equality against its own Arrow mapping of the DDL (``int`` is int32, ``timestamp`` is
``timestamp[us, tz=UTC]``, every field nullable): the two definitions below must agree.
"""

from __future__ import annotations

import pyarrow as pa

BASE_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

BASE_ARROW = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)
HEADERS_ARROW = BASE_ARROW.append(pa.field("headers", HEADER_TYPE))

# Kafka's TimestampType ids, which Spark's Kafka source reports in ``timestampType``.
NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1


def source_ddl(include_headers: bool) -> str:
    return f"{BASE_DDL}, {HEADERS_DDL}" if include_headers else BASE_DDL


def source_arrow(include_headers: bool) -> pa.Schema:
    return HEADERS_ARROW if include_headers else BASE_ARROW


# The sink reads these columns by name, as Spark's Kafka sink does; only ``value`` is required.
SINK_COLUMNS = ("key", "value", "topic", "partition", "headers")
