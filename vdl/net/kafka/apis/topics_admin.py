"""CreateTopics, DeleteTopics and CreatePartitions.

On a cluster every node serves them (KIP-590): the change goes through the metadata group
from the node the client reached (`vdl.cluster.forwarding`), which answers once it has
applied it. The request's timeout_ms bounds the wait, also for a leader while group 0
has none; REQUEST_TIMED_OUT at the end, as Kafka answers. A timeout_ms of 0 or less (with
it Kafka answers without waiting for the change to reach every broker) still waits for
the change to commit, up to `COMMAND_TIMEOUT_S`, so the answer says whether it was made.
"""

from __future__ import annotations

from typing import Any

import trio
from kafka.protocol.admin import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
)

from vdl.broker.cluster_view import COMMAND_TIMEOUT_S
from vdl.broker.topics import TopicError
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, Response, ready
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

# Replicas a topic can have while this node is the whole cluster.
AVAILABLE_REPLICAS = 1


class _Deadline:
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


def handle_create_topics(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    broker = ctx.broker
    if broker.cluster is not None:
        return _create_on_cluster(ctx, request)
    results = []
    for topic in request.topics:
        error: int = 0
        message: str | None = None
        partitions = topic.num_partitions
        if partitions == -1:
            partitions = broker.default_partitions
        try:
            _check_create(ctx, topic.name)
            if topic.assignments:
                raise TopicError(
                    ErrorCode.INVALID_REQUEST, "manual replica assignment is not supported"
                )
            if topic.replication_factor not in (-1, *range(1, AVAILABLE_REPLICAS + 1)):
                raise TopicError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"replication factor {topic.replication_factor} is larger than the "
                    f"{AVAILABLE_REPLICAS} available node(s)",
                )
            configs = {c.name: c.value for c in topic.configs if c.value is not None}
            broker.create_topic(
                topic.name, partitions, configs, validate_only=bool(request.validate_only)
            )
        except TopicError as exc:
            error, message = int(exc.error), str(exc)
        results.append(
            CreateTopicsResponse.CreatableTopicResult(
                name=topic.name,
                error_code=error,
                error_message=message,
                num_partitions=partitions if error == 0 else -1,
                replication_factor=1 if error == 0 else -1,
                configs=None,
            )
        )
    response = CreateTopicsResponse(throttle_time_ms=0, topics=results, version=ctx.version)
    return ready(encode_response(ctx.header, response))


def _create_on_cluster(ctx: RequestContext, request: Any) -> Pending:
    cluster = ctx.broker.cluster
    assert cluster is not None
    header = ctx.header

    async def finish() -> Response:
        deadline = _Deadline(request.timeout_ms)
        results = []
        for topic in request.topics:
            error, message = 0, None
            partitions = topic.num_partitions
            if partitions == -1:
                partitions = ctx.broker.default_partitions
            replication = topic.replication_factor
            try:
                _check_create(ctx, topic.name)
                if topic.assignments:
                    raise TopicError(
                        ErrorCode.INVALID_REQUEST, "manual replica assignment is not supported"
                    )
                configs = {c.name: c.value for c in topic.configs if c.value is not None}
                await cluster.create_topic(
                    topic.name,
                    partitions,
                    replication,
                    configs,
                    validate_only=bool(request.validate_only),
                    timeout_s=deadline.left_s(),
                )
                if replication == -1:
                    replication = min(3, cluster.node_count)
            except TopicError as exc:
                error, message = int(exc.error), str(exc)
            results.append(
                CreateTopicsResponse.CreatableTopicResult(
                    name=topic.name,
                    error_code=error,
                    error_message=message,
                    num_partitions=partitions if error == 0 else -1,
                    replication_factor=replication if error == 0 else -1,
                    configs=None,
                )
            )
        response = CreateTopicsResponse(throttle_time_ms=0, topics=results, version=ctx.version)
        return encode_response(header, response)

    return finish


def handle_delete_topics(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    header = ctx.header
    names = list(request.topic_names or [])
    timeout_ms = int(request.timeout_ms)

    async def finish() -> Response:
        deadline = _Deadline(timeout_ms)
        results = []
        for name in names:
            error, message = 0, None
            try:
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
            results.append(
                DeleteTopicsResponse.DeletableTopicResult(
                    name=name, error_code=error, error_message=message
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
        deadline = _Deadline(timeout_ms)
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
