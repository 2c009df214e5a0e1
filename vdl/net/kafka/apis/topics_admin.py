"""CreateTopics, DeleteTopics and CreatePartitions.

On a cluster every node serves them (KIP-590): the change goes through the metadata group
from the node the client reached (`vdl.cluster.forwarding`), which answers once it has
applied it. The request's timeout_ms bounds the wait, also for a leader while group 0
has none; REQUEST_TIMED_OUT at the end, as Kafka answers. A timeout_ms of 0 or less (with
it Kafka answers without waiting for the change to reach every broker) still waits for
the change to commit, up to `COMMAND_TIMEOUT_S`, so the answer says whether it was made.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import trio
from kafka.protocol.admin import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
)

from vdl.broker.cluster_view import COMMAND_TIMEOUT_S
from vdl.broker.topics import Topic, TopicError
from vdl.cluster.placement import check_assignment, default_replication_factor
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, Response, ready
from vdl.net.kafka.apis.describe_configs import SOURCE_DEFAULT_CONFIG, SOURCE_TOPIC_CONFIG
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

log = logging.getLogger(__name__)

# Replicas a topic can have while this node is the whole cluster.
AVAILABLE_REPLICAS = 1
# CreateTopics answers with the topic's configs from v5 (KIP-525); DeleteTopics takes
# topic ids from v6 (KIP-516).
_CONFIGS_VERSION = 5
_DELETE_BY_ID_VERSION = 6


class Deadline:
    """The end of a request's wait, from its timeout_ms."""

    def __init__(self, timeout_ms: int) -> None:
        wait_s = timeout_ms / 1000 if timeout_ms > 0 else COMMAND_TIMEOUT_S
        self._at = trio.current_time() + wait_s

    def left_s(self) -> float:
        """What is left of it; REQUEST_TIMED_OUT once it has passed."""
        left = self._at - trio.current_time()
        if left <= 0:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, "the request's timeout passed")
        return left


def _check_create(ctx: RequestContext, name: str) -> None:
    if not ctx.authorizer.may_create_topic(ctx.principal, name):
        raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"may not create {name!r}")


def _assignments(topic: Any) -> list[tuple[int, list[int]]] | None:
    """A CreatableTopic's manual replica assignment, None if it has none. As Kafka
    requires, num_partitions and replication_factor are then -1 (INVALID_REQUEST)."""
    if not topic.assignments:
        return None
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        raise TopicError(
            ErrorCode.INVALID_REQUEST,
            "both num_partitions or replication_factor and a manual assignment were set; "
            "give either, not both",
        )
    return [(int(a.partition_index), [int(n) for n in a.broker_ids]) for a in topic.assignments]


def _result(
    ctx: RequestContext,
    name: str,
    error: int,
    message: str | None,
    created: Topic | None,
    replication: int,
) -> Any:
    """One CreatableTopicResult: from v5 with the topic's configs (KIP-525), from v7 with
    its id (KIP-516)."""
    _Result = CreateTopicsResponse.CreatableTopicResult
    if created is None:
        return _Result(
            name=name,
            error_code=error,
            error_message=message,
            num_partitions=-1,
            replication_factor=-1,
            configs=None,
        )
    configs = None
    if ctx.version >= _CONFIGS_VERSION:
        configs = []
        for key, spec in ctx.broker.config_specs.items():
            explicit = key in created.configs
            configs.append(
                _Result.CreatableTopicConfigs(
                    name=key,
                    value=created.configs[key] if explicit else spec.default,
                    read_only=False,
                    config_source=SOURCE_TOPIC_CONFIG if explicit else SOURCE_DEFAULT_CONFIG,
                    is_sensitive=False,
                )
            )
    return _Result(
        name=name,
        topic_id=created.topic_id,
        error_code=0,
        error_message=None,
        num_partitions=created.partitions,
        replication_factor=replication,
        configs=configs,
    )


def handle_create_topics(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    broker = ctx.broker
    if broker.cluster is not None:
        return _create_on_cluster(ctx, request)
    results = []
    for topic in request.topics:
        error: int = 0
        message: str | None = None
        created = None
        partitions = topic.num_partitions
        if partitions == -1:
            partitions = broker.default_partitions
        try:
            _check_create(ctx, topic.name)
            assignments = _assignments(topic)
            if assignments is not None:
                # This node is the only broker: each partition on it alone.
                partitions = len(check_assignment(assignments, (ctx.node.node_id,)))
            elif topic.replication_factor not in (-1, *range(1, AVAILABLE_REPLICAS + 1)):
                raise TopicError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"replication factor {topic.replication_factor} is larger than the "
                    f"{AVAILABLE_REPLICAS} available node(s)",
                )
            configs = {c.name: c.value for c in topic.configs if c.value is not None}
            created = broker.create_topic(
                topic.name, partitions, configs, validate_only=bool(request.validate_only)
            )
        except TopicError as exc:
            error, message = int(exc.error), str(exc)
            log.info("CreateTopics %s refused: %s", topic.name, message)
        results.append(_result(ctx, topic.name, error, message, created, 1))
    response = CreateTopicsResponse(throttle_time_ms=0, topics=results, version=ctx.version)
    return ready(encode_response(ctx.header, response))


