"""Metadata: the brokers, the controller and every partition's leader, replicas and ISR.

On one node that node is all of them; on a cluster they come from the metadata group and
the partition groups (a partition in an election answers LEADER_NOT_AVAILABLE).

From v10 every topic carries its id (KIP-516): a client that sees the id change knows the
topic was deleted and created again, even with the same name. v12 also finds topics by id
(a null name); v10-11 take names only, as Kafka answers (INVALID_REQUEST for a topic given
by id or without a name there).

Each partition carries its leader epoch (KIP-320): the Raft term of its leader's
leadership, which is also the epoch the leader stamps into the batches it appends and
checks requests' current_leader_epoch against (`LogStream.leader_epoch`), so a client
given this epoch is never fenced by the leader it names. A node tells the (leader, term)
pair it knows (its own group's view, or the leader's gossip); -1 while no leader is known.
A node with stale gossip may name an older leader and epoch: clients keep the newest epoch
they have seen (KIP-320), and a request sent to a node that leads no longer gets
NOT_LEADER_OR_FOLLOWER (or FENCED_LEADER_EPOCH from a re-elected one), then fresh
metadata. One node is every partition's only leader, in epoch 1.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kafka.protocol.metadata import MetadataResponse

from vdl.broker.cluster_view import BrokerAddress, ClusterView
from vdl.broker.topics import Topic, TopicError
from vdl.log.appender import SINGLE_NODE_TERM
from vdl.log.batch_header import MAX_PARTITION_LEADER_EPOCH
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

log = logging.getLogger(__name__)

_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition
# Topic lookup by id: v12 on (KIP-516).
_BY_ID_VERSION = 12
# Kafka's AclOperation codes, as bits of the authorized-operations fields (KIP-430): only
# the operations VDL checks on each resource.
_TOPIC_OPERATIONS = {
    Operation.READ: 3,
    Operation.WRITE: 4,
    Operation.CREATE: 5,
    Operation.DELETE: 6,
    Operation.ALTER: 7,
    Operation.DESCRIBE: 8,
}
# Kafka's AclOperation codes as bits of ClusterAuthorizedOperations (KIP-430): the
# operations VDL checks on the cluster. DESCRIBE_CONFIGS (10) of brokers is DESCRIBE here.
_CLUSTER_OPERATIONS = {
    Operation.CREATE: (5,),
    Operation.ALTER: (7,),
    Operation.DESCRIBE: (8, 10),
    Operation.ALTER_CONFIGS: (11,),
    Operation.IDEMPOTENT_WRITE: (12,),
}
# A partition without a known leader has no epoch either.
NO_LEADER_EPOCH = -1


def leader_epoch(cluster: ClusterView, topic: str, partition: int, leader: int) -> int:
    """The epoch of `leader`'s leadership of the partition as this node knows it (the Raft
    term, capped to an int32 as the batches' epochs are), or NO_LEADER_EPOCH."""
    known, term = cluster.leader_term(topic, partition)
    if leader < 0 or known != leader or term < 1:
        return NO_LEADER_EPOCH
    return min(term, MAX_PARTITION_LEADER_EPOCH)


def _partition_entry(ctx: RequestContext, topic: Topic, partition: int) -> Any:
    cluster = ctx.broker.cluster
    if cluster is None:
        node = ctx.node.node_id
        leader, replicas, isr = node, [node], [node]
        epoch = SINGLE_NODE_TERM
    else:
        state = cluster.partition_state(topic.name, partition)
        leader, replicas, isr = state.leader, list(state.replicas), list(state.isr)
        epoch = leader_epoch(cluster, topic.name, partition, leader)
    return _Partition(
        error_code=int(ErrorCode.LEADER_NOT_AVAILABLE) if leader < 0 else 0,
        partition_index=partition,
        leader_id=leader,
        leader_epoch=epoch,
        replica_nodes=replicas,
        isr_nodes=isr,
        offline_replicas=[],
    )


def _topic_operations(ctx: RequestContext, name: str) -> set[int]:
    """What the principal may do on topic `name`: the bits set in the KIP-430 bitfield
    (kafka-python encodes the set as the int32)."""
    return {code for op, code in _TOPIC_OPERATIONS.items() if ctx.may_topic(op, name)}


