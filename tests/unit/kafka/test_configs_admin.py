"""IncrementalAlterConfigs, AlterConfigs, DescribeCluster and DescribeLogDirs on one node,
through dispatch, against a real Broker over real stores (no cluster: the path where the
change is written by this node's broker itself)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.unit.kafka.kafka_oracle import kp_batch, kp_frame
from vdl.backends.registry import open_meta_store
from vdl.broker.broker import Broker
from vdl.broker.topics import TopicError, topic_config_specs
from vdl.log.error_codes import ErrorCode
from vdl.log.flusher import Flusher
from vdl.log.record_batch import parse_batch_header
from vdl.net.kafka.apis.configs_admin import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    Change,
    incremental_configs,
    replacement_configs,
)
from vdl.net.kafka.apis.context import NodeInfo, RequestContext
from vdl.net.kafka.apis.dispatch import dispatch
from vdl.net.kafka.control_codec import request_class, response_class
from vdl.net.kafka.header import parse_request_header
from vdl.net.kafka.versions import ADVERTISED, ApiKey
from vdl.security.acl import AclEntry, Authorizer, Operation, ResourceType

NODE = NodeInfo(node_id=7, host="127.0.0.1", port=9092, cluster_id="cluster-x")
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
ALICE = "User:alice"


def _versions(key: ApiKey) -> list[int]:
    low, high = ADVERTISED[key]
    return list(range(low, high + 1))


# -- the config arithmetic ----------------------------------------------------------------


def test_incremental_set_delete_append_subtract() -> None:
    defaults = {"cleanup.policy": "delete", "retention.ms": "100"}
    current = {"retention.ms": "5", "segment.bytes": "9"}
    changes = [
        ("retention.ms", OP_DELETE, None),
        ("segment.bytes", OP_SET, "10"),
        ("cleanup.policy", OP_APPEND, "compact,delete"),
    ]
    assert incremental_configs(current, defaults, changes) == {
        "segment.bytes": "10",
        "cleanup.policy": "delete,compact",
    }
    after = {"cleanup.policy": "delete,compact"}
    subtracted = incremental_configs(after, defaults, [("cleanup.policy", OP_SUBTRACT, "delete")])
    assert subtracted == {"cleanup.policy": "compact"}
    assert current == {"retention.ms": "5", "segment.bytes": "9"}  # not changed in place


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ([("retention.ms", OP_APPEND, "1")], "append is not allowed for config key retention.ms"),
        ([("retention.ms", OP_SUBTRACT, "1")], "subtract is not allowed"),
        ([("retention.ms", OP_SET, None)], "null value"),
        ([("retention.ms", 9, "1")], "unknown config operation 9"),
        ([("retention.ms", OP_SET, "1"), ("retention.ms", OP_DELETE, None)], "duplicate"),
    ],
)
def test_incremental_refusals_are_invalid_request(changes: list[Change], words: str) -> None:
    with pytest.raises(TopicError, match=words) as caught:
        incremental_configs({}, {"retention.ms": "1"}, changes)
    assert caught.value.error == ErrorCode.INVALID_REQUEST


def test_replacement_names_every_setting() -> None:
    assert replacement_configs([("a", OP_SET, "1"), ("b", OP_SET, "2")]) == {"a": "1", "b": "2"}
    refused: list[list[Change]] = [[("a", OP_SET, None)], [("a", OP_SET, "1"), ("a", OP_SET, "2")]]
    for changes in refused:
        with pytest.raises(TopicError) as caught:
            replacement_configs(changes)
        assert caught.value.error == ErrorCode.INVALID_REQUEST


# -- the handlers ---------------------------------------------------------------------------


class Node:
    """One broker over real stores, and requests to it through dispatch."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.authorizer = Authorizer((), enabled=False)
        self.principal: str | None = None
        self._correlation = itertools.count(1)

    async def call(self, key: ApiKey, version: int, /, **fields: Any) -> Any:
        request = request_class(key, version)(**fields, version=version)
        frame = kp_frame(request, correlation_id=next(self._correlation), client_id="cli")
        header = parse_request_header(frame)
        ctx = RequestContext(
            header, frame, self.broker, NODE, principal=self.principal, authorizer=self.authorizer
        )
        out = await dispatch(ctx)()
        assert isinstance(out, bytes)
        return response_class(key, version).decode(out, version=version, header=True, framed=True)

    async def incremental(
        self,
        version: int,
        *resources: tuple[int, str, list[tuple[str, int, str | None]]],
        **kw: Any,
    ) -> list[tuple[int, str | None]]:
        cls = request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
        res = cls.AlterConfigsResource
        response = await self.call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            version,
            resources=[
                res(
                    resource_type=kind,
                    resource_name=name,
                    configs=[
                        res.AlterableConfig(name=n, config_operation=op, value=v)
                        for n, op, v in configs
                    ],
                )
                for kind, name, configs in resources
            ],
            validate_only=kw.get("validate_only", False),
        )
        return [(r.error_code, r.error_message) for r in response.responses]

    async def replace(
        self, version: int, name: str, configs: dict[str, str], validate_only: bool = False
    ) -> tuple[int, str | None]:
        res = request_class(ApiKey.ALTER_CONFIGS, version).AlterConfigsResource
        response = await self.call(
            ApiKey.ALTER_CONFIGS,
            version,
            resources=[
                res(
                    resource_type=TOPIC,
                    resource_name=name,
                    configs=[res.AlterableConfig(name=k, value=v) for k, v in configs.items()],
                )
            ],
            validate_only=validate_only,
        )
        (result,) = response.responses
        return result.error_code, result.error_message


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    meta = open_meta_store(tmp_path / "meta")
    flusher = Flusher()
    specs = topic_config_specs(
        retention_ms=-1, retention_bytes=-1, segment_bytes=1 << 20, max_message_bytes=10_000
    )
    broker = Broker(tmp_path, meta, flusher, lambda: 1_800_000_000_000, config_specs=specs)
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        broker.create_topic("t", 2)
        try:
            yield Node(broker)
        finally:
            await broker.close()
            flusher.stop()
    meta.close()


