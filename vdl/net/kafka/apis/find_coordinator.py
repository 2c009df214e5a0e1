"""FindCoordinator: this node coordinates every group while it is the whole cluster."""

from __future__ import annotations

from kafka.protocol.metadata.find_coordinator import FindCoordinatorResponse

from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.control_codec import decode_request, encode_response

_GROUP_KEY = 0  # key_type 1 is a transactional id; transactions are not served


def handle_find_coordinator(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    key_type = request.key_type if ctx.version >= 1 else _GROUP_KEY
    if key_type == _GROUP_KEY and ctx.broker.groups is not None:
        response = FindCoordinatorResponse(
            throttle_time_ms=0,
            error_code=0,
            error_message=None,
            node_id=ctx.node.node_id,
            host=ctx.node.host,
            port=ctx.node.port,
            version=ctx.version,
        )
    else:
        if key_type == _GROUP_KEY:
            error, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "groups are not served yet"
        else:
            # Not retriable, so a transactional producer fails fast instead of looping.
            error, message = ErrorCode.INVALID_REQUEST, f"key type {key_type} is not supported"
        response = FindCoordinatorResponse(
            throttle_time_ms=0,
            error_code=int(error),
            error_message=message,
            node_id=-1,
            host="",
            port=-1,
            version=ctx.version,
        )
    return ready(encode_response(ctx.header, response))
