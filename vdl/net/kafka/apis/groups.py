"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup on top of `vdl.groups`.

JoinGroup and a follower's SyncGroup are decided in request order (the synchronous part)
and then held in the Pending coroutine until the coordinator answers them. Clients talk to
the coordinator (found by FindCoordinator) on a connection of its own, so holding blocks
nothing else.
"""

from __future__ import annotations

from kafka.protocol.consumer.group import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
)

from vdl.groups.coordinator import JoinRequest, JoinResult, SyncResult
from vdl.groups.service import GroupService, Waiter
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, Response, ready
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

# JoinGroup v4 is the first version whose clients handle MEMBER_ID_REQUIRED (KIP-394).
_KNOWN_MEMBER_ID_FROM = 4
_LEAVE_MEMBERS_FROM = 3
# First versions carrying group_instance_id (static membership, KIP-345).
_JOIN_INSTANCE_FROM = 5
_SYNC_INSTANCE_FROM = 3
_HEARTBEAT_INSTANCE_FROM = 3
_UNAVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED


def group_service(ctx: RequestContext) -> GroupService | None:
    """The node's group coordinator; None answers COORDINATOR_NOT_AVAILABLE (retriable)."""
    return ctx.broker.groups


def serving(ctx: RequestContext) -> GroupService | None:
    """The group coordinator if this node coordinates groups now (on a cluster, the
    metadata group's leader does); None: answer `unavailable(ctx)`."""
    groups = ctx.broker.groups
    if groups is None or groups.coordinator_error() != ErrorCode.NONE:
        return None
    return groups


def instance_id(request: object, version: int, first: int) -> str | None:
    """The request's group_instance_id if its version has one (None or "": dynamic)."""
    if version < first:
        return None
    return getattr(request, "group_instance_id", None) or None


def unavailable(ctx: RequestContext) -> ErrorCode:
    """Why `serving` gave None: NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS send the
    client to FindCoordinator again (or make it retry), as Kafka's non-coordinators do."""
    groups = ctx.broker.groups
    error = ErrorCode.NONE if groups is None else groups.coordinator_error()
    return _UNAVAILABLE if error == ErrorCode.NONE else error


def handle_join_group(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    header = ctx.header

    def encode(result: JoinResult) -> bytes:
        member = JoinGroupResponse.JoinGroupResponseMember
        response = JoinGroupResponse(
            throttle_time_ms=0,
            error_code=int(result.error),
            generation_id=result.generation,
            # Not nullable before v7.
            protocol_name=result.protocol or "",
            leader=result.leader,
            member_id=result.member_id,
            members=[
                member(member_id=member_id, group_instance_id=instance, metadata=metadata)
                for member_id, instance, metadata in result.members
            ],
            version=header.api_version,
        )
        return encode_response(header, response)

    groups = serving(ctx)
    if not ctx.may_group(Operation.READ, request.group_id):
        return ready(encode(JoinResult(_DENIED, member_id=request.member_id)))
    if groups is None:
        return ready(encode(JoinResult(unavailable(ctx), member_id=request.member_id)))
    # v0 has no rebalance timeout; Kafka uses the session timeout for both.
    rebalance_timeout = (
        request.session_timeout_ms if ctx.version == 0 else (request.rebalance_timeout_ms)
    )
    outcome = groups.join(
        JoinRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            client_id=header.client_id or "",
            # The connection's address is not part of the request context.
            client_host="",
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout,
            protocol_type=request.protocol_type,
            protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
            require_known_member_id=ctx.version >= _KNOWN_MEMBER_ID_FROM,
            group_instance_id=instance_id(request, ctx.version, _JOIN_INSTANCE_FROM),
        )
    )
    if isinstance(outcome, JoinResult):
        return ready(encode(outcome))
    waiter: Waiter = outcome

    async def held() -> Response:
        result = await waiter.wait()
        if not isinstance(result, JoinResult):
            # Only if the core missed its own deadline; the client simply rejoins.
            result = JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=request.member_id)
        return encode(result)

    return held


def handle_sync_group(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    header = ctx.header

    def encode(result: SyncResult) -> bytes:
        response = SyncGroupResponse(
            throttle_time_ms=0,
            error_code=int(result.error),
            assignment=result.assignment,
            version=header.api_version,
        )
        return encode_response(header, response)

    groups = serving(ctx)
    if not ctx.may_group(Operation.READ, request.group_id):
        return ready(encode(SyncResult(_DENIED)))
    if groups is None:
        return ready(encode(SyncResult(unavailable(ctx))))
    outcome = groups.sync(
        request.group_id,
        request.member_id,
        request.generation_id,
        {a.member_id: bytes(a.assignment) for a in request.assignments},
        group_instance_id=instance_id(request, ctx.version, _SYNC_INSTANCE_FROM),
    )
    if isinstance(outcome, SyncResult):
        return ready(encode(outcome))
    waiter: Waiter = outcome

    async def held() -> Response:
        result = await waiter.wait()
        if not isinstance(result, SyncResult):
            result = SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        return encode(result)

    return held


def handle_heartbeat(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    groups = serving(ctx)
    if not ctx.may_group(Operation.READ, request.group_id):
        error = _DENIED
    elif groups is None:
        error = unavailable(ctx)
    else:
        error = groups.heartbeat(
            request.group_id,
            request.member_id,
            request.generation_id,
            instance_id(request, ctx.version, _HEARTBEAT_INSTANCE_FROM),
        )
    response = HeartbeatResponse(throttle_time_ms=0, error_code=int(error), version=ctx.version)
    return ready(encode_response(ctx.header, response))


def handle_leave_group(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    batched = ctx.version >= _LEAVE_MEMBERS_FROM
    member_ids = [m.member_id for m in request.members] if batched else [request.member_id]
    instance_ids = (
        [m.group_instance_id or None for m in request.members]
        if batched
        else [None] * len(member_ids)
    )
    groups = serving(ctx)
    denied = not ctx.may_group(Operation.READ, request.group_id)
    if groups is None or denied:
        error = _DENIED if denied else unavailable(ctx)
        response = LeaveGroupResponse(
            throttle_time_ms=0, error_code=int(error), members=[], version=ctx.version
        )
        return ready(encode_response(ctx.header, response))
    errors = groups.leave(request.group_id, member_ids, instance_ids)
    if batched:
        response = LeaveGroupResponse(
            throttle_time_ms=0,
            error_code=0,
            members=[
                LeaveGroupResponse.MemberResponse(
                    member_id=member_id, group_instance_id=instance, error_code=int(error)
                )
                for member_id, instance, error in zip(member_ids, instance_ids, errors, strict=True)
            ],
            version=ctx.version,
        )
    else:
        response = LeaveGroupResponse(
            throttle_time_ms=0, error_code=int(errors[0]), version=ctx.version
        )
    return ready(encode_response(ctx.header, response))
