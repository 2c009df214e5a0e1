"""Fetch: committed batches by offset, long-polled until min_bytes or max_wait.

Every requested partition is answered (kafka-python drops a sessionless response whose
partition set differs from the request), and session id 0 keeps clients sessionless.

A client over its consume quota gets, as from Kafka (KafkaApis.handleFetchRequest), a
response without records that carries throttle_time_ms (see quotas.py).

Limits (KIP-74, Fetch v3 and later): partitions are filled in request order, each with at
most its partition_max_bytes and all of them together with at most the request's max_bytes,
both clamped to the node's ``--fetch-max-bytes`` (Kafka's broker-side fetch.max.bytes). The
one exception is the first batch of the first partition that has records: it goes out whole
whatever its size, so a consumer always makes progress. Later partitions whose next batch
does not fit are answered without records (their high watermark, no error), as Kafka does.

The reads run on the event loop, in steps of at most ``READ_STEP`` bytes with a checkpoint
between them: one step is a pread from the page cache and a CRC-32C over it (about 2-3 ms
for 1 MiB), so other connections and the Raft heartbeats on the same loop wait at most that
long for a fetch, however large.

Transactions (KIP-98, Fetch v4+): every partition's answer carries its last stable offset
(LSO). A read_committed fetch (isolation_level 1) returns only batches below the LSO, with
the aborted transactions that may have records in the range returned, (producer id, first
offset) each, so that the consumer drops their records; control batches go out as they
are (clients skip them). A read_uncommitted fetch reads up to the high watermark, as before.
"""

from __future__ import annotations

from dataclasses import replace

import trio

from vdl.backends.api import Buffer
from vdl.broker.topics import TopicError
from vdl.log.error_codes import ErrorCode
from vdl.log.record_batch import parse_batch_header
from vdl.log.stream import LogStream
from vdl.net.kafka.apis.context import Pending, RequestContext, Response
from vdl.net.kafka.apis.leader_epoch import check_leader_epoch
from vdl.net.kafka.fetch_codec import (
    FetchPartitionResult,
    FetchRequest,
    decode_fetch_request,
    encode_fetch_response,
)
from vdl.net.kafka.request_metrics import api_metrics
from vdl.net.kafka.versions import ApiKey
from vdl.security.acl import Operation

_Topics = list[tuple[str, list[FetchPartitionResult]]]
READ_STEP = 1024 * 1024
READ_COMMITTED = 1
# Each partition's error in a response counts (kafka_request_errors, request_metrics.py).
_METRICS = api_metrics(ApiKey.FETCH)


def without_records(topics: _Topics) -> _Topics:
    """The throttled form of a response: every partition as it was (its high watermark,
    log start offset, or its error), but no records; the client fetches them again once
    its throttle has passed."""
    return [(name, [replace(result, records=[]) for result in results]) for name, results in topics]


async def _read(
    stream: LogStream, offset: int, budget: int, first_whole: bool, committed: bool
) -> list[Buffer]:
    """Committed batches from ``offset``, up to ``budget`` bytes, read in steps of READ_STEP
    with a checkpoint between steps. With ``first_whole`` the first batch is returned
    whatever its size (KIP-74's exception); without it, a first batch larger than the budget
    means no records. With ``committed`` (read_committed), only batches below the LSO."""
    records: list[Buffer] = []
    size = 0
    read = stream.read_stable if committed else stream.read
    while True:
        step = read(offset, max(min(budget - size, READ_STEP), 0))
        # The store returns a step's first batch whatever its size: only the very first
        # batch of a first_whole read may exceed the budget; any other waits for a later
        # fetch.
        if not step or ((records or not first_whole) and size + len(step[0]) > budget):
            return records
        records.extend(step)
        size += sum(len(r) for r in step)
        if size >= budget:
            return records
        offset = parse_batch_header(step[-1]).next_offset
        await trio.lowlevel.checkpoint()


