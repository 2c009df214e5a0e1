"""Metadata: the brokers, the controller and every partition's leader, replicas and ISR.

On one node that node is all of them; on a cluster they come from the metadata group and
the partition groups (a partition in an election answers LEADER_NOT_AVAILABLE).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import MetadataResponse

from vdl.broker.cluster_view import BrokerAddress
from vdl.broker.topics import Topic, TopicError
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition
# Option A of the leader-epoch choice: no epochs, so clients never start KIP-320 validation.
NO_LEADER_EPOCH = -1


def _partition_entry(ctx: RequestContext, topic: Topic, partition: int) -> Any:
    cluster = ctx.broker.cluster
    if cluster is None:
        node = ctx.node.node_id
        leader, replicas, isr = node, [node], [node]
    else:
        state = cluster.partition_state(topic.name, partition)
        leader, replicas, isr = state.leader, list(state.replicas), list(state.isr)
    return _Partition(
        error_code=int(ErrorCode.LEADER_NOT_AVAILABLE) if leader < 0 else 0,
        partition_index=partition,
        leader_id=leader,
        leader_epoch=NO_LEADER_EPOCH,
        replica_nodes=replicas,
        isr_nodes=isr,
        offline_replicas=[],
    )


def _topic_entry(ctx: RequestContext, topic: Topic) -> Any:
    return _Topic(
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=False,
        partitions=[_partition_entry(ctx, topic, p) for p in range(topic.partitions)],
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
        # Topics the principal may not describe are left out, as Kafka does.
        topics = [
            _topic_entry(ctx, t)
            for t in broker.catalog.all()
            if ctx.may_topic(Operation.DESCRIBE, t.name)
        ]
    else:
        for name in names:
            if not ctx.may_topic(Operation.DESCRIBE, name):
                denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                topics.append(_Topic(error_code=denied, name=name, partitions=[]))
                continue
            create = auto_create and ctx.authorizer.may_create_topic(ctx.principal, name)
            try:
                topic = broker.ensure_topic(name) if create else broker.catalog.get(name)
            except TopicError as exc:
                topics.append(_Topic(error_code=int(exc.error), name=name, partitions=[]))
                continue
            if topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if create and broker.cluster is not None and broker.auto_create_topics:
                    # Being created through the metadata group: "retry shortly".
                    code = ErrorCode.LEADER_NOT_AVAILABLE
                topics.append(_Topic(error_code=int(code), name=name, partitions=[]))
            else:
                topics.append(_topic_entry(ctx, topic))
    brokers = [BrokerAddress(ctx.node.node_id, ctx.node.host, ctx.node.port)]
    controller = ctx.node.node_id
    cluster = broker.cluster
    if cluster is not None:
        # Until this node's own registration is applied, list it anyway: clients need a
        # broker to talk to.
        registered = cluster.kafka_brokers()
        if any(b.node_id == ctx.node.node_id for b in registered):
            brokers = registered
        else:
            brokers = [*registered, *brokers]
        # Clients send admin requests to the controller id, and every member takes them
        # (KIP-590; Kafka brokers name any live broker here): group 0's leader when it is
        # a listed broker (no forwarding hop), else this node (it forwards, and waits for a
        # leader while there is none); -1 from a node outside the cluster.
        leader = cluster.controller_id()
        if leader in {b.node_id for b in brokers}:
            controller = leader
        elif not cluster.is_member():
            controller = -1
    response = MetadataResponse(
        throttle_time_ms=0,
        brokers=[
            MetadataResponse.MetadataResponseBroker(
                node_id=b.node_id, host=b.host, port=b.port, rack=None
            )
            for b in brokers
        ],
        cluster_id=ctx.node.cluster_id,
        controller_id=controller,
        topics=topics,
        version=ctx.version,
    )
    return ready(encode_response(ctx.header, response))
