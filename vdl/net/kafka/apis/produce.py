"""Produce: validate each partition's batch, append it in request order, answer once durable.

A batch refused for some of its records (a CreateTime timestamp outside the topic's
message.timestamp.before/after.max.ms) is answered, from Produce v8, with the index and
reason of each such record (KIP-467), so that the producer fails exactly those records.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import trio

from vdl.broker.broker import Broker
from vdl.broker.topics import Topic, TopicError
from vdl.log.compaction import check_record_keys, is_compacted
from vdl.log.error_codes import ErrorCode
from vdl.log.record_batch import InvalidBatch, check_record_timestamps, validate_produced_batch
from vdl.log.stream import Appended, LogStream, StreamError
from vdl.metrics.stages import STAGES
from vdl.net.kafka.apis.context import Pending, RequestContext, Response
from vdl.net.kafka.apis.txn_coordinator import may_transactional_id
from vdl.net.kafka.produce_codec import (
    PartitionProduceResult,
    decode_produce_request,
    encode_produce_response,
)
from vdl.net.kafka.request_metrics import api_metrics
from vdl.net.kafka.versions import ApiKey
from vdl.security.acl import Operation
from vdl.txn.produce_check import PendingBatch, check_batch

log = logging.getLogger(__name__)

ZSTD_MIN_PRODUCE_VERSION = 7
# Kafka's "no limit" for the timestamp settings (Long.MAX_VALUE).
_NO_LIMIT = 2**63 - 1

# Stages of a produce (see vdl/metrics/stages.py).
_DECODE = STAGES.histogram("kafka_produce_decode_seconds")
_APPEND = STAGES.histogram("kafka_produce_append_seconds")
_COMMIT_TO_RESPONSE = STAGES.histogram("kafka_produce_commit_to_response_seconds")
# Each partition's error in a response counts (kafka_request_errors, request_metrics.py).
_METRICS = api_metrics(ApiKey.PRODUCE)


@dataclass(slots=True)
class _Slot:
    """One partition's outcome: an error now, or an append whose commit is awaited."""

    topic: str
    partition: int
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    # (index in the batch, reason) of each record that made the batch refused (KIP-467).
    record_errors: list[tuple[int, str]] = field(default_factory=list)
    stream: LogStream | None = None
    appended: Appended | None = None
    # A transaction's first batch here, appended once verified (KIP-890, produce_check.py).
    pending: tuple[PendingBatch, memoryview] | None = None


def _timestamp_bounds(broker: Broker, topic: Topic) -> tuple[int, int] | None:
    """How far before and after the leader's clock a record's CreateTime may lie on this
    topic, or None when anything goes (LogAppendTime topics, or no limit set).

    As in Kafka since KIP-937, message.timestamp.before.max.ms and .after.max.ms left at
    their default take the value of the older message.timestamp.difference.max.ms.
    """
    if broker.topic_config(topic, "message.timestamp.type") != "CreateTime":
        return None
    difference = int(broker.topic_config(topic, "message.timestamp.difference.max.ms"))
    before = int(broker.topic_config(topic, "message.timestamp.before.max.ms"))
    after = int(broker.topic_config(topic, "message.timestamp.after.max.ms"))
    before = difference if before == _NO_LIMIT else before
    after = difference if after == _NO_LIMIT else after
    if before == _NO_LIMIT and after == _NO_LIMIT:
        return None
    return before, after


def _append_one(
    ctx: RequestContext,
    slot: _Slot,
    records: memoryview | None,
    version: int,
    transactional_id: str | None,
    bounds_by_topic: dict[str, tuple[int, int] | None],
) -> None:
    broker = ctx.broker
    try:
        topic = broker.catalog.get(slot.topic)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {slot.topic!r}")
        stream = broker.leader_stream(slot.topic, slot.partition)
        if records is None:
            raise InvalidBatch(ErrorCode.INVALID_RECORD, "records are null")
        info = validate_produced_batch(
            records,
            max_batch_bytes=int(broker.topic_config(topic, "max.message.bytes")),
            allow_zstd=version >= ZSTD_MIN_PRODUCE_VERSION,
        )
        if info.is_transactional and transactional_id is None:
            # As Kafka: transactional records come with the producer's transactional id.
            log.warning(
                "Produce to %s-%d refused: a transactional batch without a transactional id",
                slot.topic,
                slot.partition,
            )
            raise InvalidBatch(
                ErrorCode.INVALID_RECORD, "transactional batch without a transactional id"
            )
        if is_compacted(broker.topic_config(topic, "cleanup.policy")):
            check_record_keys(records)
        # The topic's limits, read from its config once per request.
        if slot.topic not in bounds_by_topic:
            bounds_by_topic[slot.topic] = _timestamp_bounds(broker, topic)
        bounds = bounds_by_topic[slot.topic]
        if bounds is not None:
            # Reads every record (decompressing if need be), so only the topics that set
            # a limit pay for it.
            check_record_timestamps(
                records, now_ms=stream.clock_ms(), before_max_ms=bounds[0], after_max_ms=bounds[1]
            )
        if info.is_transactional and transactional_id is not None:
            pending = check_batch(
                broker.transactions, stream, slot.topic, slot.partition, transactional_id, info
            )
            if pending is not None:
                slot.pending = (pending, records)
                return
        slot.appended = stream.append(records, info)
        slot.stream = stream
    except (TopicError, StreamError) as exc:
        slot.error, slot.message = exc.error, str(exc)
    except InvalidBatch as exc:
        slot.error, slot.message = ErrorCode(exc.error_code), exc.message
        slot.record_errors = exc.record_errors


