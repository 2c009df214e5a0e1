"""ListOffsets: earliest (log start), latest (high watermark) or the first offset at a time.

With isolation_level 1 (read_committed, KIP-98, v2+) latest is the last stable offset.

By timestamp, as Kafka answers it: the offset and timestamp of the first record (not
batch) whose timestamp is at or after the one asked for, or -1/-1 if there is none. The
stream finds the batch holding it through its timestamp index (a bounded read); the
batch's records are decoded in a worker thread, off the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio
from kafka.protocol.consumer import ListOffsetsResponse

from vdl.backends.api import Buffer
from vdl.broker.topics import TopicError
from vdl.log.batch_header import read_header
from vdl.log.error_codes import ErrorCode
from vdl.log.timestamp_index import NO_TIMESTAMP, first_record_at
from vdl.net.kafka.apis.context import Pending, RequestContext, Response
from vdl.net.kafka.apis.leader_epoch import check_leader_epoch, epoch_at
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

LATEST = -1
EARLIEST = -2
# Not reachable: it needs ListOffsets v7 and we advertise up to v5 (versions.py).
MAX_TIMESTAMP = -3

_TopicResult = ListOffsetsResponse.ListOffsetsTopicResponse
_PartitionResult = _TopicResult.ListOffsetsPartitionResponse


@dataclass(slots=True)
class _Answer:
    error: int = 0
    offset: int = -1
    timestamp: int = NO_TIMESTAMP
    # A timestamp search: the batch holding the record, still to be decoded.
    batch: Buffer | None = None
    target: int = 0
    # v4+ (KIP-320): the epoch of the batch holding the offset, -1 for none.
    leader_epoch: int = -1


def _decode(answers: list[_Answer]) -> None:
    for answer in answers:
        assert answer.batch is not None
        answer.offset, answer.timestamp = first_record_at(answer.batch, answer.target)
        answer.batch = None
        if answer.offset < 0:
            answer.leader_epoch = -1


def handle_list_offsets(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    committed = int(getattr(request, "isolation_level", 0)) == 1
    # Everything that touches streams happens now, in the request's turn; only the decoding
    # of the batches found is left for later.
    answers = [
        (
            topic.name,
            [
                (part.partition_index, _lookup(ctx, topic.name, part, committed))
                for part in topic.partitions
            ],
        )
        for topic in request.topics
    ]
    searches = [a for _, partitions in answers for _, a in partitions if a.batch is not None]

    async def finish() -> Response:
        if searches:
            await trio.to_thread.run_sync(_decode, searches)
        topics = [
            _TopicResult(
                name=name,
                partitions=[
                    _PartitionResult(
                        partition_index=index,
                        error_code=answer.error,
                        timestamp=answer.timestamp,
                        offset=answer.offset,
                        leader_epoch=answer.leader_epoch,
                    )
                    for index, answer in partitions
                ],
            )
            for name, partitions in answers
        ]
        response = ListOffsetsResponse(throttle_time_ms=0, topics=topics, version=ctx.version)
        return encode_response(ctx.header, response)

    return finish


def _lookup(ctx: RequestContext, topic: str, part: Any, committed: bool) -> _Answer:
    try:
        if not ctx.may_topic(Operation.DESCRIBE, topic):
            raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, topic)
        stream = ctx.broker.leader_stream(topic, part.partition_index)
        # v4+ (KIP-320): a client with stale metadata is fenced (-1 skips).
        check_leader_epoch(stream, int(part.current_leader_epoch))
    except TopicError as exc:
        return _Answer(error=int(exc.error))
    if part.timestamp == LATEST:
        latest = stream.last_stable_offset if committed else stream.high_watermark
        return _Answer(offset=latest, leader_epoch=stream.leader_epoch)
    if part.timestamp == EARLIEST:
        start = stream.log_start_offset
        return _Answer(offset=start, leader_epoch=epoch_at(stream, start))
    batch = stream.batch_for_timestamp(part.timestamp)
    epoch = -1 if batch is None else read_header(batch).partition_leader_epoch
    return _Answer(batch=batch, target=part.timestamp, leader_epoch=epoch)
