"""The transaction coordinator's Kafka APIs (KIP-98, KIP-447, KIP-664): AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, DescribeTransactions and ListTransactions on top
of `vdl.txn.coordinator` (InitProducerId with a transactional id is in
init_producer_id.py, FindCoordinator key type 1 in find_coordinator.py).

The versions are those current clients send, up to the last before KIP-890's server-side
changes: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit v0-3 (v3 are
flexible). PRODUCER_FENCED (KIP-588) goes only to clients whose request version knows it;
older ones get INVALID_PRODUCER_EPOCH, as Kafka answers them: AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn v2+, TxnOffsetCommit v3+, InitProducerId v4+.

Authorization, as Kafka's: the transactional id needs WRITE for every request of its
transactions (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, checked first), DESCRIBE for
DescribeTransactions, and ListTransactions shows only the ids the principal may describe;
the partitions need Write on their topic (TOPIC_AUTHORIZATION_FAILED), a group Read
(GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging
from typing import Any

from vdl.groups.offsets import NO_LEADER_EPOCH, CommittedOffset, TopicPartition, check_metadata
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, Response, ready
from vdl.net.kafka.apis.groups import instance_id
from vdl.net.kafka.control_codec import decode_request, encode_response, response_class
from vdl.net.kafka.versions import ApiKey
from vdl.security.acl import Operation
from vdl.txn.coordinator import TxnCoordinator
from vdl.txn.state import TxnRecord, TxnState

log = logging.getLogger(__name__)

# The first version of each API whose clients know PRODUCER_FENCED (KIP-588).
FENCED_FROM: dict[int, int] = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
    ApiKey.TXN_OFFSET_COMMIT: 3,
}
# TxnOffsetCommit v3 carries the member's generation, id and instance id (KIP-447).
_TXN_COMMIT_MEMBER_FROM = 3
# TxnOffsetCommit v2 carries the committed leader epoch.
_TXN_COMMIT_EPOCH_FROM = 2
# ListTransactions v1 filters on how long a transaction has run (KIP-994).
_LIST_DURATION_FROM = 1


def for_version(error: ErrorCode, ctx: RequestContext) -> ErrorCode:
    """PRODUCER_FENCED as the request's version can carry it."""
    if error == ErrorCode.PRODUCER_FENCED and ctx.version < FENCED_FROM[ctx.header.api_key]:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def coordinator(ctx: RequestContext) -> TxnCoordinator | None:
    return ctx.broker.transactions


_LOGGED = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    }
)


def may_transactional_id(
    ctx: RequestContext, operation: Operation, transactional_id: str, what: str
) -> bool:
    """Whether the principal has `operation` on the transactional id; a refusal is logged."""
    if ctx.authorizer.transactional_id(ctx.principal, operation, transactional_id):
        return True
    log.warning(
        "%s from %s refused: %s on transactional id %r is needed",
        what,
        ctx.principal or "anonymous",
        operation.name,
        transactional_id,
    )
    return False


def _refused(ctx: RequestContext, what: str, transactional_id: str, error: ErrorCode) -> None:
    """Log the answer a zombie or forged producer meets, once per request, as sent."""
    answered = for_version(error, ctx)
    if answered in _LOGGED:
        log.info(
            "%s from %s for transactional id %r: %s",
            what,
            ctx.header.client_id,
            transactional_id,
            answered.name,
        )


