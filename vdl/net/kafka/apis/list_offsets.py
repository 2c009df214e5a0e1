"""ListOffsets: earliest (log start), latest (high watermark) or the first offset at a time."""

from __future__ import annotations

from kafka.protocol.consumer import ListOffsetsResponse

from vdl.broker.topics import TopicError
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3

_TopicResult = ListOffsetsResponse.ListOffsetsTopicResponse
_PartitionResult = _TopicResult.ListOffsetsPartitionResponse


def handle_list_offsets(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    topics = []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            error, offset, timestamp = 0, -1, -1
            try:
                if not ctx.may_topic(Operation.DESCRIBE, topic.name):
                    raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, topic.name)
                stream = ctx.broker.leader_stream(topic.name, part.partition_index)
            except TopicError as exc:
                error = int(exc.error)
            else:
                if part.timestamp == LATEST:
                    # Without transactions the last stable offset is the high watermark.
                    offset = stream.high_watermark
                elif part.timestamp == EARLIEST:
                    offset = stream.log_start_offset
                else:
                    found = stream.offset_for_timestamp(part.timestamp)
                    if found is not None:
                        offset, timestamp = found, part.timestamp
            partitions.append(
                _PartitionResult(
                    partition_index=part.partition_index,
                    error_code=error,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=-1,
                )
            )
        topics.append(_TopicResult(name=topic.name, partitions=partitions))
    response = ListOffsetsResponse(throttle_time_ms=0, topics=topics, version=ctx.version)
    return ready(encode_response(ctx.header, response))
