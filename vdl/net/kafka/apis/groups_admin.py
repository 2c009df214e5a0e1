"""ListGroups, DescribeGroups, DeleteGroups and OffsetDelete, for admin tools.

DeleteGroups and OffsetDelete (KIP-496) go to the group's coordinator, found with
FindCoordinator as for every group request; another node answers NOT_COORDINATOR. On a
cluster the deletion is a metadata-group command, so every node forgets what it deletes.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.groups import (
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
)
from kafka.protocol.consumer.group import OffsetDeleteResponse

from vdl.groups.group import Group, GroupState
from vdl.groups.offsets import TopicPartition
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, Response, ready
from vdl.net.kafka.apis.groups import group_service, serving, unavailable
from vdl.net.kafka.apis.offsets_commit import partition_errors
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

_Described = DescribeGroupsResponse.DescribedGroup
_DescribedMember = _Described.DescribedGroupMember
# authorized_operations (v3+) is a bit set in kafka-python; None encodes Kafka's
# "not requested" value (only bit 31 set, i.e. INT32_MIN).
_NO_OPERATIONS = None
_UNAVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE


def handle_list_groups(ctx: RequestContext) -> Pending:
    decode_request(ctx.header, ctx.frame)
    groups = group_service(ctx)
    listed = [] if groups is None else groups.groups()
    response = ListGroupsResponse(
        throttle_time_ms=0,
        error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE if groups is None else 0),
        groups=[
            ListGroupsResponse.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "")
            for g in listed
            if g.state is not GroupState.DEAD and ctx.may_group(Operation.DESCRIBE, g.group_id)
        ],
        version=ctx.version,
    )
    return ready(encode_response(ctx.header, response))


def _describe(group: Group | None, group_id: str) -> Any:
    if group is None:
        # Kafka describes an unknown group as Dead, without an error.
        return _Described(
            error_code=0,
            group_id=group_id,
            group_state=GroupState.DEAD.value,
            protocol_type="",
            protocol_data="",
            members=[],
            authorized_operations=_NO_OPERATIONS,
        )
    stable = group.state is GroupState.STABLE
    protocol = group.protocol or ""
    return _Described(
        error_code=0,
        group_id=group.group_id,
        group_state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol_data=protocol,
        members=[
            # Metadata and assignments are only meaningful once the group is Stable.
            _DescribedMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata_for(protocol) if stable else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        ],
        authorized_operations=_NO_OPERATIONS,
    )


def handle_describe_groups(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    groups = group_service(ctx)
    described = []
    for group_id in request.groups:
        denied = not ctx.may_group(Operation.DESCRIBE, group_id)
        if groups is None or denied:
            error = ErrorCode.GROUP_AUTHORIZATION_FAILED if denied else _UNAVAILABLE
            described.append(
                _Described(
                    error_code=int(error),
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                    authorized_operations=_NO_OPERATIONS,
                )
            )
        else:
            described.append(_describe(groups.group(group_id), group_id))
    response = DescribeGroupsResponse(throttle_time_ms=0, groups=described, version=ctx.version)
    return ready(encode_response(ctx.header, response))


def handle_delete_groups(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    groups = serving(ctx)
    names: list[str] = list(request.groups_names)
    errors: dict[str, ErrorCode] = {}
    for name in names:
        if name in errors:
            continue  # a repeated name is answered as its first occurrence
        if not ctx.may_group(Operation.DELETE, name):
            errors[name] = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif groups is None:
            errors[name] = unavailable(ctx)

    async def delete() -> Response:
        for name in names:
            if name not in errors and groups is not None:
                errors[name] = await groups.delete_group(name)
        response = DeleteGroupsResponse(
            throttle_time_ms=0,
            results=[
                DeleteGroupsResponse.DeletableGroupResult(
                    group_id=name, error_code=int(errors[name])
                )
                for name in dict.fromkeys(names)
            ],
            version=ctx.version,
        )
        return encode_response(ctx.header, response)

    return delete


_DeleteTopic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_DeletePartition = _DeleteTopic.OffsetDeleteResponsePartition


def handle_offset_delete(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    groups = serving(ctx)
    group_id: str = request.group_id
    top_error = ErrorCode.NONE
    if not ctx.may_group(Operation.DELETE, group_id):
        top_error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif groups is None:
        top_error = unavailable(ctx)
    errors: dict[TopicPartition, ErrorCode] = {}
    wanted: list[TopicPartition] = []
    for topic in request.topics:
        readable = ctx.may_topic(Operation.READ, topic.name)
        known = ctx.broker.catalog.get(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if not readable:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif known is None or not 0 <= p.partition_index < known.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append(tp)

    def encode(error: ErrorCode) -> bytes:
        response = OffsetDeleteResponse(
            error_code=int(error),
            throttle_time_ms=0,
            topics=[]
            if error != ErrorCode.NONE
            else partition_errors(request.topics, errors, _DeleteTopic, _DeletePartition),
            version=ctx.version,
        )
        return encode_response(ctx.header, response)

    if top_error != ErrorCode.NONE or groups is None:
        return ready(encode(top_error if top_error != ErrorCode.NONE else _UNAVAILABLE))
    service = groups

    async def delete() -> Response:
        group_error, deleted = await service.delete_offsets(group_id, wanted)
        errors.update(deleted)
        return encode(group_error)

    return delete
