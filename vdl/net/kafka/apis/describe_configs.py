"""DescribeConfigs for topics and for this broker, with truthful config sources.

kafka-python hides DEFAULT_CONFIG entries unless asked, so the source must say which
settings were given explicitly.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeConfigsResponse

from vdl.broker.topics import ConfigSpec
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_TOPIC_CONFIG = 1
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5
# DescribeConfigs v3 config types (KIP-569).
TYPE_STRING = 2
TYPE_LONG = 5
TYPE_DOUBLE = 6
TYPE_LIST = 7
_LISTS = frozenset({"cleanup.policy"})

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = _Result.DescribeConfigsResourceResult


def _type(name: str, spec: ConfigSpec) -> int:
    if name in _LISTS:
        return TYPE_LIST
    if spec.kind is int:
        return TYPE_LONG
    return TYPE_DOUBLE if spec.kind is float else TYPE_STRING


def _entry(name: str, value: str, source: int, config_type: int) -> Any:
    return _Entry(
        name=name,
        value=value,
        read_only=source != SOURCE_TOPIC_CONFIG and source != SOURCE_DEFAULT_CONFIG,
        config_source=source,
        is_default=source == SOURCE_DEFAULT_CONFIG,
        is_sensitive=False,
        synonyms=[],
        config_type=config_type,
        documentation=None,
    )


def handle_describe_configs(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    broker = ctx.broker
    results = []
    for resource in request.resources:
        keys = resource.configuration_keys
        entries: list[Any] = []
        error, message = 0, None
        if resource.resource_type == RESOURCE_TOPIC:
            topic = broker.catalog.get(resource.resource_name)
            if not ctx.may_topic(Operation.DESCRIBE, resource.resource_name):
                error = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif topic is None:
                error = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                message = f"no topic {resource.resource_name!r}"
            else:
                for name, spec in broker.config_specs.items():
                    if keys is not None and name not in keys:
                        continue
                    explicit = name in topic.configs
                    entries.append(
                        _entry(
                            name,
                            topic.configs[name] if explicit else spec.default,
                            SOURCE_TOPIC_CONFIG if explicit else SOURCE_DEFAULT_CONFIG,
                            _type(name, spec),
                        )
                    )
        elif resource.resource_type == RESOURCE_BROKER:
            if not ctx.may_cluster(Operation.DESCRIBE):
                error = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            elif resource.resource_name not in ("", str(ctx.node.node_id)):
                error = int(ErrorCode.INVALID_REQUEST)
                message = f"this node is broker {ctx.node.node_id}"
            else:
                for name, spec in broker.config_specs.items():
                    if keys is None or name in keys:
                        entries.append(
                            _entry(
                                name, spec.default, SOURCE_STATIC_BROKER_CONFIG, _type(name, spec)
                            )
                        )
        else:
            error = int(ErrorCode.INVALID_REQUEST)
            message = f"resource type {resource.resource_type} is not supported"
        results.append(
            _Result(
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=entries,
            )
        )
    response = DescribeConfigsResponse(throttle_time_ms=0, results=results, version=ctx.version)
    return ready(encode_response(ctx.header, response))
