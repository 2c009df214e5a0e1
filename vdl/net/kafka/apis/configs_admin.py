"""IncrementalAlterConfigs (KIP-339) and AlterConfigs: changing a topic's settings.

A topic's explicit settings (`Topic.configs`) are what both change; the keys and their
checks are the node's topic config specs (`vdl.broker.topics`), as for CreateTopics.
IncrementalAlterConfigs SETs, DELETEs (back to the default), and APPENDs to or SUBTRACTs
from list-typed settings; AlterConfigs replaces every explicit setting of the topic with
the ones it names (Kafka's semantics: a setting it leaves out goes back to its default).

On a cluster the new definition is one metadata command (`update_topic`, the one YDB's
AlterTopic runs) from the node the client reached (KIP-590): every node applies it, and
the answer comes once this node has. Neither request carries a timeout, so the wait is
bounded by `COMMAND_TIMEOUT_S` (REQUEST_TIMED_OUT after it).

VDL has no dynamic broker settings: a BROKER or BROKER_LOGGER resource is answered
INVALID_CONFIG, as Kafka answers a setting it cannot change dynamically.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from kafka.protocol.admin import AlterConfigsResponse, IncrementalAlterConfigsResponse

from vdl.broker.topics import Topic, TopicError, validate_configs
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, Response
from vdl.net.kafka.apis.topics_admin import Deadline
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.net.kafka.request_metrics import api_name
from vdl.security.acl import Operation

log = logging.getLogger(__name__)

# ConfigResource types (the Kafka protocol guide, DescribeConfigs / AlterConfigs).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
# IncrementalAlterConfigs operations (KIP-339).
OP_SET = 0
OP_DELETE = 1
OP_APPEND = 2
OP_SUBTRACT = 3
# The topic settings VDL knows whose Kafka type is LIST (comma-separated values): the only
# ones APPEND and SUBTRACT apply to.
LIST_CONFIGS = frozenset({"cleanup.policy"})

# (name, operation, value) of one requested change; AlterConfigs' entries are all SET.
Change = tuple[str, int, str | None]


def _invalid_request(message: str) -> TopicError:
    return TopicError(ErrorCode.INVALID_REQUEST, message)


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def incremental_configs(
    current: dict[str, str], defaults: dict[str, str], changes: list[Change]
) -> dict[str, str]:
    """A topic's explicit settings after IncrementalAlterConfigs `changes`, as Kafka
    applies them: APPEND and SUBTRACT start from the current value (the default when the
    topic has none of its own) and keep each list item once. INVALID_REQUEST for a key
    named twice, an unknown operation, a null value to SET, APPEND or SUBTRACT, or APPEND
    or SUBTRACT on a setting that is not a list."""
    names = [name for name, _, _ in changes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise _invalid_request(f"duplicate config keys: {', '.join(duplicates)}")
    configs = dict(current)
    for name, operation, value in changes:
        if operation == OP_DELETE:
            configs.pop(name, None)
            continue
        if operation not in (OP_SET, OP_APPEND, OP_SUBTRACT):
            raise _invalid_request(f"unknown config operation {operation} for {name}")
        if value is None:
            raise _invalid_request(f"null value not supported for {name}")
        if operation == OP_SET:
            configs[name] = value
            continue
        if name not in LIST_CONFIGS:
            verb = "append" if operation == OP_APPEND else "subtract"
            raise _invalid_request(f"config value {verb} is not allowed for config key {name}")
        items = _split(configs.get(name, defaults.get(name, "")))
        if operation == OP_APPEND:
            items += [item for item in _split(value) if item not in items]
        else:
            removed = set(_split(value))
            items = [item for item in items if item not in removed]
        configs[name] = ",".join(items)
    return configs


def replacement_configs(changes: list[Change]) -> dict[str, str]:
    """A topic's explicit settings after AlterConfigs: exactly the ones it names.
    INVALID_REQUEST for a key named twice or a null value."""
    configs: dict[str, str] = {}
    for name, _, value in changes:
        if name in configs:
            raise _invalid_request(f"duplicate config key {name}")
        if value is None:
            raise _invalid_request(f"null value not supported for {name}")
        configs[name] = value
    return configs


Apply = Callable[[Topic, list[Change]], dict[str, str]]


def handle_incremental_alter_configs(ctx: RequestContext) -> Pending:
    defaults = {name: spec.default for name, spec in ctx.broker.config_specs.items()}

    def apply(topic: Topic, changes: list[Change]) -> dict[str, str]:
        return incremental_configs(topic.configs, defaults, changes)

    request = decode_request(ctx.header, ctx.frame)
    resources = [
        (
            int(r.resource_type),
            str(r.resource_name),
            [(str(c.name), int(c.config_operation), c.value) for c in r.configs or []],
        )
        for r in request.resources or []
    ]
    return _alter(
        ctx, resources, bool(request.validate_only), apply, IncrementalAlterConfigsResponse
    )


def handle_alter_configs(ctx: RequestContext) -> Pending:
    def apply(topic: Topic, changes: list[Change]) -> dict[str, str]:
        return replacement_configs(changes)

    request = decode_request(ctx.header, ctx.frame)
    resources = [
        (
            int(r.resource_type),
            str(r.resource_name),
            [(str(c.name), OP_SET, c.value) for c in r.configs or []],
        )
        for r in request.resources or []
    ]
    return _alter(ctx, resources, bool(request.validate_only), apply, AlterConfigsResponse)


def _alter(
    ctx: RequestContext,
    resources: list[tuple[int, str, list[Change]]],
    validate_only: bool,
    apply: Apply,
    response_cls: Any,
) -> Pending:
    header = ctx.header
    keys = [(kind, name) for kind, name, _ in resources]

    async def finish() -> Response:
        deadline = Deadline(0)
        results = []
        for kind, name, changes in resources:
            error, message = 0, None
            try:
                if keys.count((kind, name)) > 1:
                    raise _invalid_request(f"resource {name!r} is named more than once")
                if kind == RESOURCE_TOPIC:
                    await _alter_topic(ctx, name, changes, validate_only, apply, deadline)
                elif kind in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
                    _alter_broker(ctx, kind, name, changes)
                else:
                    raise _invalid_request(f"resource type {kind} is not supported")
            except TopicError as exc:
                error, message = int(exc.error), str(exc)
                log.info(
                    "%s of resource type %d %r from %s refused: %s",
                    api_name(header.api_key),
                    kind,
                    name,
                    header.client_id,
                    exc,
                )
            results.append(
                response_cls.AlterConfigsResourceResponse(
                    error_code=error,
                    error_message=message,
                    resource_type=kind,
                    resource_name=name,
                )
            )
        response = response_cls(throttle_time_ms=0, responses=results, version=header.api_version)
        return encode_response(header, response)

    return finish


async def _alter_topic(
    ctx: RequestContext,
    name: str,
    changes: list[Change],
    validate_only: bool,
    apply: Apply,
    deadline: Deadline,
) -> None:
    """Check the change as Kafka does (authorization, the topic, then the settings) and,
    unless `validate_only`, make it: on a cluster through the metadata group."""
    if not ctx.may_topic(Operation.ALTER_CONFIGS, name):
        raise TopicError(
            ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"may not alter the configs of {name!r}"
        )
    broker = ctx.broker
    topic = broker.catalog.get(name)
    if topic is None:
        raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
    configs = apply(topic, changes)
    validate_configs(broker.config_specs, configs)
    if validate_only or configs == topic.configs:
        return
    altered = dataclasses.replace(topic, configs=configs)
    cluster = broker.cluster
    if cluster is not None:
        await cluster.update_topic(altered, timeout_s=deadline.left_s())
    else:
        broker.update_topic(altered)
    log.info("topic %s configs changed by %s: %s", name, ctx.principal or "anonymous", configs)


def _alter_broker(ctx: RequestContext, kind: int, name: str, changes: list[Change]) -> None:
    """VDL has no dynamic broker configs: every change is refused, after the checks Kafka
    makes first (ALTER_CONFIGS on the cluster; a broker id this node answers for)."""
    if not ctx.may_cluster(Operation.ALTER_CONFIGS):
        raise TopicError(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "may not alter the configs of brokers"
        )
    if name not in ("", str(ctx.node.node_id)):
        raise _invalid_request(
            f"unexpected broker id, expected {ctx.node.node_id} or empty string, but got {name}"
        )
    if changes:
        what = "broker loggers" if kind == RESOURCE_BROKER_LOGGER else "broker configs"
        keys = ", ".join(sorted({change[0] for change in changes}))
        raise TopicError(
            ErrorCode.INVALID_CONFIG,
            f"cannot update these configs dynamically: {keys} (VDL has no dynamic {what}; "
            f"they are set by the node's flags)",
        )
