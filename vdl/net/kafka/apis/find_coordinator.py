"""FindCoordinator: one node coordinates every group and every transactional id (on a
cluster, group 0's leader: `coordinator_role.py`, `vdl.txn.coordinator`).
"""

from __future__ import annotations

import logging

from kafka.protocol.metadata.find_coordinator import FindCoordinatorResponse

from vdl.broker.cluster_view import BrokerAddress
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

log = logging.getLogger(__name__)

_GROUP_KEY = 0
_TRANSACTION_KEY = 1
_KEYS = (_GROUP_KEY, _TRANSACTION_KEY)


def _unserved_key(ctx: RequestContext, key_type: int) -> tuple[ErrorCode, str]:
    """The error for a key type with no coordinator here, logged once per request."""
    log.info("FindCoordinator from %s: key type %d is not served", ctx.header.client_id, key_type)
    return ErrorCode.INVALID_REQUEST, f"key type {key_type} is not supported"


def _coordinator(ctx: RequestContext, key_type: int) -> BrokerAddress | None:
    """Who coordinates every group and transactional id: this node alone, or on a cluster
    the metadata group's leader (it applies committed offsets and transactions first);
    None while there is none."""
    if ctx.broker.groups is None:
        return None
    if key_type == _TRANSACTION_KEY and ctx.broker.transactions is None:
        return None
    cluster = ctx.broker.cluster
    if cluster is None:
        return BrokerAddress(ctx.node.node_id, ctx.node.host, ctx.node.port)
    leader = cluster.controller_id()
    return next((b for b in cluster.kafka_brokers() if b.node_id == leader), None)


def handle_find_coordinator(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    key_type = request.key_type if ctx.version >= 1 else _GROUP_KEY
    if key_type == _GROUP_KEY and not ctx.may_group(Operation.DESCRIBE, request.key):
        response = FindCoordinatorResponse(
            throttle_time_ms=0,
            error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
            error_message=f"may not use group {request.key!r}",
            node_id=-1,
            host="",
            port=-1,
            version=ctx.version,
        )
    elif key_type in _KEYS and (coordinator := _coordinator(ctx, key_type)) is not None:
        response = FindCoordinatorResponse(
            throttle_time_ms=0,
            error_code=0,
            error_message=None,
            node_id=coordinator.node_id,
            host=coordinator.host,
            port=coordinator.port,
            version=ctx.version,
        )
    else:
        if key_type in _KEYS:
            error, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "no coordinator now"
        else:
            error, message = _unserved_key(ctx, key_type)
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
