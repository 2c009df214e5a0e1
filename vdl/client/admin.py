"""Topic administration and cluster introspection over the YDB unary RPCs.

Results are plain dataclasses, so callers (the CLI, applications) never touch protobuf.
What the node exposes today: endpoints (Discovery/ListEndpoints), the topic list
(Scheme/ListDirectory), per-partition offsets, size and serving node (DescribeTopic), and
per-consumer committed offsets (DescribeConsumer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vdl.client.connection import Connection
from vdl.net.ydb.protos import ydb_discovery_pb2, ydb_scheme_pb2, ydb_topic_pb2

_TOPIC = "/Ydb.Topic.V1.TopicService/"
_LIST_DIRECTORY = "/Ydb.Scheme.V1.SchemeService/ListDirectory"
_LIST_ENDPOINTS = "/Ydb.Discovery.V1.DiscoveryService/ListEndpoints"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: int
    host: str
    port: int
    tls: bool
    location: str


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    start_offset: int
    end_offset: int
    size_bytes: int
    node_id: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: list[PartitionInfo]
    consumers: list[str]
    retention_ms: int | None
    retention_storage_mb: int | None
    supported_codecs: list[int]

    @property
    def messages(self) -> int:
        return sum(p.end_offset - p.start_offset for p in self.partitions)


@dataclass(frozen=True, slots=True)
class ConsumerPartition:
    partition: int
    start_offset: int
    end_offset: int
    committed_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.end_offset - max(self.committed_offset, self.start_offset))


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    topic: str
    name: str
    partitions: list[ConsumerPartition]

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)


def _ms(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


class Admin:
    def __init__(self, connection: Connection, timeout: float = 30.0) -> None:
        self._connection = connection
        self._timeout = timeout

    async def _call(
        self,
        method: str,
        request: Any,
        response: Any,
        result: Any = None,
        *,
        idempotent: bool = False,
    ) -> Any:
        return await self._connection.unary(
            method, request, response, result, timeout=self._timeout, idempotent=idempotent
        )

    async def create_topic(
        self,
        path: str,
        *,
        partitions: int = 1,
        consumers: list[str] | tuple[str, ...] = (),
        retention_ms: int | None = None,
        retention_storage_mb: int | None = None,
        supported_codecs: list[int] | tuple[int, ...] = (),
    ) -> None:
        request = ydb_topic_pb2.CreateTopicRequest(path=path)
        request.partitioning_settings.min_active_partitions = partitions
        if retention_ms is not None:
            request.retention_period.FromMilliseconds(retention_ms)
        if retention_storage_mb is not None:
            request.retention_storage_mb = retention_storage_mb
        request.supported_codecs.codecs.extend(supported_codecs)
        for name in consumers:
            request.consumers.add(name=name)
        await self._call(_TOPIC + "CreateTopic", request, ydb_topic_pb2.CreateTopicResponse)

    async def alter_topic(
        self,
        path: str,
        *,
        add_consumers: list[str] | tuple[str, ...] = (),
        drop_consumers: list[str] | tuple[str, ...] = (),
        retention_ms: int | None = None,
        retention_storage_mb: int | None = None,
        supported_codecs: list[int] | None = None,
    ) -> None:
        request = ydb_topic_pb2.AlterTopicRequest(path=path)
        request.alter_partitioning_settings.SetInParent()
        if retention_ms is not None:
            request.set_retention_period.FromMilliseconds(retention_ms)
        if retention_storage_mb is not None:
            request.set_retention_storage_mb = retention_storage_mb
        if supported_codecs is not None:
            request.set_supported_codecs.codecs.extend(supported_codecs)
        for name in add_consumers:
            request.add_consumers.add(name=name)
        request.drop_consumers.extend(drop_consumers)
        await self._call(_TOPIC + "AlterTopic", request, ydb_topic_pb2.AlterTopicResponse)

    async def drop_topic(self, path: str) -> None:
        request = ydb_topic_pb2.DropTopicRequest(path=path)
        await self._call(_TOPIC + "DropTopic", request, ydb_topic_pb2.DropTopicResponse)

    async def describe_topic(self, path: str) -> TopicInfo:
        request = ydb_topic_pb2.DescribeTopicRequest(path=path, include_stats=True)
        result = await self._call(
            _TOPIC + "DescribeTopic",
            request,
            ydb_topic_pb2.DescribeTopicResponse,
            ydb_topic_pb2.DescribeTopicResult,
            idempotent=True,
        )
        partitions = [
            PartitionInfo(
                int(p.partition_id),
                int(p.partition_stats.partition_offsets.start),
                int(p.partition_stats.partition_offsets.end),
                int(p.partition_stats.store_size_bytes),
                int(p.partition_stats.partition_node_id),
            )
            for p in result.partitions
        ]
        return TopicInfo(
            name=result.self.name or path,
            partitions=partitions,
            consumers=[c.name for c in result.consumers],
            retention_ms=_ms(result.retention_period)
            if result.HasField("retention_period")
            else None,
            retention_storage_mb=int(result.retention_storage_mb) or None,
            supported_codecs=list(result.supported_codecs.codecs),
        )

    async def describe_consumer(self, path: str, consumer: str) -> ConsumerInfo:
        request = ydb_topic_pb2.DescribeConsumerRequest(
            path=path, consumer=consumer, include_stats=True
        )
        result = await self._call(
            _TOPIC + "DescribeConsumer",
            request,
            ydb_topic_pb2.DescribeConsumerResponse,
            ydb_topic_pb2.DescribeConsumerResult,
            idempotent=True,
        )
        partitions = [
            ConsumerPartition(
                int(p.partition_id),
                int(p.partition_stats.partition_offsets.start),
                int(p.partition_stats.partition_offsets.end),
                int(p.partition_consumer_stats.committed_offset),
            )
            for p in result.partitions
        ]
        return ConsumerInfo(path, consumer, partitions)

    async def list_topics(self) -> list[str]:
        request = ydb_scheme_pb2.ListDirectoryRequest(path=self._connection.config.database)
        result = await self._call(
            _LIST_DIRECTORY,
            request,
            ydb_scheme_pb2.ListDirectoryResponse,
            ydb_scheme_pb2.ListDirectoryResult,
            idempotent=True,
        )
        return sorted(
            entry.name for entry in result.children if entry.type == ydb_scheme_pb2.Entry.TOPIC
        )

    async def list_nodes(self) -> list[NodeInfo]:
        request = ydb_discovery_pb2.ListEndpointsRequest(database=self._connection.config.database)
        result = await self._call(
            _LIST_ENDPOINTS,
            request,
            ydb_discovery_pb2.ListEndpointsResponse,
            ydb_discovery_pb2.ListEndpointsResult,
            idempotent=True,
        )
        return [
            NodeInfo(int(e.node_id), e.address, int(e.port), bool(e.ssl), e.location)
            for e in result.endpoints
        ]
