"""InitProducerId: a fresh producer id (epoch 0) for every idempotent producer.

As in Kafka (KIP-679), a producer id goes only to a principal allowed IdempotentWrite on
the cluster or Write on at least one topic; anyone else gets CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging

from kafka.protocol.producer import InitProducerIdResponse

from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.apis.find_coordinator import TRANSACTIONS_UNSUPPORTED
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

log = logging.getLogger(__name__)


def handle_init_producer_id(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    if request.transactional_id is not None:
        # Transactions are not served: the answer FindCoordinator gives a transactional id,
        # fatal to the clients (find_coordinator.py). v0-1 carry no error message.
        log.info(
            "InitProducerId from %s with transactional id %r: %s",
            ctx.header.client_id,
            request.transactional_id,
            TRANSACTIONS_UNSUPPORTED,
        )
        response = InitProducerIdResponse(
            throttle_time_ms=0,
            error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            producer_id=-1,
            producer_epoch=-1,
            version=ctx.version,
        )
    elif not (
        ctx.may_cluster(Operation.IDEMPOTENT_WRITE)
        or ctx.authorizer.may_write_some_topic(ctx.principal)
    ):
        response = InitProducerIdResponse(
            throttle_time_ms=0,
            error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            producer_id=-1,
            producer_epoch=-1,
            version=ctx.version,
        )
    else:
        response = InitProducerIdResponse(
            throttle_time_ms=0,
            error_code=0,
            producer_id=ctx.broker.allocate_producer_id(),
            producer_epoch=0,
            version=ctx.version,
        )
    return ready(encode_response(ctx.header, response))