@pytest.mark.parametrize("version", _versions(ApiKey.INCREMENTAL_ALTER_CONFIGS))
async def test_incremental_changes_apply_at_once(node: Node, version: int) -> None:
    broker = node.broker
    assert await node.incremental(
        version,
        (TOPIC, "t", [("retention.ms", OP_SET, "1000"), ("max.message.bytes", OP_SET, "50")]),
        validate_only=True,
    ) == [(0, None)]
    assert broker.catalog.get("t").configs == {}  # type: ignore[union-attr]
    changes: list[Change] = [
        ("retention.ms", OP_SET, "1000"),
        ("message.timestamp.type", OP_SET, "LogAppendTime"),
        ("cleanup.policy", OP_APPEND, "delete"),
    ]
    assert await node.incremental(version, (TOPIC, "t", changes)) == [(0, None)]
    topic = broker.catalog.get("t")
    assert topic is not None
    assert topic.configs == {
        "retention.ms": "1000",
        "message.timestamp.type": "LogAppendTime",
        "cleanup.policy": "delete",
    }
    # The open streams stamp appends with the append time from now on.
    stream = broker.stream("t", 1)
    batch = kp_batch(2)
    appended = stream.append(memoryview(bytearray(batch)), parse_batch_header(batch))
    assert appended.timestamp_ms == 1_800_000_000_000
    changes = [("message.timestamp.type", OP_DELETE, None), ("retention.ms", OP_DELETE, None)]
    assert await node.incremental(version, (TOPIC, "t", changes)) == [(0, None)]
    assert broker.catalog.get("t").configs == {"cleanup.policy": "delete"}  # type: ignore[union-attr]
    appended = stream.append(memoryview(bytearray(batch)), parse_batch_header(batch))
    assert appended.timestamp_ms == -1


