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
from vdl.txn.pending_offsets import pending_offsets

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


# OffsetFetch v7 carries `require_stable` (KIP-447); v8 asks for several groups at once
# (KIP-709), each answered with its own error code instead of the top-level one.
_FETCH_STABLE_FROM = 7
_FETCH_GROUPS_FROM = 8
_FetchGroup = OffsetFetchResponse.OffsetFetchResponseGroup
_FetchGroupTopic = _FetchGroup.OffsetFetchResponseTopics
_FetchGroupPartition = _FetchGroupTopic.OffsetFetchResponsePartitions
# (partition, committed offset, leader epoch, metadata, error) of one partition's answer.
_FetchedPartition = tuple[int, int, int, str, ErrorCode]


def _fetch_topics(
    by_topic: dict[str, list[_FetchedPartition]], topic_cls: Any, partition_cls: Any
) -> list[Any]:
    """The topics of an OffsetFetch answer (top level before v8, per group from v8)."""
    return [
        topic_cls(
            name=name,
            partitions=[
                partition_cls(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=epoch,
                    metadata=metadata,
                    error_code=int(partition_error),
                )
                for partition, offset, epoch, metadata, partition_error in parts
            ],
        )
        for name, parts in by_topic.items()
    ]


def _fetch_group(
    ctx: RequestContext, group_id: str, topics: Any, require_stable: bool
) -> tuple[ErrorCode, dict[str, list[_FetchedPartition]]]:
    """One group's answer: its error, and each topic's partitions in the order fetched."""
    groups = serving(ctx)
    wanted: list[TopicPartition] | None = None
    if topics is not None:
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
    by_topic: dict[str, list[_FetchedPartition]] = {}
    if groups is None or not ctx.may_group(Operation.DESCRIBE, group_id):
        error = unavailable(ctx) if groups is None else ErrorCode.GROUP_AUTHORIZATION_FAILED
        for topic, partition in wanted or []:
            by_topic.setdefault(topic, []).append(
                (partition, NO_OFFSET, NO_LEADER_EPOCH, "", error)
            )
        return error, by_topic
    # KIP-447: a partition an Ongoing transaction holds offsets for is not answered while
    # the client asks for stable offsets; UNSTABLE_OFFSET_COMMIT is retriable.
    unstable = pending_offsets(ctx.broker.meta).pending(group_id) if require_stable else set()
    for (topic, partition), committed in groups.fetch_offsets(group_id, wanted).items():
        if not ctx.may_topic(Operation.DESCRIBE, topic):
            row = (partition, NO_OFFSET, NO_LEADER_EPOCH, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        elif (topic, partition) in unstable:
            row = (partition, NO_OFFSET, NO_LEADER_EPOCH, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
        elif committed is None:
            # No commit is offset -1 with no error: the client applies its reset policy.
            row = (partition, NO_OFFSET, NO_LEADER_EPOCH, "", ErrorCode.NONE)
        else:
            row = (
                partition,
                committed.offset,
                committed.leader_epoch,
                committed.metadata,
                ErrorCode.NONE,
            )
        by_topic.setdefault(topic, []).append(row)
    return ErrorCode.NONE, by_topic


def handle_offset_fetch(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    require_stable = ctx.version >= _FETCH_STABLE_FROM and bool(request.require_stable)
    if ctx.version >= _FETCH_GROUPS_FROM:
        answered = []
        for group in request.groups:
            error, by_topic = _fetch_group(ctx, group.group_id, group.topics, require_stable)
            answered.append(
                _FetchGroup(
                    group_id=group.group_id,
                    # A group refused as a whole is answered without partitions, as Kafka.
                    topics=[]
                    if error != ErrorCode.NONE
                    else _fetch_topics(by_topic, _FetchGroupTopic, _FetchGroupPartition),
                    error_code=int(error),
                )
            )
        response = OffsetFetchResponse(throttle_time_ms=0, groups=answered, version=ctx.version)
        return ready(encode_response(ctx.header, response))
    top_error, by_topic = _fetch_group(ctx, request.group_id, request.topics, require_stable)
    response = OffsetFetchResponse(
        throttle_time_ms=0,
        topics=_fetch_topics(by_topic, _FetchTopic, _FetchPartition),
        error_code=int(top_error),
        version=ctx.version,
    )
    return ready(encode_response(ctx.header, response))