def cluster_operations(ctx: RequestContext) -> set[int]:
    """What the principal may do on the cluster: the bits of the KIP-430 bitfield (Metadata
    and DescribeCluster)."""
    return {
        code
        for operation, codes in _CLUSTER_OPERATIONS.items()
        if ctx.may_cluster(operation)
        for code in codes
    }


def _topic_entry(ctx: RequestContext, topic: Topic, with_operations: bool) -> Any:
    return _Topic(
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=False,
        partitions=[_partition_entry(ctx, topic, p) for p in range(topic.partitions)],
        # None is encoded as INT32_MIN: "not requested" (KIP-430).
        authorized_operations=_topic_operations(ctx, topic.name) if with_operations else None,
    )


def _failed(error: ErrorCode, name: str | None, topic_id: uuid.UUID | None = None) -> Any:
    """A topic entry with an error; its id stays zero unless the request gave it (Kafka
    never names the id of a topic the client may not see)."""
    return _Topic(error_code=int(error), name=name, topic_id=topic_id, partitions=[])


def brokers_and_controller(ctx: RequestContext) -> tuple[list[BrokerAddress], int]:
    """The brokers and the controller id told to clients (Metadata, DescribeCluster)."""
    brokers = [BrokerAddress(ctx.node.node_id, ctx.node.host, ctx.node.port)]
    controller = ctx.node.node_id
    cluster = ctx.broker.cluster
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
    return brokers, controller


def handle_metadata(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    broker = ctx.broker
    with_operations = ctx.version >= 8 and bool(request.include_topic_authorized_operations)
    # v0 has no null: an empty list asks for every topic there.
    if request.topics is None or (ctx.version == 0 and not request.topics):
        requested = None
    else:
        requested = list(request.topics)
    auto_create = ctx.version < 4 or bool(request.allow_auto_topic_creation)
    topics = []
    if requested is None:
        # Topics the principal may not describe are left out, as Kafka does.
        topics = [
            _topic_entry(ctx, t, with_operations)
            for t in broker.catalog.all()
            if ctx.may_topic(Operation.DESCRIBE, t.name)
        ]
    else:
        for wanted in requested:
            topic_id = getattr(wanted, "topic_id", None)
            if topic_id is not None and topic_id.int == 0:
                topic_id = None
            name: str | None = wanted.name
            if topic_id is not None or name is None:
                topics.append(_by_id(ctx, name, topic_id, with_operations))
                continue
            if not ctx.may_topic(Operation.DESCRIBE, name):
                topics.append(_failed(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name))
                continue
            create = auto_create and ctx.authorizer.may_create_topic(ctx.principal, name)
            try:
                topic = broker.ensure_topic(name) if create else broker.catalog.get(name)
            except TopicError as exc:
                topics.append(_failed(exc.error, name))
                continue
            if topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if create and broker.cluster is not None and broker.auto_create_topics:
                    # Being created through the metadata group: "retry shortly".
                    code = ErrorCode.LEADER_NOT_AVAILABLE
                topics.append(_failed(code, name))
            else:
                topics.append(_topic_entry(ctx, topic, with_operations))
    brokers, controller = brokers_and_controller(ctx)
    fields: dict[str, Any] = {}
    if 8 <= ctx.version <= 10 and request.include_cluster_authorized_operations:
        fields["authorized_operations"] = cluster_operations(ctx)
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
        **fields,
    )
    return ready(encode_response(ctx.header, response))


def _by_id(
    ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None, with_operations: bool
) -> Any:
    """A topic asked for by id (v12, KIP-516): never auto-created; UNKNOWN_TOPIC_ID for an
    id no topic has; TOPIC_AUTHORIZATION_FAILED without the name for one the principal may
    not describe (as Kafka: an id is not secret, the name is)."""
    if ctx.version < _BY_ID_VERSION or topic_id is None:
        log.info(
            "Metadata v%d from %s: a topic by id or without a name needs v%d",
            ctx.version,
            ctx.header.client_id,
            _BY_ID_VERSION,
        )
        return _failed(ErrorCode.INVALID_REQUEST, name, topic_id)
    topic = next((t for t in ctx.broker.catalog.all() if t.topic_id == topic_id), None)
    if topic is None:
        return _failed(ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id)
    if not ctx.may_topic(Operation.DESCRIBE, topic.name):
        return _failed(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, topic_id)
    return _topic_entry(ctx, topic, with_operations)
