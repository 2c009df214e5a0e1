"""InitProducerId: a fresh producer id (epoch 0) for every idempotent producer, and for a
transactional id the transaction coordinator's answer (`vdl.txn.coordinator`).

As in Kafka (KIP-679), a producer id goes only to a principal allowed IdempotentWrite on
the cluster or Write on at least one topic; anyone else gets CLUSTER_AUTHORIZATION_FAILED.
With a transactional id, Write on that id is needed instead
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then: INVALID_TRANSACTION_TIMEOUT for a timeout
above the node's `--transaction-max-timeout-ms` (Kafka's transaction.max.timeout.ms), else
the id's producer id with its epoch bumped (fencing older producers of the id); v3+ carry
the producer's current id and epoch (KIP-360), v4+ may be answered PRODUCER_FENCED
(KIP-588, older versions get INVALID_PRODUCER_EPOCH).
"""

from __future__ import annotations

import logging

from kafka.protocol.producer import InitProducerIdResponse

from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, Response, ready
from vdl.net.kafka.apis.txn_coordinator import for_version, may_transactional_id
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation
from vdl.txn.coordinator import InitResult

log = logging.getLogger(__name__)

# InitProducerId v3 is the first to carry the producer's current id and epoch (KIP-360).
_PRODUCER_ID_FROM = 3


def _encode(ctx: RequestContext, error: ErrorCode, producer_id: int, epoch: int) -> bytes:
    response = InitProducerIdResponse(
        throttle_time_ms=0,
        error_code=int(error),
        producer_id=producer_id,
        producer_epoch=epoch,
        version=ctx.version,
    )
    return encode_response(ctx.header, response)


def handle_init_producer_id(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    transactional_id = request.transactional_id
    if transactional_id is None:
        if not (
            ctx.may_cluster(Operation.IDEMPOTENT_WRITE)
            or ctx.authorizer.may_write_some_topic(ctx.principal)
        ):
            return ready(_encode(ctx, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, -1, -1))
        return ready(_encode(ctx, ErrorCode.NONE, ctx.broker.allocate_producer_id(), 0))
    if not transactional_id:
        # Kafka refuses an empty transactional id (null means an idempotent producer).
        log.info("InitProducerId from %s: empty transactional id", ctx.header.client_id)
        return ready(_encode(ctx, ErrorCode.INVALID_REQUEST, -1, -1))
    if not may_transactional_id(ctx, Operation.WRITE, transactional_id, "InitProducerId"):
        return ready(_encode(ctx, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1))
    txn = ctx.broker.transactions
    timeout_ms = request.transaction_timeout_ms
    producer_id, epoch = -1, -1
    if ctx.version >= _PRODUCER_ID_FROM:
        producer_id, epoch = request.producer_id, request.producer_epoch

    async def respond() -> Response:
        if txn is None:
            result = InitResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        else:
            result = await txn.init_producer_id(transactional_id, timeout_ms, producer_id, epoch)
        if result.error in (ErrorCode.INVALID_TRANSACTION_TIMEOUT, ErrorCode.PRODUCER_FENCED):
            log.info(
                "InitProducerId from %s for transactional id %r (timeout %d ms): %s",
                ctx.header.client_id,
                transactional_id,
                timeout_ms,
                result.error.name,
            )
        return _encode(
            ctx, for_version(result.error, ctx), result.producer_id, result.producer_epoch
        )

    return respond
