"""The ``vdl`` sink: exactly once for ``writeStream``, at least once for batch ``write``.

Columns are those of Spark's Kafka sink: ``value`` (binary or string, required), ``key``,
``topic`` (unless the ``topic`` option names one), ``partition`` and ``headers``. Records are
produced with an idempotent producer and ``acks=all``, so librdkafka's own retries never
duplicate or reorder, and a write counts only once the node has it durably.

Why a restarted streaming query does not duplicate
---------------------------------------------------
Spark runs micro-batch ``B`` as write tasks, then calls ``commit(messages, B)`` on the driver,
then records ``B`` in its checkpoint commit log. A crash anywhere before that last step makes
Spark run ``B`` again after a restart, with the same id and, because the source is
deterministic, the same input. Two cases, handled separately:

1. The crash came after our ``commit`` ran: every record of ``B`` is already in the log.
   ``commit`` appended a *commit marker* ``(query id, B, ends)`` to a small commit topic, with
   acks=all, before returning. A task of a replayed batch first reads the newest marker of its
   query; if it covers ``B`` the task writes nothing.
2. The crash came earlier: some tasks of ``B`` wrote some of their records. Every record a task
   writes carries a header ``vdl.spark.write = <query id>:<B>:<task partition>:<digest>``, the
   digest being a hash of the record's topic, partition, key, value and headers. Before writing,
   a task scans the target partitions from the last marker's ``ends`` (per partition, an offset
   below which no record of a later batch can be, since batch ``B+1`` starts only after
   ``commit(B)``) to the high watermark, counts the digests it finds under its own
   ``(query, B, task)`` and skips that many rows with the same digest. Counting, rather than a
   sequence number, keeps this right even when the rows of a task reach it in another order
   after a restart (a shuffle), as long as each task receives the same multiset of rows.

Before a query's first commit there is no marker. The first task to find none appends a *begin
marker* with the target topic's current high watermarks before it writes anything; the scan
bound is then the smallest begin marker (each one was read before any data written after it).

What the argument assumes, and what breaks it: the same query id (the checkpoint) and the same
task layout on replay (do not change ``minPartitions``/``spark.sql.shuffle.partitions`` of a
crashed query before it has caught up); no speculative execution (two live attempts of one task
race); the commit topic kept (it is tiny: one record per batch). Readers may see a failed
batch's partial output before the replay completes it: the guarantee is "every row once", not
atomic visibility.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from vdl.adapters.spark.metadata import METADATA_TIMEOUT_S
from vdl.adapters.spark.offsets import Offsets, TopicPartition, from_json_dict, to_json_dict
from vdl.adapters.spark.options import OptionError, SinkOptions
from vdl.adapters.spark.reader import iter_chunks, reader_config

TAG_HEADER = "vdl.spark.write"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
# How far back one step of the commit-topic scan goes when looking for the newest marker.
MARKER_WINDOW = 256
FLUSH_TIMEOUT_S = 120.0
POLL_TIMEOUT_MS = 120_000

Headers = list[tuple[str, bytes | None]]


class SinkError(RuntimeError):
    """A write the sink could not complete; the batch fails and Spark may retry it."""


def commit_topic_for(options: SinkOptions, query_id: str) -> str:
    # One small topic per query: its newest record is that query's newest marker.
    return options.commit_topic or f"_vdl-spark-sink-{query_id}"


# ---------------------------------------------------------------------------------------------
# Row conversion (shared by the batch and the streaming writer)


def _as_bytes(value: Any, column: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise SinkError(f'column "{column}" must be binary or string, got {type(value).__name__}')


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: Headers

    def digest(self) -> str:
        """Identity of the record's content; length-prefixed so no two records collide by
        concatenation."""
        h = hashlib.blake2b(digest_size=16)
        parts: list[bytes | None] = [
            self.topic.encode(),
            b"" if self.partition is None else str(self.partition).encode(),
            self.key,
            self.value,
        ]
        for name, data in self.headers:
            parts.extend((name.encode(), data))
        for part in parts:
            if part is None:
                h.update(b"\xff\xff\xff\xff")
            else:
                h.update(len(part).to_bytes(4, "big"))
                h.update(part)
        return h.hexdigest()


class RowConverter:
    """Turns Spark rows into records, by column position resolved once from the schema."""

    def __init__(self, column_names: Iterable[str], topic: str | None) -> None:
        names = [n.lower() for n in column_names]
        if "value" not in names:
            raise OptionError('the data written to "vdl" needs a "value" column')
        if topic is None and "topic" not in names:
            raise OptionError(
                'give the "topic" option, or a "topic" column naming each row\'s topic'
            )
        self._index = {name: names.index(name) for name in names}
        self._topic = topic

    def __call__(self, row: Any) -> Record:
        idx = self._index
        topic = self._topic or row[idx["topic"]]
        if not topic:
            raise SinkError("a row has no topic")
        partition = row[idx["partition"]] if "partition" in idx else None
        raw_headers = row[idx["headers"]] if "headers" in idx else None
        headers: Headers = []
        for header in raw_headers or ():
            headers.append((str(header[0]), _as_bytes(header[1], "headers.value")))
        return Record(
            topic=str(topic),
            partition=None if partition is None else int(partition),
            key=_as_bytes(row[idx["key"]], "key") if "key" in idx else None,
            value=_as_bytes(row[idx["value"]], "value"),
            headers=headers,
        )


def producer_config(options: SinkOptions) -> dict[str, Any]:
    return {
        "bootstrap.servers": options.bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        # Java clients' partitioner: the same key lands in the same partition as from Kafka
        # Streams, Spark's Kafka sink or any JVM producer.
        "partitioner": "murmur2_random",
        "log_level": 4,
        **options.client_config,
    }


class _DeliveryTracker:
    """Collects delivery reports: failures, and per partition the next offset after ours."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.ends: Offsets = {}
        self.delivered = 0

    def __call__(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self.errors.append(error.str())
            return
        self.delivered += 1
        tp = (message.topic(), message.partition())
        self.ends[tp] = max(self.ends.get(tp, 0), message.offset() + 1)


def _produce(producer: Producer, record: Record, extra: Headers, tracker: _DeliveryTracker) -> None:
    kwargs: dict[str, Any] = {"key": record.key, "value": record.value, "on_delivery": tracker}
    if record.partition is not None:
        kwargs["partition"] = record.partition
    headers = record.headers + extra
    if headers:
        kwargs["headers"] = headers
    while True:
        try:
            producer.produce(record.topic, **kwargs)
            break
        except BufferError:
            # The local queue is full: serve delivery reports until there is room.
            producer.poll(0.05)
    producer.poll(0)


def _settle(producer: Producer) -> None:
    """After a failed task: drop what was never sent, and wait out what is in flight.

    A retry of the task scans the log for what this attempt wrote; nothing of this attempt
    may land after that scan, or the retry would not know to skip it.
    """
    producer.purge(in_queue=True, in_flight=False)
    producer.flush(FLUSH_TIMEOUT_S)


def _flush(producer: Producer, tracker: _DeliveryTracker, what: str) -> None:
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if remaining:
        raise SinkError(f"{what}: {remaining} records not acknowledged in {FLUSH_TIMEOUT_S} s")
    if tracker.errors:
        raise SinkError(f"{what}: {len(tracker.errors)} records failed: {tracker.errors[0]}")


# ---------------------------------------------------------------------------------------------
# Commit markers


@dataclass(frozen=True)
class Markers:
    # The newest batch whose commit finished, and the scan bounds recorded with it.
    committed: int | None = None
    ends: Offsets = field(default_factory=dict)
    # False when the query has left no marker at all yet (not even a begin marker).
    found: bool = False


def _control_consumer(options: SinkOptions) -> Consumer:
    return Consumer(reader_config(options.bootstrap, options.client_config))


def read_markers(options: SinkOptions, consumer: Consumer, topic: str, query_id: str) -> Markers:
    """The newest commit marker of this query; with none, the lowest begin marker bounds."""
    metadata = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or 0 not in info.partitions:
        return Markers()
    low, high = consumer.get_watermark_offsets(
        KafkaTopicPartition(topic, 0), timeout=METADATA_TIMEOUT_S, cached=False
    )
    begins: list[Offsets] = []
    position = high
    while position > low:
        window_start = max(low, position - MARKER_WINDOW)
        found = [
            m
            for chunk in iter_chunks(consumer, topic, 0, window_start, position, POLL_TIMEOUT_MS)
            for m in chunk
            if m.key() == query_id.encode()
        ]
        for message in reversed(found):
            marker = json.loads(message.value() or b"{}")
            ends = from_json_dict(marker.get("ends", {}), "commit marker")
            if marker.get("kind") == "commit":
                return Markers(committed=int(marker["batch"]), ends=ends, found=True)
            begins.append(ends)
        position = window_start
    if not begins:
        return Markers()
    lowest: Offsets = {}
    for ends in begins:
        for tp, offset in ends.items():
            lowest[tp] = min(lowest.get(tp, offset), offset)
    return Markers(ends=lowest, found=True)


def _ensure_topic(options: SinkOptions, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": options.bootstrap, "log_level": 4})
    future = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic]
    try:
        future.result(timeout=METADATA_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def append_marker(options: SinkOptions, topic: str, query_id: str, marker: dict[str, Any]) -> None:
    _ensure_topic(options, topic)
    producer = Producer(producer_config(options))
    tracker = _DeliveryTracker()
    producer.produce(
        topic,
        key=query_id.encode(),
        value=json.dumps(marker).encode(),
        partition=0,
        on_delivery=tracker,
    )
    _flush(producer, tracker, f'commit marker in "{topic}"')


# ---------------------------------------------------------------------------------------------
# Writers


@dataclass
class SinkCommit(WriterCommitMessage):
    query_id: str
    batch_id: int
    rows: int = 0
    skipped_rows: int = 0
    # True when the whole batch had been committed before: nothing was written.
    already_committed: bool = False
    # Per partition an offset below which no record of a later batch will be.
    ends: dict[str, dict[str, int]] = field(default_factory=dict)


class _TaskWrite:
    """One streaming write task: skip what an earlier attempt of it already wrote."""

    def __init__(self, options: SinkOptions, query_id: str, batch_id: int, task: int) -> None:
        self.options = options
        self.query_id = query_id
        self.batch_id = batch_id
        self.tag_prefix = f"{query_id}:{batch_id}:{task}:"
        self.consumer = _control_consumer(options)
        self.scanned: set[str] = set()
        self.written_before: Counter[str] = Counter()
        self.bounds: Offsets = {}

    def prepare(self) -> Markers:
        topic = commit_topic_for(self.options, self.query_id)
        markers = read_markers(self.options, self.consumer, topic, self.query_id)
        if not markers.found:
            # No marker yet: record where the target topic ends now, before writing anything,
            # so a replay of this first batch need not scan the topic from its beginning.
            ends: Offsets = {}
            if self.options.topic is not None:
                ends = self._high_watermarks(self.options.topic)
            append_marker(
                self.options,
                topic,
                self.query_id,
                {"kind": "begin", "batch": self.batch_id, "ends": to_json_dict(ends)},
            )
            markers = read_markers(self.options, self.consumer, topic, self.query_id)
        self.bounds = dict(markers.ends)
        return markers

    def _partitions(self, topic: str) -> list[int]:
        metadata = self.consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            return []
        return sorted(info.partitions)

    def _high_watermarks(self, topic: str) -> Offsets:
        out: Offsets = {}
        for partition in self._partitions(topic):
            _, high = self.consumer.get_watermark_offsets(
                KafkaTopicPartition(topic, partition), timeout=METADATA_TIMEOUT_S, cached=False
            )
            out[(topic, partition)] = int(high)
        return out

    def scan(self, topic: str) -> None:
        """Count what earlier attempts of this task wrote to ``topic`` (once per topic)."""
        if topic in self.scanned:
            return
        self.scanned.add(topic)
        tag = self.tag_prefix.encode()
        for tp, high in self._high_watermarks(topic).items():
            low, _ = self.consumer.get_watermark_offsets(
                KafkaTopicPartition(*tp), timeout=METADATA_TIMEOUT_S, cached=False
            )
            start = max(int(low), self.bounds.get(tp, 0))
            chunks = iter_chunks(self.consumer, tp[0], tp[1], start, high, POLL_TIMEOUT_MS)
            for message in (m for chunk in chunks for m in chunk):
                headers = message.headers() or []
                for name, data in headers.items() if isinstance(headers, dict) else headers:
                    if name == TAG_HEADER and isinstance(data, bytes) and data.startswith(tag):
                        self.written_before[data[len(tag) :].decode()] += 1
            # The next batch starts only after this one commits, so none of its records can
            # be below today's high watermark: that is its scan bound.
            self.bounds[tp] = max(self.bounds.get(tp, 0), high)

    def close(self) -> None:
        self.consumer.close()


class VdlStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: dict[str, str], schema: Any) -> None:
        self.options = SinkOptions.parse(options)
        self.columns = [f.name for f in schema.fields]
        # Fail at query start, not in the first task, on a schema the sink cannot write.
        RowConverter(self.columns, self.options.topic)

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            raise SinkError("write() must run in a Spark task")
        batch_id = int(context.getLocalProperty(BATCH_ID_PROPERTY) or -1)
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        if batch_id < 0 or not query_id:
            raise SinkError("the streaming batch id or query id is missing from the task")
        task = _TaskWrite(self.options, query_id, batch_id, context.partitionId())
        try:
            markers = task.prepare()
            if markers.committed is not None and batch_id <= markers.committed:
                for _ in iterator:
                    pass
                return SinkCommit(query_id, batch_id, already_committed=True)
            convert = RowConverter(self.columns, self.options.topic)
            producer = Producer(producer_config(self.options))
            tracker = _DeliveryTracker()
            rows = skipped = 0
            try:
                for row in iterator:
                    record = convert(row)
                    task.scan(record.topic)
                    digest = record.digest()
                    if task.written_before[digest] > 0:
                        task.written_before[digest] -= 1
                        skipped += 1
                        continue
                    tag = (task.tag_prefix + digest).encode()
                    _produce(producer, record, [(TAG_HEADER, tag)], tracker)
                    rows += 1
            except BaseException:
                _settle(producer)
                raise
            _flush(producer, tracker, f"batch {batch_id}")
            ends = dict(task.bounds)
            for tp, offset in tracker.ends.items():
                ends[tp] = max(ends.get(tp, 0), offset)
            return SinkCommit(query_id, batch_id, rows, skipped, ends=to_json_dict(ends))
        finally:
            task.close()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if isinstance(m, SinkCommit)]
        # No task (an empty batch) wrote nothing: the previous marker still bounds every scan.
        if not done or all(m.already_committed for m in done):
            return
        query_id = done[0].query_id
        topic = commit_topic_for(self.options, query_id)
        consumer = _control_consumer(self.options)
        try:
            markers = read_markers(self.options, consumer, topic, query_id)
        finally:
            consumer.close()
        if markers.committed is not None and batchId <= markers.committed:
            return
        ends: dict[TopicPartition, int] = dict(markers.ends)
        for message in done:
            for tp, offset in from_json_dict(message.ends, "task ends").items():
                ends[tp] = max(ends.get(tp, 0), offset)
        append_marker(
            self.options,
            topic,
            query_id,
            {"kind": "commit", "batch": batchId, "ends": to_json_dict(ends)},
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Nothing to undo: what the failed attempt wrote is recognised and skipped on replay.
        return None


@dataclass
class BatchWriteCommit(WriterCommitMessage):
    rows: int


class VdlBatchWriter(DataSourceWriter):
    """``df.write.format("vdl")``: idempotent producer, at least once if the job fails."""

    def __init__(self, options: dict[str, str], schema: Any) -> None:
        self.options = SinkOptions.parse(options)
        self.columns = [f.name for f in schema.fields]
        RowConverter(self.columns, self.options.topic)

    def write(self, iterator: Iterator[Any]) -> BatchWriteCommit:
        convert = RowConverter(self.columns, self.options.topic)
        producer = Producer(producer_config(self.options))
        tracker = _DeliveryTracker()
        rows = 0
        for row in iterator:
            _produce(producer, convert(row), [], tracker)
            rows += 1
        _flush(producer, tracker, "batch write")
        return BatchWriteCommit(rows)
