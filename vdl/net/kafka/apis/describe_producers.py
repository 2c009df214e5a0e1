"""DescribeProducers (API key 61, KIP-664): the producers a partition's leader knows.

What `kafka-transactions describe-producers` and the admin clients' `describe_producers`
send to a partition's leader. Each partition's answer lists its producer table
(`vdl/log/producer_state.py`): per producer its id and epoch, the last sequence it wrote
(-1 when its last batch was a marker or had none), when this node last saw a batch of it
(in ms; Kafka answers the last batch's timestamp), the coordinator epoch of its last
transaction marker (-1 before any), and the first offset of its open transaction (-1 when
none: `vdl/txn/partition_txns.py`).

As Kafka answers (the protocol guide's DescribeProducers): READ on the topic or
TOPIC_AUTHORIZATION_FAILED; UNKNOWN_TOPIC_OR_PARTITION; NOT_LEADER_OR_FOLLOWER from a node
that does not lead the partition.
"""

from __future__ import annotations

import logging

from kafka.protocol.admin.transactions import DescribeProducersResponse

from vdl.broker.topics import TopicError
from vdl.log.error_codes import ErrorCode
from vdl.log.stream import LogStream
from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

log = logging.getLogger(__name__)

_TopicResponse = DescribeProducersResponse.TopicResponse
_PartitionResponse = _TopicResponse.PartitionResponse
_ProducerState = _PartitionResponse.ProducerState


def _producers(stream: LogStream) -> list[object]:
    open_txns = stream.txns.open_transactions()
    states: list[object] = []
    for producer_id, entry in sorted(stream.producers.items()):
        last_sequence = entry.batches[-1].last_seq if entry.batches else -1
        states.append(
            _ProducerState(
                producer_id=producer_id,
                producer_epoch=entry.epoch,
                last_sequence=last_sequence,
                last_timestamp=entry.last_seen_ms,
                coordinator_epoch=entry.coordinator_epoch,
                current_txn_start_offset=open_txns.get(producer_id, -1),
            )
        )
    return states


def handle_describe_producers(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    topics = []
    for topic in request.topics or []:
        name = str(topic.name)
        allowed = ctx.may_topic(Operation.READ, name)
        partitions = []
        for index in topic.partition_indexes or []:
            partition = int(index)
            try:
                if not allowed:
                    raise TopicError(
                        ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"may not read topic {name!r}"
                    )
                stream = ctx.broker.leader_stream(name, partition)
            except TopicError as exc:
                log.info("DescribeProducers %s-%d refused: %s", name, partition, exc)
                partitions.append(
                    _PartitionResponse(
                        partition_index=partition,
                        error_code=int(exc.error),
                        error_message=str(exc),
                        active_producers=[],
                    )
                )
                continue
            partitions.append(
                _PartitionResponse(
                    partition_index=partition,
                    error_code=0,
                    error_message=None,
                    active_producers=_producers(stream),
                )
            )
        topics.append(_TopicResponse(name=name, partitions=partitions))
    response = DescribeProducersResponse(
        throttle_time_ms=0, topics=topics, version=ctx.header.api_version
    )
    return ready(encode_response(ctx.header, response))
