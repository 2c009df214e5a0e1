"""The Spark source's executor read path (raw Fetch + bulk decode) against real nodes.

Records produced by confluent-kafka (every codec, headers, null keys, empty values,
CreateTime and LogAppendTime topics) read back with
``read_range`` must equal what a confluent-kafka consumer (the previous read path, librdkafka
decoding) reads of the same range. A node with SASL SCRAM over TLS is read through the same
path with librdkafka-style settings, and a wrong password is a clean error.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer

from tests.integration.kafka_clients import confluent_create_topic
from tests.integration.node_process import NodeProcess
from tests.integration.security_support import (
    GROUP_A,
    PASSWORDS,
    TOPIC_A,
    SecureNode,
    start_secure_node,
)
from vdl.adapters.spark.fetch_client import FetchClientError
from vdl.adapters.spark.reader import iter_chunks, read_range, reader_config
from vdl.adapters.spark.schema import CREATE_TIME, LOG_APPEND_TIME, source_arrow

# librdkafka's timestamp types -> Kafka's TimestampType ids.
TIMESTAMP_TYPES = {1: CREATE_TIME, 2: LOG_APPEND_TIME}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("node") / "data") as process:
        yield process


def produce(bootstrap: str, topic: str, count: int, **config: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **config})
    for i in range(count):
        choices: list[list[tuple[str, str | bytes | None]]] = [
            [],
            [("h", b"v%d" % i)],
            [("a", b""), ("ключ", None)],
        ]
        headers = choices[i % 3]
        producer.produce(
            topic,
            key=None if i % 4 == 0 else b"key-%d" % i,
            value=b"" if i % 5 == 0 else b"value-%d-" % i + bytes(i % 50),
            headers=headers or None,
        )
    assert producer.flush(30) == 0


def pair(header: Any) -> dict[str, Any]:
    key, value = header
    return {"key": key, "value": value}


def old_rows(bootstrap: str, topic: str, start: int, end: int, **config: Any) -> list[Any]:
    """The range as a confluent-kafka consumer reads it, in the source's row shape."""
    consumer = Consumer(reader_config(bootstrap, config))
    try:
        rows = []
        for chunk in iter_chunks(consumer, topic, 0, start, end, 30_000):
            for m in chunk:
                kind, stamp = m.timestamp()
                assert isinstance(kind, int) and isinstance(stamp, int)
                headers = m.headers()
                rows.append(
                    {
                        "key": m.key(),
                        "value": m.value(),
                        "topic": topic,
                        "partition": 0,
                        "offset": m.offset(),
                        "timestamp": dt.datetime.fromtimestamp(stamp / 1000, dt.UTC),
                        "timestampType": TIMESTAMP_TYPES[kind],
                        "headers": None if headers is None else [pair(h) for h in headers],
                    }
                )
        return rows
    finally:
        consumer.close()


def new_rows(
    bootstrap: str, topic: str, start: int, end: int, config: dict[str, str] | None = None
) -> list[Any]:
    batches = list(
        read_range(
            bootstrap,
            config or {},
            topic,
            0,
            start,
            end,
            include_headers=True,
            fail_on_data_loss=True,
            poll_timeout_ms=30_000,
        )
    )
    for batch in batches:
        assert batch.schema == source_arrow(True)
    table = pa.Table.from_batches(batches, source_arrow(True))
    return [{**r, "timestamp": r["timestamp"].astimezone(dt.UTC)} for r in table.to_pylist()]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_each_codec_reads_like_librdkafka(node: NodeProcess, codec: str) -> None:
    topic = f"fetch-{codec}-{uuid.uuid4().hex[:6]}"
    confluent_create_topic(node.bootstrap, topic, 1)
    produce(node.bootstrap, topic, 3000, **{"compression.type": codec})
    expected = old_rows(node.bootstrap, topic, 0, 3000)
    assert len(expected) == 3000
    assert new_rows(node.bootstrap, topic, 0, 3000) == expected
    # A range inside batches is cut exactly.
    assert new_rows(node.bootstrap, topic, 17, 2011) == expected[17:2011]


def test_log_append_time_topic(node: NodeProcess) -> None:
    topic = f"fetch-lat-{uuid.uuid4().hex[:6]}"
    confluent_create_topic(node.bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    produce(node.bootstrap, topic, 500, **{"compression.type": "lz4"})
    expected = old_rows(node.bootstrap, topic, 0, 500)
    assert {r["timestampType"] for r in expected} == {LOG_APPEND_TIME}
    assert new_rows(node.bootstrap, topic, 0, 500) == expected


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureNode]:
    secured = start_secure_node(Path(tmp_path_factory.mktemp("secure")))
    try:
        yield secured
    finally:
        secured.node.stop()


def test_sasl_scram_over_tls_reads_through_the_new_path(secure: SecureNode) -> None:
    settings = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(secure.ca_file),
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": PASSWORDS["alice"],
        # alice may use only this group (the old path's consumer names one; the new ignores it).
        "group.id": GROUP_A,
    }
    bootstrap = secure.node.bootstrap
    produce(bootstrap, TOPIC_A, 200, **{"compression.type": "zstd"}, **settings)
    expected = old_rows(bootstrap, TOPIC_A, 0, 200, **settings)
    assert len(expected) == 200
    assert new_rows(bootstrap, TOPIC_A, 0, 200, settings) == expected
    wrong = settings | {"sasl.password": "not-the-password"}
    with pytest.raises(FetchClientError):
        new_rows(bootstrap, TOPIC_A, 0, 200, wrong)
    # The node still serves the legitimate client after the failed login.
    assert new_rows(bootstrap, TOPIC_A, 0, 200, settings) == expected
