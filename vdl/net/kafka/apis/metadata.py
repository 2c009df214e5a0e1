"""Metadata: this node as the only broker, leader and controller of every partition."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import MetadataResponse

from vdl.broker.topics import Topic, TopicError
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.control_codec import decode_request, encode_response

_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition
# Option A of the leader-epoch choice: no epochs, so clients never start KIP-320 validation.
NO_LEADER_EPOCH = -1


def _topic_entry(ctx: RequestContext, topic: Topic) -> Any:
    node = ctx.node.node_id
    return _Topic(
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=False,
        partitions=[
            _Partition(
                error_code=0,
                partition_index=p,
                leader_id=node,
                leader_epoch=NO_LEADER_EPOCH,
                replica_nodes=[node],
                isr_nodes=[node],
                offline_replicas=[],
            )
            for p in range(topic.partitions)
        ],
    )


def handle_metadata(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    broker = ctx.broker
    # v0 has no null: an empty list asks for every topic there.
    if request.topics is None or (ctx.version == 0 and not request.topics):
        names = None
    else:
        names = [t.name for t in request.topics]
    auto_create = ctx.version < 4 or bool(request.allow_auto_topic_creation)
    topics = []
    if names is None:
        topics = [_topic_entry(ctx, t) for t in broker.catalog.all()]
    else:
        for name in names:
            try:
                topic = broker.ensure_topic(name) if auto_create else broker.catalog.get(name)
            except TopicError as exc:
                topics.append(_Topic(error_code=int(exc.error), name=name, partitions=[]))
                continue
            if topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                topics.append(_Topic(error_code=int(code), name=name, partitions=[]))
            else:
                topics.append(_topic_entry(ctx, topic))
    response = MetadataResponse(
        throttle_time_ms=0,
        brokers=[
            MetadataResponse.MetadataResponseBroker(
                node_id=ctx.node.node_id, host=ctx.node.host, port=ctx.node.port, rack=None
            )
        ],
        cluster_id=ctx.node.cluster_id,
        controller_id=ctx.node.node_id,
        topics=topics,
        version=ctx.version,
    )
    return ready(encode_response(ctx.header, response))