@pytest.mark.parametrize("version", _versions(ApiKey.ALTER_CONFIGS))
async def test_alter_configs_replaces_every_override(node: Node, version: int) -> None:
    assert await node.replace(version, "t", {"retention.ms": "5", "segment.bytes": "4096"}) == (
        0,
        None,
    )
    assert await node.replace(version, "t", {"retention.bytes": "77"}, validate_only=True) == (
        0,
        None,
    )
    assert node.broker.catalog.get("t").configs == {  # type: ignore[union-attr]
        "retention.ms": "5",
        "segment.bytes": "4096",
    }
    assert await node.replace(version, "t", {"retention.bytes": "77"}) == (0, None)
    assert node.broker.catalog.get("t").configs == {"retention.bytes": "77"}  # type: ignore[union-attr]
    code, message = await node.replace(version, "t", {"retention.bytes": "lots"})
    assert code == ErrorCode.INVALID_CONFIG and "retention.bytes" in str(message)
    code, message = await node.replace(version, "nope", {"retention.bytes": "1"})
    assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_refusals_are_kafkas_and_leave_the_rest_of_the_request(node: Node) -> None:
    results = await node.incremental(
        1,
        (TOPIC, "nope", [("retention.ms", OP_SET, "1")]),
        (TOPIC, "t", [("no.such.key", OP_SET, "1")]),
        (BROKER, "7", [("log.retention.ms", OP_SET, "1")]),
        (BROKER, "8", [("log.retention.ms", OP_SET, "1")]),
        (BROKER_LOGGER, "7", [("vdl.broker", OP_SET, "DEBUG")]),
        (32, "g", [("x", OP_SET, "1")]),
    )
    codes = [code for code, _ in results]
    assert codes == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_CONFIG,
        ErrorCode.INVALID_CONFIG,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_CONFIG,
        ErrorCode.INVALID_REQUEST,
    ]
    assert "no.such.key" in str(results[1][1])
    assert "log.retention.ms" in str(results[2][1])
    # A bad value, APPEND on a setting that is not a list, a topic named twice.
    assert (await node.incremental(0, (TOPIC, "t", [("retention.ms", OP_SET, "soon")])))[0][
        0
    ] == ErrorCode.INVALID_CONFIG
    appended = await node.incremental(0, (TOPIC, "t", [("retention.ms", OP_APPEND, "1")]))
    assert appended[0][0] == ErrorCode.INVALID_REQUEST
    twice = await node.incremental(
        0, (TOPIC, "t", [("retention.ms", OP_SET, "1")]), (TOPIC, "t", [])
    )
    assert [code for code, _ in twice] == [ErrorCode.INVALID_REQUEST] * 2
    assert node.broker.catalog.get("t").configs == {}  # type: ignore[union-attr]
    # Then a good one is served.
    assert await node.incremental(0, (TOPIC, "t", [("retention.ms", OP_SET, "1")])) == [(0, None)]


async def test_alter_configs_needs_alter_configs(node: Node) -> None:
    node.principal = ALICE
    node.authorizer = Authorizer(
        [
            AclEntry(ALICE, ResourceType.TOPIC, "t", Operation.ALTER),
            AclEntry(ALICE, ResourceType.TOPIC, "u", Operation.ALTER_CONFIGS),
        ]
    )
    node.broker.create_topic("u", 1)
    results = await node.incremental(
        1,
        (TOPIC, "t", [("retention.ms", OP_SET, "1")]),
        (TOPIC, "u", [("retention.ms", OP_SET, "1")]),
        (BROKER, "7", [("log.retention.ms", OP_SET, "1")]),
    )
    assert [code for code, _ in results] == [
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        0,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ]
    assert node.broker.catalog.get("u").configs == {"retention.ms": "1"}  # type: ignore[union-attr]