def _aborted(stream: LogStream, offset: int, records: list[Buffer]) -> list[tuple[int, int]]:
    """The aborted transactions with records in what a read_committed fetch returns."""
    if not records:
        return []
    end = parse_batch_header(records[-1]).next_offset
    return [(a.producer_id, a.first_offset) for a in stream.txns.aborted(offset, end)]


async def _collect(
    ctx: RequestContext, request: FetchRequest
) -> tuple[_Topics, int, bool, list[LogStream]]:
    """One pass over the requested partitions: (results, bytes, any error, streams read)."""
    limit = ctx.fetch_max_bytes
    remaining = min(request.max_bytes, limit)
    total = 0
    errors = False
    streams: list[LogStream] = []
    topics: _Topics = []
    committed = request.isolation_level == READ_COMMITTED
    for topic in request.topics:
        results: list[FetchPartitionResult] = []
        readable = ctx.may_topic(Operation.READ, topic.name)
        for part in topic.partitions:
            if not readable:
                errors = True
                denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                results.append(FetchPartitionResult(part.partition, denied, -1, -1, -1))
                continue
            try:
                stream = ctx.broker.leader_stream(topic.name, part.partition)
                # v9+ (KIP-320): a client with stale metadata is fenced (-1 skips).
                check_leader_epoch(stream, part.current_leader_epoch)
            except TopicError as exc:
                errors = True
                results.append(FetchPartitionResult(part.partition, int(exc.error), -1, -1, -1))
                continue
            streams.append(stream)
            start = stream.log_start_offset
            offset = part.fetch_offset
            if offset < start or offset > stream.log_end_offset:
                hw = stream.high_watermark
                errors = True
                results.append(
                    FetchPartitionResult(
                        part.partition, int(ErrorCode.OFFSET_OUT_OF_RANGE), hw, hw, start
                    )
                )
                continue
            records: list[Buffer] = []
            # KIP-74: until some partition has returned records, the first batch goes out
            # whatever its size, so a consumer always makes progress; after that, both
            # limits hold (Kafka's ReplicaManager.readFromLocalLog, minOneMessage).
            if remaining > 0 or total == 0:
                budget = min(part.partition_max_bytes, limit, max(remaining, 0))
                records = await _read(stream, offset, budget, total == 0, committed)
                size = sum(len(r) for r in records)
                total += size
                remaining -= size
            # After the read: every batch read was committed by then, so below this mark.
            hw = stream.high_watermark
            lso = stream.last_stable_offset
            aborted = _aborted(stream, offset, records) if committed else None
            results.append(
                FetchPartitionResult(
                    part.partition, 0, hw, lso, start, aborted_transactions=aborted, records=records
                )
            )
        topics.append((topic.name, results))
    return topics, total, errors, streams


def handle_fetch(ctx: RequestContext) -> Pending:
    request = decode_fetch_request(ctx.body, ctx.version)
    version, correlation_id = ctx.version, ctx.header.correlation_id

    async def finish() -> Response:
        deadline = trio.current_time() + max(request.max_wait_ms, 0) / 1000
        while True:
            topics, total, errors, streams = await _collect(ctx, request)
            now = trio.current_time()
            if (
                errors
                or total >= request.min_bytes
                or now >= deadline
                or not streams
                or ctx.broker.draining
            ):
                break
            await ctx.broker.wait_for_data(streams, deadline - now)
        throttle_ms = 0
        if ctx.quotas is not None:
            # Decided after the read, as Kafka does: the bytes are known only now. A
            # refused response costs the client nothing against its quota, and the
            # connection holds its next request back until the throttle has passed.
            throttle_ms = ctx.quotas.admit_fetch(ctx.header.client_id or "", total, now)
            if throttle_ms > 0:
                topics = without_records(topics)
        if errors:
            for _, results in topics:
                for result in results:
                    if result.error_code:
                        _METRICS.error(result.error_code)
        return encode_fetch_response(version, correlation_id, throttle_ms, 0, 0, topics)

    return finish