def handle_produce(ctx: RequestContext) -> Pending:
    version = ctx.version
    started = time.perf_counter()
    request = decode_produce_request(ctx.body, version)
    decoded = time.perf_counter()
    _DECODE.observe(decoded - started)
    slots: list[_Slot] = []
    bounds_by_topic: dict[str, tuple[int, int] | None] = {}
    # Kafka: a transactional Produce needs Write on its transactional id.
    id_refused = request.transactional_id is not None and not may_transactional_id(
        ctx, Operation.WRITE, request.transactional_id, "Produce"
    )
    for topic in request.topics:
        for partition in topic.partitions:
            slot = _Slot(topic.name, partition.index)
            slots.append(slot)
            if id_refused:
                slot.error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            elif not ctx.may_topic(Operation.WRITE, topic.name):
                slot.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif request.acks not in (0, 1, -1):
                slot.error = ErrorCode.INVALID_REQUIRED_ACKS
            else:
                _append_one(
                    ctx, slot, partition.records, version, request.transactional_id, bounds_by_topic
                )
    _APPEND.since(decoded)
    acks, timeout_ms, correlation_id = request.acks, request.timeout_ms, ctx.header.correlation_id
    throttle_ms = 0
    if ctx.quotas is not None:
        # Kafka charges the request's size; the connection reads nothing more from this
        # client until the throttle has passed (KIP-219), whether or not it honours it.
        now = trio.current_time()
        throttle_ms = ctx.quotas.record_produce(ctx.header.client_id or "", len(ctx.frame), now)

    async def finish() -> Response:
        try:
            for slot in slots:
                if slot.pending is not None:
                    await _append_verified(slot, *slot.pending)
        finally:
            for slot in slots:  # cancelled: no batch queued behind these waits for ever
                if slot.pending is not None:
                    slot.pending[0].done()
        if acks == 0:
            return None
        # On one node both mean "durable here". Under replication acks=all waits for the
        # majority commit, acks=1 only for the leader's own flush (as Kafka's acks=1).
        committed = 0.0
        with trio.move_on_after(max(timeout_ms, 0) / 1000):
            for slot in slots:
                if slot.stream is not None and slot.appended is not None:
                    try:
                        if acks == 1:
                            await slot.stream.wait_durable(slot.appended.last_offset)
                        else:
                            woken = await slot.stream.wait_committed(slot.appended.last_offset)
                            committed = max(committed, woken)
                    except StreamError as exc:
                        slot.error, slot.message = exc.error, str(exc)
        response = _encode(version, correlation_id, slots, acks, throttle_ms)
        if committed:
            _COMMIT_TO_RESPONSE.since(committed)
        return response

    return finish


async def _append_verified(slot: _Slot, pending: PendingBatch, records: memoryview) -> None:
    """Append a transaction's first batch once the coordinator's record shows its
    partition added; INVALID_TXN_STATE (Kafka's answer since KIP-890) if it never does."""
    try:
        error = await pending.verified()
        if error == ErrorCode.NONE:
            slot.appended = pending.stream.append(records, pending.info)
            slot.stream = pending.stream
        else:
            slot.error = error
            slot.message = (
                "the producer is fenced"
                if error == ErrorCode.INVALID_PRODUCER_EPOCH
                else "the partition is not in the producer's transaction"
            )
    except StreamError as exc:
        slot.error, slot.message = exc.error, str(exc)
    finally:
        pending.done()


def _encode(
    version: int, correlation_id: int, slots: list[_Slot], acks: int, throttle_ms: int
) -> bytes:
    by_topic: dict[str, list[PartitionProduceResult]] = {}
    for slot in slots:
        error, base_offset, append_time, start = slot.error, -1, -1, -1
        if error == ErrorCode.NONE and slot.appended is not None and slot.stream is not None:
            stream = slot.stream
            done = stream.durable_end if acks == 1 else stream.high_watermark
            if slot.appended.last_offset >= done:
                error = ErrorCode.REQUEST_TIMED_OUT
            else:
                base_offset = slot.appended.base_offset
                append_time = slot.appended.timestamp_ms
                start = slot.stream.log_start_offset
        if error != ErrorCode.NONE:
            _METRICS.error(error)
        by_topic.setdefault(slot.topic, []).append(
            PartitionProduceResult(
                index=slot.partition,
                error_code=int(error),
                base_offset=base_offset,
                log_append_time_ms=append_time,
                log_start_offset=start,
                record_errors=list(slot.record_errors) if error != ErrorCode.NONE else [],
                error_message=slot.message if error != ErrorCode.NONE else None,
            )
        )
    return encode_produce_response(version, correlation_id, list(by_topic.items()), throttle_ms)
