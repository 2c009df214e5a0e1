"""DeleteRecords (API key 21, KIP-107): move partitions' log start offsets forward.

What `kafka-delete-records`, `rpk topic trim-prefix` and the admin clients'
`delete_records` send. For each partition the log starts at the requested offset from then
on (-1: at the high watermark), on every replica, and the answer's low_watermark is the new
log start; reads below it get OFFSET_OUT_OF_RANGE and ListOffsets EARLIEST returns it.
Whole segments below it are deleted by each replica's next retention pass.

As Kafka answers (the protocol guide's DeleteRecords, `ReplicaManager.deleteRecords`):
DELETE on the topic or TOPIC_AUTHORIZATION_FAILED; UNKNOWN_TOPIC_OR_PARTITION;
NOT_LEADER_OR_FOLLOWER from a node that does not lead the partition (clients send each
partition to its leader, from Metadata); OFFSET_OUT_OF_RANGE for an offset above the high
watermark (or below -1); REQUEST_TIMED_OUT when the new start was not replicated within
the request's timeout_ms. An offset at or below the current start changes nothing and is
answered with the current start. On a cluster the new start is a metadata-group command
(`vdl/cluster/log_start_commands.py` says why); the persistence and the stream's side are
`Broker.delete_records` and `LogStream.advance_log_start`.
"""

from __future__ import annotations

import logging

import trio
from kafka.protocol.admin import DeleteRecordsResponse

from vdl.broker.cluster_view import COMMAND_TIMEOUT_S
from vdl.broker.topics import TopicError
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, Response
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

log = logging.getLogger(__name__)

_TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
_PartitionResult = _TopicResult.DeleteRecordsPartitionResult
# Kafka's answer carries -1 as the low watermark of a partition it refused.
_NO_LOW_WATERMARK = -1


def handle_delete_records(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    header = ctx.header
    timeout_ms = int(request.timeout_ms)
    wanted = [
        (str(topic.name), [(int(p.partition_index), int(p.offset)) for p in topic.partitions])
        for topic in request.topics or []
    ]

    async def finish() -> Response:
        wait_s = timeout_ms / 1000 if timeout_ms > 0 else COMMAND_TIMEOUT_S
        deadline = trio.current_time() + wait_s
        topics = []
        for name, partitions in wanted:
            allowed = ctx.may_topic(Operation.DELETE, name)
            results = []
            for partition, offset in partitions:
                error, low = 0, _NO_LOW_WATERMARK
                try:
                    if not allowed:
                        raise TopicError(
                            ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"may not delete from {name!r}"
                        )
                    left = deadline - trio.current_time()
                    if left <= 0:
                        raise TopicError(ErrorCode.REQUEST_TIMED_OUT, "the timeout passed")
                    low = await ctx.broker.delete_records(name, partition, offset, left)
                except TopicError as exc:
                    error = int(exc.error)
                    log.info("DeleteRecords %s-%d to %d refused: %s", name, partition, offset, exc)
                results.append(
                    _PartitionResult(partition_index=partition, low_watermark=low, error_code=error)
                )
            topics.append(_TopicResult(name=name, partitions=results))
        response = DeleteRecordsResponse(
            throttle_time_ms=0, topics=topics, version=header.api_version
        )
        return encode_response(header, response)

    return finish