@pytest.mark.parametrize("version", _versions(ApiKey.DESCRIBE_CLUSTER))
async def test_describe_cluster_names_this_node(node: Node, version: int) -> None:
    response = await node.call(
        ApiKey.DESCRIBE_CLUSTER, version, include_cluster_authorized_operations=False
    )
    assert response.error_code == 0
    assert response.cluster_id == "cluster-x"
    assert response.controller_id == 7
    assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [(7, "127.0.0.1", 9092)]
    assert response.authorized_operations is None  # not asked for
    node.principal = ALICE
    node.authorizer = Authorizer(
        [AclEntry(ALICE, ResourceType.CLUSTER, "kafka-cluster", Operation.ALTER_CONFIGS)]
    )
    response = await node.call(
        ApiKey.DESCRIBE_CLUSTER, version, include_cluster_authorized_operations=True
    )
    assert response.authorized_operations == {11}  # ALTER_CONFIGS alone
    if version >= 1:
        controllers = await node.call(
            ApiKey.DESCRIBE_CLUSTER,
            version,
            include_cluster_authorized_operations=False,
            endpoint_type=2,
        )
        assert controllers.error_code == 119  # UNSUPPORTED_ENDPOINT_TYPE
        assert controllers.brokers == []


@pytest.mark.parametrize("version", _versions(ApiKey.DESCRIBE_LOG_DIRS))
async def test_describe_log_dirs_lists_every_replica_with_its_size(
    node: Node, version: int
) -> None:
    batch = kp_batch(5, value_size=100)
    node.broker.stream("t", 1).append(memoryview(bytearray(batch)), parse_batch_header(batch))
    response = await node.call(ApiKey.DESCRIBE_LOG_DIRS, version, topics=None)
    (log_dir,) = response.results
    assert log_dir.error_code == 0
    assert log_dir.log_dir == str(node.broker.data_dir)
    sizes = {
        (t.name, p.partition_index): p.partition_size for t in log_dir.topics for p in t.partitions
    }
    assert sizes[("t", 0)] == 0
    assert sizes[("t", 1)] >= len(batch)
    assert all(not p.is_future_key for t in log_dir.topics for p in t.partitions)
    topic = request_class(ApiKey.DESCRIBE_LOG_DIRS, version).DescribableLogDirTopic
    response = await node.call(
        ApiKey.DESCRIBE_LOG_DIRS, version, topics=[topic(topic="t", partitions=[1])]
    )
    assert [
        (t.name, [p.partition_index for p in t.partitions]) for t in response.results[0].topics
    ] == [("t", [1])]
    # Kafka's rule: DESCRIBE on the cluster, else no log dirs.
    node.principal = ALICE
    node.authorizer = Authorizer([AclEntry(ALICE, ResourceType.TOPIC, "t", Operation.DESCRIBE)])
    response = await node.call(ApiKey.DESCRIBE_LOG_DIRS, version, topics=None)
    assert response.results == []


async def test_describe_configs_types_each_setting_as_kafka_does(node: Node) -> None:
    # KIP-569: DescribeConfigs v3 says each setting's type (LONG 5, DOUBLE 6, LIST 7).
    res = request_class(ApiKey.DESCRIBE_CONFIGS, 3).DescribeConfigsResource
    response = await node.call(
        ApiKey.DESCRIBE_CONFIGS,
        3,
        resources=[res(resource_type=TOPIC, resource_name="t", configuration_keys=None)],
        include_synonyms=False,
        include_documentation=False,
    )
    (result,) = response.results
    types = {c.name: c.config_type for c in result.configs}
    assert types["retention.ms"] == 5
    assert types["min.cleanable.dirty.ratio"] == 6
    assert types["cleanup.policy"] == 7
    assert types["message.timestamp.type"] == 2