def _create_on_cluster(ctx: RequestContext, request: Any) -> Pending:
    cluster = ctx.broker.cluster
    assert cluster is not None
    header = ctx.header

    async def finish() -> Response:
        deadline = Deadline(request.timeout_ms)
        results = []
        for topic in request.topics:
            error, message, created = 0, None, None
            partitions = topic.num_partitions
            if partitions == -1:
                partitions = ctx.broker.default_partitions
            replication = topic.replication_factor
            try:
                _check_create(ctx, topic.name)
                assignments = _assignments(topic)
                if assignments is not None:
                    replication = len(assignments[0][1])
                configs = {c.name: c.value for c in topic.configs if c.value is not None}
                created = await cluster.create_topic(
                    topic.name,
                    partitions,
                    replication,
                    configs,
                    validate_only=bool(request.validate_only),
                    timeout_s=deadline.left_s(),
                    assignments=assignments,
                )
                if replication == -1:
                    replication = default_replication_factor(cluster.node_count)
            except TopicError as exc:
                error, message = int(exc.error), str(exc)
                log.info("CreateTopics %s refused: %s", topic.name, message)
            results.append(_result(ctx, topic.name, error, message, created, replication))
        response = CreateTopicsResponse(throttle_time_ms=0, topics=results, version=ctx.version)
        return encode_response(header, response)

    return finish


def _deletions(ctx: RequestContext, request: Any) -> list[tuple[str | None, uuid.UUID | None]]:
    """(name, id) of each topic to delete: by name before v6, by name or id from v6
    (KIP-516)."""
    if ctx.version < _DELETE_BY_ID_VERSION:
        return [(name, None) for name in request.topic_names or []]
    wanted: list[tuple[str | None, uuid.UUID | None]] = []
    for state in request.topics or []:
        topic_id = state.topic_id
        if topic_id is not None and topic_id.int == 0:
            topic_id = None
        wanted.append((state.name, topic_id))
    return wanted


def _named(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None) -> str:
    """The name of the topic to delete. Kafka's answers: INVALID_REQUEST for both or
    neither of name and id, UNKNOWN_TOPIC_ID for an id no topic has."""
    if (name is None) == (topic_id is None):
        raise TopicError(
            ErrorCode.INVALID_REQUEST, "give exactly one of a topic name and a topic id"
        )
    if name is not None:
        return name
    topic = next((t for t in ctx.broker.catalog.all() if t.topic_id == topic_id), None)
    if topic is None:
        raise TopicError(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has the id {topic_id}")
    return topic.name


def handle_delete_topics(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    header = ctx.header
    wanted = _deletions(ctx, request)
    timeout_ms = int(request.timeout_ms)

    async def finish() -> Response:
        deadline = Deadline(timeout_ms)
        results = []
        for name, topic_id in wanted:
            error, message = 0, None
            try:
                name = _named(ctx, name, topic_id)
                if not ctx.may_topic(Operation.DELETE, name):
                    raise TopicError(
                        ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"may not delete {name!r}"
                    )
                cluster = ctx.broker.cluster
                if cluster is not None:
                    await cluster.delete_topic(name, deadline.left_s())
                else:
                    await ctx.broker.delete_topic(name)
            except TopicError as exc:
                error, message = int(exc.error), str(exc)
                log.info("DeleteTopics %s refused: %s", name or topic_id, message)
            results.append(
                DeleteTopicsResponse.DeletableTopicResult(
                    name=name, topic_id=topic_id, error_code=error, error_message=message
                )
            )
        response = DeleteTopicsResponse(
            throttle_time_ms=0, responses=results, version=header.api_version
        )
        return encode_response(header, response)

    return finish


def handle_create_partitions(ctx: RequestContext) -> Pending:
    """CreatePartitions (KIP-195): grow topics to `count` partitions. As Kafka answers:
    ALTER on the topic or TOPIC_AUTHORIZATION_FAILED, INVALID_PARTITIONS for a count that
    is no increase (or above the most a topic may have), UNKNOWN_TOPIC_OR_PARTITION,
    INVALID_REPLICA_ASSIGNMENT for a manual assignment that is not one list of the
    topic's replication factor of distinct brokers per new partition, INVALID_REQUEST for
    a topic named twice. On a cluster the new partitions are one metadata command,
    from any node (KIP-590)."""
    request = decode_request(ctx.header, ctx.frame)
    header = ctx.header
    topics = list(request.topics or [])
    validate_only = bool(request.validate_only)
    timeout_ms = int(request.timeout_ms)
    names = [t.name for t in topics]

    async def finish() -> Response:
        deadline = Deadline(timeout_ms)
        results = []
        for topic in topics:
            error, message = 0, None
            name = topic.name
            try:
                if names.count(name) > 1:
                    raise TopicError(ErrorCode.INVALID_REQUEST, "duplicate topic in request")
                if not ctx.may_topic(Operation.ALTER, name):
                    raise TopicError(
                        ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"may not alter {name!r}"
                    )
                assignments = None
                if topic.assignments is not None:
                    assignments = [list(a.broker_ids) for a in topic.assignments]
                count = int(topic.count)
                cluster = ctx.broker.cluster
                if cluster is not None:
                    await cluster.add_partitions(
                        name,
                        count,
                        assignments,
                        validate_only=validate_only,
                        timeout_s=deadline.left_s(),
                    )
                else:
                    ctx.broker.add_partitions(
                        name,
                        count,
                        assignments,
                        node_id=ctx.node.node_id,
                        validate_only=validate_only,
                    )
            except TopicError as exc:
                error, message = int(exc.error), str(exc)
            results.append(
                CreatePartitionsResponse.CreatePartitionsTopicResult(
                    name=name, error_code=error, error_message=message
                )
            )
        response = CreatePartitionsResponse(
            throttle_time_ms=0, results=results, version=header.api_version
        )
        return encode_response(header, response)

    return finish
