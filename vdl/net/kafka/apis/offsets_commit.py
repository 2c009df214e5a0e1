"""OffsetCommit and OffsetFetch: committed consumer offsets (reference §7.3)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer.group import OffsetCommitResponse, OffsetFetchResponse

from vdl.groups.offsets import NO_LEADER_EPOCH, NO_OFFSET, TopicPartition, check_metadata
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.apis.groups import group_service
from vdl.net.kafka.control_codec import decode_request, encode_response

_CommitTopic = OffsetCommitResponse.OffsetCommitResponseTopic
_CommitPartition = _CommitTopic.OffsetCommitResponsePartition
_FetchTopic = OffsetFetchResponse.OffsetFetchResponseTopic
_FetchPartition = _FetchTopic.OffsetFetchResponsePartition
# OffsetCommit v6 is the first to carry the leader epoch of the committed offset.
_COMMIT_EPOCH_FROM = 6


def _partition_known(ctx: RequestContext, topic: str, partition: int) -> bool:
    known = ctx.broker.catalog.get(topic)
    return known is not None and 0 <= partition < known.partitions


def handle_offset_commit(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    groups = group_service(ctx)
    if groups is None:
        group_error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        group_error = groups.check_commit(
            request.group_id, request.member_id, request.generation_id_or_member_epoch
        )
    errors: dict[TopicPartition, ErrorCode] = {}
    accepted: dict[TopicPartition, tuple[int, str, int]] = {}
    for topic in request.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if group_error != ErrorCode.NONE:
                errors[tp] = group_error
            elif not _partition_known(ctx, topic.name, p.partition_index):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif (error := check_metadata(p.committed_metadata)) != ErrorCode.NONE:
                errors[tp] = error
            else:
                epoch = (
                    p.committed_leader_epoch
                    if ctx.version >= _COMMIT_EPOCH_FROM
                    else NO_LEADER_EPOCH
                )
                accepted[tp] = (p.committed_offset, p.committed_metadata or "", epoch)
                errors[tp] = ErrorCode.NONE
    if accepted and groups is not None:
        # Written here, in the synchronous part: commits on one connection land in order.
        groups.commit_offsets(request.group_id, accepted)
    response = OffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            _CommitTopic(
                name=topic.name,
                partitions=[
                    _CommitPartition(
                        partition_index=p.partition_index,
                        error_code=int(errors[(topic.name, p.partition_index)]),
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ],
        version=ctx.version,
    )
    return ready(encode_response(ctx.header, response))


def handle_offset_fetch(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    groups = group_service(ctx)
    wanted: list[TopicPartition] | None = None
    if request.topics is not None:
        wanted = [(t.name, p) for t in request.topics for p in t.partition_indexes]
    by_topic: dict[str, list[Any]] = {}
    top_error = ErrorCode.NONE
    if groups is None:
        top_error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        for topic, partition in wanted or []:
            by_topic.setdefault(topic, []).append(
                _FetchPartition(
                    partition_index=partition,
                    committed_offset=NO_OFFSET,
                    committed_leader_epoch=NO_LEADER_EPOCH,
                    metadata="",
                    error_code=int(top_error),
                )
            )
    else:
        for (topic, partition), committed in groups.fetch_offsets(request.group_id, wanted).items():
            by_topic.setdefault(topic, []).append(
                _FetchPartition(
                    partition_index=partition,
                    # No commit is offset -1 with no error: the client applies its reset policy.
                    committed_offset=NO_OFFSET if committed is None else committed.offset,
                    committed_leader_epoch=(
                        NO_LEADER_EPOCH if committed is None else committed.leader_epoch
                    ),
                    metadata="" if committed is None else committed.metadata,
                    error_code=0,
                )
            )
    response = OffsetFetchResponse(
        throttle_time_ms=0,
        topics=[_FetchTopic(name=name, partitions=parts) for name, parts in by_topic.items()],
        error_code=int(top_error),
        version=ctx.version,
    )
    return ready(encode_response(ctx.header, response))