def handle_add_partitions_to_txn(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    txn = coordinator(ctx)
    transactional_id = request.v3_and_below_transactional_id
    wanted: list[TopicPartition] = []
    errors: dict[TopicPartition, ErrorCode] = {}
    id_allowed = may_transactional_id(ctx, Operation.WRITE, transactional_id, "AddPartitionsToTxn")
    for topic in request.v3_and_below_topics:
        allowed = ctx.may_topic(Operation.WRITE, topic.name)
        known = ctx.broker.catalog.get(topic.name)
        for partition in topic.partitions:
            tp = (topic.name, partition)
            if not id_allowed:
                errors[tp] = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            elif not allowed:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif known is None or not 0 <= partition < known.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append(tp)
    header = ctx.header

    async def respond() -> Response:
        if errors:
            # Kafka adds none of them if one is refused; the others are told so.
            for tp in wanted:
                errors[tp] = ErrorCode.OPERATION_NOT_ATTEMPTED
        else:
            error = (
                ErrorCode.COORDINATOR_NOT_AVAILABLE
                if txn is None
                else await txn.add_partitions(
                    transactional_id,
                    request.v3_and_below_producer_id,
                    request.v3_and_below_producer_epoch,
                    wanted,
                )
            )
            _refused(ctx, "AddPartitionsToTxn", transactional_id, error)
            for tp in wanted:
                errors[tp] = for_version(error, ctx)
        cls = response_class(header.api_key, header.api_version)
        topic_cls = cls.AddPartitionsToTxnTopicResult
        partition_cls = topic_cls.AddPartitionsToTxnPartitionResult
        by_topic: dict[str, list[Any]] = {}
        for (name, partition), error in errors.items():
            by_topic.setdefault(name, []).append(
                partition_cls(partition_index=partition, partition_error_code=int(error))
            )
        response = cls(
            throttle_time_ms=0,
            results_by_topic_v3_and_below=[
                topic_cls(name=name, results_by_partition=parts) for name, parts in by_topic.items()
            ],
        )
        return encode_response(header, response)

    return respond


def handle_add_offsets_to_txn(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    txn = coordinator(ctx)

    async def respond() -> Response:
        if not may_transactional_id(
            ctx, Operation.WRITE, request.transactional_id, "AddOffsetsToTxn"
        ):
            error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not ctx.may_group(Operation.READ, request.group_id):
            error = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif txn is None:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            error = await txn.add_offsets(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.group_id,
            )
            _refused(ctx, "AddOffsetsToTxn", request.transactional_id, error)
        cls = response_class(ctx.header.api_key, ctx.version)
        response = cls(throttle_time_ms=0, error_code=int(for_version(error, ctx)))
        return encode_response(ctx.header, response)

    return respond


def handle_txn_offset_commit(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    txn = coordinator(ctx)
    groups = ctx.broker.groups
    group_error = ErrorCode.NONE
    if not may_transactional_id(ctx, Operation.WRITE, request.transactional_id, "TxnOffsetCommit"):
        group_error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.may_group(Operation.READ, request.group_id):
        group_error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif txn is None or groups is None:
        group_error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    elif ctx.version >= _TXN_COMMIT_MEMBER_FROM and (
        request.member_id or request.generation_id >= 0
    ):
        # KIP-447: only a member of the group's current generation commits through a
        # transaction, so a consumer that lost its partitions cannot commit them.
        group_error = groups.coordinator_error()
        if group_error == ErrorCode.NONE:
            group_error = groups.check_commit(
                request.group_id,
                request.member_id,
                request.generation_id,
                instance_id(request, ctx.version, _TXN_COMMIT_MEMBER_FROM),
            )
    now = 0 if txn is None else txn.now_ms()
    errors: dict[TopicPartition, ErrorCode] = {}
    accepted: dict[TopicPartition, CommittedOffset] = {}
    for topic in request.topics:
        known = ctx.broker.catalog.get(topic.name)
        allowed = ctx.may_topic(Operation.READ, topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if group_error != ErrorCode.NONE:
                errors[tp] = group_error
            elif not allowed:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif known is None or not 0 <= p.partition_index < known.partitions:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif (error := check_metadata(p.committed_metadata)) != ErrorCode.NONE:
                errors[tp] = error
            else:
                epoch = (
                    p.committed_leader_epoch
                    if ctx.version >= _TXN_COMMIT_EPOCH_FROM
                    else NO_LEADER_EPOCH
                )
                accepted[tp] = CommittedOffset(
                    p.committed_offset, p.committed_metadata or "", epoch, now
                )
                errors[tp] = ErrorCode.NONE

    async def respond() -> Response:
        if accepted and txn is not None:
            error = await txn.commit_offsets(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.group_id,
                accepted,
            )
            _refused(ctx, "TxnOffsetCommit", request.transactional_id, error)
            for tp in accepted:
                errors[tp] = for_version(error, ctx)
        cls = response_class(ctx.header.api_key, ctx.version)
        topic_cls = cls.TxnOffsetCommitResponseTopic
        partition_cls = topic_cls.TxnOffsetCommitResponsePartition
        by_topic: dict[str, list[Any]] = {}
        for (name, partition), error in errors.items():
            by_topic.setdefault(name, []).append(
                partition_cls(partition_index=partition, error_code=int(error))
            )
        response = cls(
            throttle_time_ms=0,
            topics=[topic_cls(name=name, partitions=parts) for name, parts in by_topic.items()],
        )
        return encode_response(ctx.header, response)

    return respond


def handle_end_txn(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    txn = coordinator(ctx)

    async def respond() -> Response:
        if not may_transactional_id(ctx, Operation.WRITE, request.transactional_id, "EndTxn"):
            error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif txn is None:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            error = await txn.end_txn(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                bool(request.committed),
            )
            _refused(ctx, "EndTxn", request.transactional_id, error)
        cls = response_class(ctx.header.api_key, ctx.version)
        response = cls(throttle_time_ms=0, error_code=int(for_version(error, ctx)))
        return encode_response(ctx.header, response)

    return respond


def _topics(record: TxnRecord) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in record.partitions:
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def handle_describe_transactions(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    txn = coordinator(ctx)
    cls = response_class(ctx.header.api_key, ctx.version)
    state_cls = cls.TransactionState
    topic_cls = state_cls.TopicData
    states = []
    for transactional_id in request.transactional_ids:
        error, record = (
            (ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
            if txn is None
            else txn.describe(transactional_id)
        )
        if not may_transactional_id(
            ctx, Operation.DESCRIBE, transactional_id, "DescribeTransactions"
        ):
            error, record = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
        if record is None:
            states.append(
                state_cls(
                    error_code=int(error),
                    transactional_id=transactional_id,
                    transaction_state="",
                    transaction_timeout_ms=0,
                    transaction_start_time_ms=-1,
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=[],
                )
            )
            continue
        states.append(
            state_cls(
                error_code=0,
                transactional_id=transactional_id,
                transaction_state=record.state.value,
                transaction_timeout_ms=record.timeout_ms,
                transaction_start_time_ms=record.start_ms,
                producer_id=record.producer_id,
                producer_epoch=record.producer_epoch,
                topics=[
                    topic_cls(topic=name, partitions=parts)
                    for name, parts in _topics(record).items()
                ],
            )
        )
    return ready(encode_response(ctx.header, cls(throttle_time_ms=0, transaction_states=states)))


def handle_list_transactions(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    txn = coordinator(ctx)
    cls = response_class(ctx.header.api_key, ctx.version)
    known = {state.value for state in TxnState}
    wanted = set(request.state_filters or ())
    unknown = sorted(wanted - known)
    pids = set(request.producer_id_filters or ())
    duration = request.duration_filter if ctx.version >= _LIST_DURATION_FROM else -1
    error, records = (ErrorCode.COORDINATOR_NOT_AVAILABLE, []) if txn is None else txn.list()
    now = 0 if txn is None else txn.now_ms()
    states = [
        cls.TransactionState(
            transactional_id=record.transactional_id,
            producer_id=record.producer_id,
            transaction_state=record.state.value,
        )
        for record in records
        # Only the ids the principal may describe (Kafka filters the same way).
        if ctx.authorizer.transactional_id(
            ctx.principal, Operation.DESCRIBE, record.transactional_id
        )
        and (not wanted or record.state.value in wanted)
        and (not pids or record.producer_id in pids)
        # KIP-994: only transactions running longer than the filter.
        and (duration < 0 or (record.start_ms >= 0 and now - record.start_ms > duration))
    ]
    response = cls(
        throttle_time_ms=0,
        error_code=int(error),
        unknown_state_filters=unknown,
        transaction_states=states,
    )
    return ready(encode_response(ctx.header, response))
