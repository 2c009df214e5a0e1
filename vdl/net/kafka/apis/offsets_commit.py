"""OffsetCommit and OffsetFetch: committed consumer offsets."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer.group import OffsetCommitResponse, OffsetFetchResponse

from vdl.groups.offsets import NO_LEADER_EPOCH, NO_OFFSET, TopicPartition, check_metadata
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, Response, ready
from vdl.net.kafka.apis.groups import instance_id, serving, unavailable
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

_CommitTopic = OffsetCommitResponse.OffsetCommitResponseTopic
_CommitPartition = _CommitTopic.OffsetCommitResponsePartition
_FetchTopic = OffsetFetchResponse.OffsetFetchResponseTopic
_FetchPartition = _FetchTopic.OffsetFetchResponsePartition
# OffsetCommit v6 is the first to carry the leader epoch of the committed offset.
_COMMIT_EPOCH_FROM = 6
# OffsetCommit v7 is the first to carry the committing member's group instance id.
_COMMIT_INSTANCE_FROM = 7


def _partition_known(ctx: RequestContext, topic: str, partition: int) -> bool:
    known = ctx.broker.catalog.get(topic)
    return known is not None and 0 <= partition < known.partitions


def handle_offset_commit(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    groups = serving(ctx)
    if not ctx.may_group(Operation.READ, request.group_id):
        group_error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif groups is None:
        group_error = unavailable(ctx)
    else:
        group_error = groups.check_commit(
            request.group_id,
            request.member_id,
            request.generation_id_or_member_epoch,
            instance_id(request, ctx.version, _COMMIT_INSTANCE_FROM),
        )
    errors: dict[TopicPartition, ErrorCode] = {}
    accepted: dict[TopicPartition, tuple[int, str, int]] = {}
    for topic in request.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if group_error != ErrorCode.NONE:
                errors[tp] = group_error
            elif not ctx.may_topic(Operation.READ, topic.name):
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
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
    replicated = None
    if accepted and groups is not None:
        # Written (or queued, on a cluster) here, in the synchronous part: commits on one
        # connection land in order.
        replicated = groups.commit_offsets(request.group_id, accepted)
    if replicated is not None:
        ack = replicated

        async def after_commit() -> Response:
            error = await ack()
            if error != ErrorCode.NONE:
                for tp in accepted:
                    errors[tp] = error
            return _commit_response(ctx, request, errors)

        return after_commit
    return ready(_commit_response(ctx, request, errors))


def partition_errors(
    topics: Any, errors: dict[TopicPartition, ErrorCode], topic_cls: Any, partition_cls: Any
) -> list[Any]:
    """Each requested topic and partition, in request order, with its error in `errors`:
    the topics of an OffsetCommit or OffsetDelete response (both have this shape)."""
    return [
        topic_cls(
            name=topic.name,
            partitions=[
                partition_cls(
                    partition_index=p.partition_index,
                    error_code=int(errors[(topic.name, p.partition_index)]),
                )
                for p in topic.partitions
            ],
        )
        for topic in topics
    ]


def _commit_response(
    ctx: RequestContext, request: Any, errors: dict[TopicPartition, ErrorCode]
) -> bytes:
    response = OffsetCommitResponse(
        throttle_time_ms=0,
        topics=partition_errors(request.topics, errors, _CommitTopic, _CommitPartition),
        version=ctx.version,
    )
    return encode_response(ctx.header, response)


def handle_offset_fetch(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    groups = serving(ctx)
    wanted: list[TopicPartition] | None = None
    if request.topics is not None:
        wanted = [(t.name, p) for t in request.topics for p in t.partition_indexes]
    by_topic: dict[str, list[Any]] = {}
    top_error = ErrorCode.NONE
    if groups is None or not ctx.may_group(Operation.DESCRIBE, request.group_id):
        top_error = unavailable(ctx) if groups is None else ErrorCode.GROUP_AUTHORIZATION_FAILED
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
            if not ctx.may_topic(Operation.DESCRIBE, topic):
                by_topic.setdefault(topic, []).append(
                    _FetchPartition(
                        partition_index=partition,
                        committed_offset=NO_OFFSET,
                        committed_leader_epoch=NO_LEADER_EPOCH,
                        metadata="",
                        error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                    )
                )
                continue
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
