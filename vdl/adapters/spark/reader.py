"""Executor side of the source: read exactly ``[start, end)`` of one partition as Arrow batches.

Fetching: ``fetch_client`` (kafka-python's client layer: TLS, SASL, metadata, leader
changes) asks for the partition's record batches, and a Fetch response carries them as the
bytes the log stores. Decoding: ``batch_arrow`` turns those bytes into the source's Arrow
columns in bulk, in a compiled loop, with no Python object per record (a per-record Python
path, as through confluent-kafka's Message objects, cost about 1.7 us a row; this is an order
of magnitude less).

confluent-kafka stays the client for everything else: the driver's metadata and offset
look-ups (``metadata.py``), the sink, and ``iter_chunks`` below, which the sink uses to read
back what it wrote.

The function is stateless: everything it needs is in its arguments, which come from the
pickled InputPartition. Given the same range it returns the same rows (the log is immutable
below its high watermark), which is what lets Spark replay a batch exactly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import kafka.errors as kafka_errors
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from vdl.adapters.spark.batch_arrow import AbortedTransactions, decode
from vdl.adapters.spark.fetch_client import (
    EARLIEST,
    LATEST,
    NONE,
    OFFSET_OUT_OF_RANGE,
    READ_COMMITTED,
    FetchClient,
)
from vdl.adapters.spark.metadata import consumer_config

CONSUME_CHUNK = 10_000
# The C accessor of the error, called through map() in iter_chunks' hot path.
_error = Message.error


class DataLossError(RuntimeError):
    """Records a batch must read are gone (retention, or a deleted and recreated topic)."""


def reader_config(bootstrap: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    return consumer_config(
        bootstrap,
        {
            # An EOF event tells us the partition's end even when the range ends in a gap.
            "enable.partition.eof": True,
            # Never jump silently: a position below the log start is data loss, reported.
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 100,
            # librdkafka stops prefetching for fetch.queue.backoff.ms (default 1 s) once
            # queued.min.messages are buffered; Python drains 100k records in well under that,
            # so the default left every large range idle for a second (3x slower end to end).
            "fetch.queue.backoff.ms": 10,
            "queued.min.messages": 200_000,
            **extra,
        },
    )


def read_range(
    bootstrap: str,
    client_config: dict[str, str],
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    """Yield the records at offsets ``start <= offset < end``, stopping exactly at ``end``."""
    if end <= start:
        return
    client = FetchClient(bootstrap, client_config, topic, partition, poll_timeout_ms)
    try:
        low, high = client.list_offset(EARLIEST), client.list_offset(LATEST)
        where = f'"{topic}" partition {partition} [{start}, {end})'
        if start < low:
            if fail_on_data_loss:
                raise DataLossError(
                    f"{where}: offsets {start}..{min(end, low) - 1} are no longer in the log "
                    f"(it now starts at {low}); retention removed them before they were read. "
                    'Set option "failOnDataLoss" to "false" to skip them.'
                )
            start = low
        if high < end:
            if fail_on_data_loss:
                raise DataLossError(
                    f"{where}: the log ends at {high}, before the range does; was the topic "
                    'deleted and recreated? Set option "failOnDataLoss" to "false" to skip.'
                )
            end = high
        if end <= start:
            return
        yield from _fetch_range(
            client, topic, partition, start, end, include_headers, fail_on_data_loss
        )
    finally:
        client.close()


def _fetch_range(
    client: FetchClient,
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
    fail_on_data_loss: bool,
) -> Iterator[pa.RecordBatch]:
    """Fetch from ``start`` until ``end``: one Arrow batch per Fetch response with rows.

    Gaps are legal (compaction, transaction markers, aborted data; the range may end in
    one): the fetch position moves past every complete batch the log returns, and a log
    whose readable end (high watermark, or last stable offset under read_committed) is at or
    past ``end`` with nothing more to return finishes the range.
    """
    where = f'"{topic}" partition {partition} [{start}, {end})'
    next_offset = start
    deadline = time.monotonic() + client.timeout_ms / 1000
    while next_offset < end:
        got = client.fetch(next_offset)
        if got.error_code == OFFSET_OUT_OF_RANGE:
            low = client.list_offset(EARLIEST)
            if fail_on_data_loss or low <= next_offset:
                raise DataLossError(f"{where}: offset {next_offset} is no longer in the log")
            next_offset = low  # failOnDataLoss=false: skip what retention removed
            continue
        if got.error_code != NONE:
            name = kafka_errors.for_code(got.error_code).__name__
            raise RuntimeError(f"{where}: fetch failed: {name} (error {got.error_code})")
        committed = client.isolation == READ_COMMITTED
        aborted = AbortedTransactions.of(got.aborted) if committed else None
        decoded = decode(
            got.records,
            topic=topic,
            partition=partition,
            start=start,
            end=end,
            fetch_offset=next_offset,
            include_headers=include_headers,
            aborted=aborted,
        )
        if decoded.batch is not None:
            yield decoded.batch
        if decoded.next_offset > next_offset:
            next_offset = decoded.next_offset
            deadline = time.monotonic() + client.timeout_ms / 1000
            continue
        if got.records:
            raise RuntimeError(
                f"{where}: the batch at offset {next_offset} does not fit in one Fetch "
                "response; the log returned only part of it"
            )
        readable = got.high_watermark
        if aborted is not None and got.last_stable_offset >= 0:
            readable = min(readable, got.last_stable_offset)
        if readable >= end:
            break  # the rest of the range is a gap
        if time.monotonic() > deadline:
            raise DataLossError(
                f"{where}: no record at or after offset {next_offset} arrived within "
                f"{client.timeout_ms} ms although the log reported it"
            )


def iter_chunks(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, poll_timeout_ms: int
) -> Iterator[list[Message]]:
    """The records at ``start <= offset < end`` of one partition, in order, in chunks.

    The consumer must have no assignment yet. Gaps are legal (the range may end in one): an
    end-of-partition event at or past ``end`` finishes the range too. Chunks rather than single
    records, so callers can use list comprehensions over them (the hot path of ``read()``).
    """
    where = f'"{topic}" partition {partition} [{start}, {end})'
    consumer.assign([KafkaTopicPartition(topic, partition, start)])
    next_offset = start
    deadline = time.monotonic() + poll_timeout_ms / 1000
    while next_offset < end:
        # consume() waits until it has num_messages or the timeout passes: never ask for more
        # than the range still holds, or every batch would end with a full timeout.
        messages = consumer.consume(num_messages=min(CONSUME_CHUNK, end - next_offset), timeout=1.0)
        if not messages:
            if time.monotonic() > deadline:
                raise DataLossError(
                    f"{where}: no record at or after offset {next_offset} arrived within "
                    f"{poll_timeout_ms} ms although the log reported it"
                )
            continue
        deadline = time.monotonic() + poll_timeout_ms / 1000
        last = messages[-1]
        # Fast path: a chunk of records only (no EOF or error event), all inside the range.
        if (last.offset() or 0) < end and not any(map(_error, messages)):
            next_offset = (last.offset() or 0) + 1
            yield messages
            continue
        chunk: list[Message] = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    # Everything up to the high watermark was delivered; if that covers the
                    # range, the rest of it is a gap (no records), not missing data.
                    if (message.offset() or 0) >= end:
                        next_offset = end
                        break
                    continue
                if error.code() == KafkaError._AUTO_OFFSET_RESET:
                    raise DataLossError(f"{where}: offset {next_offset} is no longer in the log")
                raise RuntimeError(f"{where}: fetch failed: {error.str()}")
            offset = message.offset() or 0
            if offset >= end:
                next_offset = end
                break
            next_offset = offset + 1
            chunk.append(message)
        if chunk:
            yield chunk
    consumer.unassign()
