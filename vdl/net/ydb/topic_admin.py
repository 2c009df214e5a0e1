"""``Ydb.Topic.V1`` control plane: Create/Describe/Alter/Drop topic, DescribePartition,
DescribeConsumer, CommitOffset (and UpdateOffsetsInTransaction, answered UNSUPPORTED).

A YDB topic is a VDL topic; its consumers and codec list are stored with it (see
``vdl.broker.topics``). Retention maps onto the Kafka topic settings ``retention.ms`` and
``retention.bytes``. No setting is accepted and then ignored: those this server does not
enforce (auto-partitioning, a partition count limit or maximum other than the partition
count, write-speed limits, metering mode, metrics level, content-based deduplication, an
important consumer, a consumer's availability period) are refused with BAD_REQUEST naming
the setting when a request asks for anything but their default (the value the SDK sends
when the user did not ask: unset or zero), so DescribeTopic shows what is in force.
AlterTopic's ``set_min_active_partitions`` above the partition count adds partitions, the
way Kafka's CreatePartitions does (one metadata command on a cluster).

On a cluster, Create/Alter/Drop are metadata-group commands run from whichever node the
client reached (see ``vdl.net.ydb.cluster``); statistics cover the replicas this node holds.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Any

import trio

from vdl.broker.broker import MAX_PARTITIONS, Broker
from vdl.broker.topics import Topic, TopicConsumer, TopicError, validate_configs
from vdl.log.error_codes import ErrorCode
from vdl.log.stream import LogStream
from vdl.log.ydb_mapping import CODEC_GZIP, CODEC_RAW, CODEC_ZSTD, is_custom_codec
from vdl.net.grpc import ServerContext
from vdl.net.ydb.cluster import YdbCluster
from vdl.net.ydb.offsets import ConsumerOffsets
from vdl.net.ydb.operation import StatusIds, YdbError
from vdl.net.ydb.paths import topic_name, topic_path
from vdl.net.ydb.protos import ydb_scheme_pb2, ydb_topic_pb2

# What the write path stores: RAW, GZIP and ZSTD decoded, custom codecs (>= 10000) as the
# writer encoded them. LZOP is refused: the data could not be stored decoded.
SERVED_CODECS = (CODEC_RAW, CODEC_GZIP, CODEC_ZSTD)
_MIB = 1024 * 1024
_AUTO_PARTITIONING_OFF = (0, 1)  # UNSPECIFIED, DISABLED
_REPLICA_CATCH_UP_S = 2.0
# A one-node server has no Raft term for its partitions: its leader never changes.
_SINGLE_NODE_GENERATION = 1

log = logging.getLogger(__name__)


def _refuse(setting: str, value: object) -> YdbError:
    """BAD_REQUEST for a setting this server does not enforce (one log line)."""
    log.info("refused a topic setting: %s = %s", setting, value)
    return YdbError(
        StatusIds.BAD_REQUEST,
        f"{setting} is not supported by this server (asked for {value}; only the default)",
    )


def _enum_name(enum: Any, value: int) -> str:
    """The proto enum's name for `value`; a raw client may send numbers the enum lacks."""
    try:
        return str(enum.Name(value))
    except ValueError:
        return str(value)


def _check_auto_partitioning(strategy: int, speed: Any, alter: bool) -> None:
    """Auto-partitioning (ydb_topic.proto AutoPartitioningSettings): only off. Its
    write-speed knobs only steer splitting, so they too must be left at their defaults."""
    if strategy not in _AUTO_PARTITIONING_OFF:
        raise _refuse(
            "auto-partitioning", _enum_name(ydb_topic_pb2.AutoPartitioningStrategy, strategy)
        )
    prefix = "set_" if alter else ""
    for field in ("stabilization_window", "up_utilization_percent", "down_utilization_percent"):
        name = prefix + field
        if alter and not speed.HasField(name):
            continue
        value = getattr(speed, name)
        if field == "stabilization_window":
            if value.seconds or value.nanos:
                raise _refuse(f"auto-partitioning {field}", f"{duration_ms(value)} ms")
        elif value:
            raise _refuse(f"auto-partitioning {field}", value)


def _check_partition_limits(max_active: int, count_limit: int, count: int) -> None:
    """Without auto-partitioning the active partitions are all the partitions: a maximum or
    a limit (0 is the default) must be the partition count itself."""
    if max_active and max_active != count:
        raise _refuse(f"max_active_partitions other than the partition count ({count})", max_active)
    if count_limit and count_limit != count:
        raise _refuse(
            f"partition_count_limit other than the partition count ({count})", count_limit
        )


def _check_write_speed(speed: int | None, burst: int | None) -> None:
    """Per-partition write-speed limits are not enforced: 0 (the default) only."""
    if speed:
        raise _refuse("partition_write_speed_bytes_per_second", speed)
    if burst:
        raise _refuse("partition_write_burst_bytes", burst)


def _check_metering(mode: int) -> None:
    if mode != ydb_topic_pb2.METERING_MODE_UNSPECIFIED:
        raise _refuse("metering mode", _enum_name(ydb_topic_pb2.MeteringMode, mode))


def duration_ms(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def _check_codecs(codecs: Iterable[int]) -> tuple[int, ...]:
    result = tuple(dict.fromkeys(int(c) for c in codecs))
    for codec in result:
        if codec not in SERVED_CODECS and not is_custom_codec(codec):
            raise YdbError(
                StatusIds.BAD_REQUEST,
                f"codec {codec} is not supported; use RAW (1), GZIP (2), ZSTD (4) "
                f"or a custom codec (10000 and above)",
            )
    return result


def _consumer_from_proto(message: Any) -> TopicConsumer:
    if not message.name:
        raise YdbError(StatusIds.BAD_REQUEST, "a consumer needs a name")
    if message.important:
        # Retention here deletes by age and size only, whoever has not read.
        raise _refuse(f"important consumer ({message.name})", True)
    if message.HasField("availability_period"):
        raise _refuse(
            f"consumer availability_period ({message.name})",
            f"{duration_ms(message.availability_period)} ms",
        )
    read_from = 0
    if message.HasField("read_from"):
        read_from = message.read_from.seconds * 1000 + message.read_from.nanos // 1_000_000
    return TopicConsumer(
        message.name,
        False,
        read_from,
        _check_codecs(message.supported_codecs.codecs),
        dict(message.attributes),
    )


def _consumer_to_proto(consumer: TopicConsumer) -> Any:
    # `important` is never in force (see _consumer_from_proto), whatever was stored.
    message = ydb_topic_pb2.Consumer(
        name=consumer.name,
        important=False,
        supported_codecs=ydb_topic_pb2.SupportedCodecs(codecs=list(consumer.codecs)),
        attributes=consumer.attributes,
    )
    if consumer.read_from_ms:
        message.read_from.FromMilliseconds(consumer.read_from_ms)
    return message


def _retention_configs(configs: dict[str, str], period: Any | None, storage_mb: int | None) -> None:
    if period is not None:
        configs["retention.ms"] = str(duration_ms(period))
    if storage_mb is not None:
        configs["retention.bytes"] = str(storage_mb * _MIB) if storage_mb > 0 else "-1"


class TopicAdmin:
    def __init__(
        self,
        broker: Broker,
        offsets: ConsumerOffsets,
        database: str,
        node_id: int,
        on_topic_changed: Callable[[str], None],
        cluster: YdbCluster | None = None,
    ) -> None:
        self._broker = broker
        self._cluster = cluster
        self._offsets = offsets
        self._database = database
        self._node_id = node_id
        # Tells live read sessions that consumers or the topic itself changed.
        self._on_topic_changed = on_topic_changed

    def name_of(self, path: str) -> str:
        """The topic name a path names, whether or not the topic exists."""
        return topic_name(path, self._database)

    def topic(self, path: str) -> Topic:
        """The topic a path names; SCHEME_ERROR when it does not exist."""
        name = topic_name(path, self._database)
        topic = self._broker.catalog.get(name)
        if topic is None:
            raise YdbError(StatusIds.SCHEME_ERROR, f"topic {path!r} does not exist")
        return topic

    async def create_topic(self, request: Any, context: ServerContext) -> Any:
        name = topic_name(request.path, self._database)
        settings = request.partitioning_settings
        partitions = int(settings.min_active_partitions) or 1
        auto = settings.auto_partitioning_settings
        _check_auto_partitioning(int(auto.strategy), auto.partition_write_speed, alter=False)
        _check_partition_limits(
            int(settings.max_active_partitions), int(settings.partition_count_limit), partitions
        )
        _check_write_speed(
            int(request.partition_write_speed_bytes_per_second),
            int(request.partition_write_burst_bytes),
        )
        _check_metering(int(request.metering_mode))
        if request.HasField("metrics_level"):
            raise _refuse("metrics_level", request.metrics_level)
        if request.content_based_deduplication:
            raise _refuse("content_based_deduplication", True)
        configs: dict[str, str] = {}
        _retention_configs(
            configs,
            request.retention_period if request.HasField("retention_period") else None,
            int(request.retention_storage_mb) or None,
        )
        consumers = [_consumer_from_proto(c) for c in request.consumers]
        try:
            topic = self._broker.create_topic(
                name,
                partitions,
                configs,
                consumers=consumers,
                supported_codecs=_check_codecs(request.supported_codecs.codecs),
                attributes=dict(request.attributes),
                validate_only=self._cluster is not None,
            )
            if self._cluster is not None:
                await self._cluster.create_topic(topic)
        except TopicError as exc:
            if exc.error != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
            # YDB answers SUCCESS and leaves the topic as it is: the scheme shard accepts an
            # existing path of the same type (StatusAlreadyExists), which the topic service
            # reports as success; the ydb SDK's control-plane tests create a topic twice.
        return ydb_topic_pb2.CreateTopicResult()

    def _local_stream(self, topic: Topic, partition: int) -> LogStream | None:
        """This node's replica of the partition (on a cluster a node may hold none)."""
        try:
            return self._broker.stream(topic.name, partition)
        except TopicError:
            return None

    def _partition_stats(self, topic: Topic, partition: int) -> Any:
        node = self._node_id
        if self._cluster is not None:
            node = self._cluster.leader_of(topic.name, partition)
        stream = self._local_stream(topic, partition)
        if stream is None:
            return ydb_topic_pb2.PartitionStats(partition_node_id=node)
        return ydb_topic_pb2.PartitionStats(
            partition_offsets=ydb_topic_pb2.OffsetsRange(
                start=stream.log_start_offset, end=stream.high_watermark
            ),
            store_size_bytes=stream.store.size_bytes(),
            partition_node_id=node,
        )

    def _location(self, topic: Topic, partition: int) -> Any | None:
        """YDB's PartitionLocation: the leader's node id and a generation that grows when the
        leader changes (the Raft term it leads in); None while no leader is known."""
        if self._cluster is None:
            return ydb_topic_pb2.PartitionLocation(
                node_id=self._node_id, generation=_SINGLE_NODE_GENERATION
            )
        leader, term = self._cluster.leader_location(topic.name, partition)
        if leader < 0:
            return None
        return ydb_topic_pb2.PartitionLocation(node_id=leader, generation=term)

    def _entry(self, name: str) -> Any:
        return ydb_scheme_pb2.Entry(name=name, owner="", type=ydb_scheme_pb2.Entry.TOPIC)

    async def describe_topic(self, request: Any, context: ServerContext) -> Any:
        topic = self.topic(request.path)
        result = ydb_topic_pb2.DescribeTopicResult(
            self=self._entry(topic.name),
            partitioning_settings=ydb_topic_pb2.PartitioningSettings(
                min_active_partitions=topic.partitions,
                max_active_partitions=topic.partitions,
                partition_count_limit=topic.partitions,
                auto_partitioning_settings=ydb_topic_pb2.AutoPartitioningSettings(
                    strategy=ydb_topic_pb2.AUTO_PARTITIONING_STRATEGY_DISABLED
                ),
            ),
            supported_codecs=ydb_topic_pb2.SupportedCodecs(codecs=list(topic.supported_codecs)),
            attributes=topic.attributes,
            consumers=[_consumer_to_proto(c) for c in topic.consumers],
        )
        retention_ms = int(self._broker.topic_config(topic, "retention.ms"))
        if retention_ms >= 0:
            result.retention_period.FromMilliseconds(retention_ms)
        retention_bytes = int(self._broker.topic_config(topic, "retention.bytes"))
        if retention_bytes > 0:
            result.retention_storage_mb = max(1, retention_bytes // _MIB)
        total = 0
        for partition in range(topic.partitions):
            info = result.partitions.add(partition_id=partition, active=True)
            if request.include_stats:
                info.partition_stats.CopyFrom(self._partition_stats(topic, partition))
                total += info.partition_stats.store_size_bytes
            location = self._location(topic, partition) if request.include_location else None
            if location is not None:
                info.partition_location.CopyFrom(location)
        if request.include_stats:
            result.topic_stats.store_size_bytes = total
        return result

    async def describe_partition(self, request: Any, context: ServerContext) -> Any:
        topic = self.topic(request.path)
        partition = int(request.partition_id)
        if not 0 <= partition < topic.partitions:
            raise YdbError(
                StatusIds.BAD_REQUEST,
                f"no partition {partition} in topic {request.path!r} "
                f"({topic.partitions} partitions)",
            )
        result = ydb_topic_pb2.DescribePartitionResult()
        info = result.partition
        info.partition_id = partition
        info.active = True
        if request.include_stats:
            info.partition_stats.CopyFrom(self._partition_stats(topic, partition))
        location = self._location(topic, partition) if request.include_location else None
        if location is not None:
            info.partition_location.CopyFrom(location)
        return result

    async def describe_consumer(self, request: Any, context: ServerContext) -> Any:
        topic = self.topic(request.path)
        consumer = topic.consumer(request.consumer)
        if consumer is None:
            raise YdbError(
                StatusIds.SCHEME_ERROR,
                f"consumer {request.consumer!r} is not registered with topic {request.path!r}",
            )
        result = ydb_topic_pb2.DescribeConsumerResult(
            self=self._entry(f"{topic.name}/{consumer.name}"),
            consumer=_consumer_to_proto(consumer),
        )
        for partition in range(topic.partitions):
            info = result.partitions.add(partition_id=partition, active=True)
            if request.include_stats:
                info.partition_stats.CopyFrom(self._partition_stats(topic, partition))
                committed = self._offsets.committed(consumer.name, topic.name, partition) or 0
                info.partition_consumer_stats.committed_offset = committed
                info.partition_consumer_stats.last_read_offset = committed
            location = self._location(topic, partition) if request.include_location else None
            if location is not None:
                info.partition_location.CopyFrom(location)
        return result

    async def alter_topic(self, request: Any, context: ServerContext) -> Any:
        topic = self.topic(request.path)
        count = self._partitions_wanted(topic, request.alter_partitioning_settings)
        _check_alter_settings(request)
        configs = dict(topic.configs)
        _retention_configs(
            configs,
            request.set_retention_period if request.HasField("set_retention_period") else None,
            (
                int(request.set_retention_storage_mb)
                if request.HasField("set_retention_storage_mb")
                else None
            ),
        )
        codecs = topic.supported_codecs
        if request.HasField("set_supported_codecs"):
            codecs = _check_codecs(request.set_supported_codecs.codecs)
        attributes = dict(topic.attributes)
        for key, value in request.alter_attributes.items():
            if value:
                attributes[key] = value
            else:
                attributes.pop(key, None)
        consumers = {c.name: c for c in topic.consumers}
        for name in request.drop_consumers:
            if consumers.pop(name, None) is None:
                raise YdbError(StatusIds.BAD_REQUEST, f"cannot drop unknown consumer {name!r}")
        for added in request.add_consumers:
            consumer = _consumer_from_proto(added)
            if consumer.name in consumers:
                raise YdbError(StatusIds.BAD_REQUEST, f"consumer {consumer.name!r} already exists")
            consumers[consumer.name] = consumer
        for change in request.alter_consumers:
            current = consumers.get(change.name)
            if current is None:
                raise YdbError(
                    StatusIds.BAD_REQUEST, f"cannot alter unknown consumer {change.name!r}"
                )
            consumers[change.name] = _alter_consumer(current, change)
        validate_configs(self._broker.config_specs, configs)
        if count > topic.partitions:
            # First the new partitions (the one command Kafka's CreatePartitions runs too),
            # then the other changes, on the grown topic.
            if self._cluster is not None:
                topic = await self._cluster.add_partitions(topic.name, count)
            else:
                topic = self._broker.add_partitions(topic.name, count)
        altered = dataclasses.replace(
            topic,
            configs=configs,
            supported_codecs=codecs,
            attributes=attributes,
            consumers=tuple(consumers.values()),
        )
        if self._cluster is not None:
            await self._cluster.update_topic(altered)
        else:
            self._broker.update_topic(altered)
        self._on_topic_changed(topic.name)
        return ydb_topic_pb2.AlterTopicResult()

    @staticmethod
    def _partitions_wanted(topic: Topic, alter: Any) -> int:
        """The partition count an AlterTopic asks for: `set_min_active_partitions` above the
        current count grows the topic; below it is refused, as YDB refuses fewer partitions
        (its scheme shard: "Invalid total groups count specified"). Without
        auto-partitioning the active count is the partition count, so a
        `set_max_active_partitions` must leave it so."""
        count = topic.partitions
        if alter.HasField("set_min_active_partitions") and alter.set_min_active_partitions:
            wanted = int(alter.set_min_active_partitions)
            if wanted < topic.partitions:
                raise YdbError(
                    StatusIds.BAD_REQUEST,
                    f"Invalid total groups count specified: {wanted} vs {topic.partitions} "
                    f"(current): partitions cannot be removed",
                )
            if wanted > MAX_PARTITIONS:
                raise YdbError(
                    StatusIds.BAD_REQUEST,
                    f"Invalid total groups count specified: {wanted} (at most {MAX_PARTITIONS})",
                )
            count = wanted
        _check_partition_limits(
            int(alter.set_max_active_partitions), int(alter.set_partition_count_limit), count
        )
        return count

    async def drop_topic(self, request: Any, context: ServerContext) -> Any:
        topic = self.topic(request.path)
        self._on_topic_changed(topic.name)
        if self._cluster is not None:
            await self._cluster.delete_topic(topic.name)
        else:
            await self._broker.delete_topic(topic.name)
        return ydb_topic_pb2.DropTopicResult()

    async def commit_offset(self, request: Any, context: ServerContext) -> Any:
        topic = self.topic(request.path)
        if topic.consumer(request.consumer) is None:
            raise YdbError(
                StatusIds.SCHEME_ERROR,
                f"consumer {request.consumer!r} is not registered with topic {request.path!r}",
            )
        if not 0 <= request.partition_id < topic.partitions:
            raise YdbError(StatusIds.BAD_REQUEST, f"no partition {request.partition_id}")
        stream = self._local_stream(topic, request.partition_id)
        if self._cluster is not None and stream is not None:
            # A follower's end lags the leader's for an instant; the client may have
            # read up to the leader's end through another node.
            with trio.move_on_after(_REPLICA_CATCH_UP_S):
                while request.offset > stream.high_watermark:
                    await self._broker.wait_for_data([stream], _REPLICA_CATCH_UP_S)
        # Without a local replica the end is unknown here: the check is left out.
        if request.offset < 0 or (stream is not None and request.offset > stream.high_watermark):
            end = stream.high_watermark if stream is not None else "unknown"
            raise YdbError(
                StatusIds.BAD_REQUEST,
                f"offset {request.offset} is beyond the end of partition "
                f"{request.partition_id} ({end})",
            )
        await self._offsets.commit(
            request.consumer, topic.name, request.partition_id, request.offset
        )
        return ydb_topic_pb2.CommitOffsetResult()

    async def update_offsets_in_transaction(self, request: Any, context: ServerContext) -> Any:
        raise YdbError(StatusIds.UNSUPPORTED, "transactions are not supported")

    def path_of(self, topic: Topic) -> str:
        return topic_path(topic.name, self._database)


def _check_alter_settings(request: Any) -> None:
    """AlterTopic's settings that are refused unless left unset or set to their default."""
    alter = request.alter_partitioning_settings
    if alter.HasField("alter_auto_partitioning_settings"):
        auto = alter.alter_auto_partitioning_settings
        strategy = int(auto.set_strategy) if auto.HasField("set_strategy") else 0
        _check_auto_partitioning(strategy, auto.set_partition_write_speed, alter=True)
    _check_write_speed(
        (
            int(request.set_partition_write_speed_bytes_per_second)
            if request.HasField("set_partition_write_speed_bytes_per_second")
            else None
        ),
        (
            int(request.set_partition_write_burst_bytes)
            if request.HasField("set_partition_write_burst_bytes")
            else None
        ),
    )
    _check_metering(int(request.set_metering_mode))
    if request.HasField("set_metrics_level"):
        raise _refuse("metrics_level", request.set_metrics_level)
    if request.HasField("set_content_based_deduplication") and (
        request.set_content_based_deduplication
    ):
        raise _refuse("content_based_deduplication", True)
    for change in request.alter_consumers:
        if change.HasField("set_important") and change.set_important:
            raise _refuse(f"important consumer ({change.name})", True)
        if change.HasField("set_availability_period"):
            raise _refuse(
                f"consumer availability_period ({change.name})",
                f"{duration_ms(change.set_availability_period)} ms",
            )


def _alter_consumer(current: TopicConsumer, change: Any) -> TopicConsumer:
    read_from = current.read_from_ms
    if change.HasField("set_read_from"):
        read_from = change.set_read_from.seconds * 1000 + change.set_read_from.nanos // 1_000_000
    codecs = current.codecs
    if change.HasField("set_supported_codecs"):
        codecs = _check_codecs(change.set_supported_codecs.codecs)
    attributes = dict(current.attributes)
    for key, value in change.alter_attributes.items():
        if value:
            attributes[key] = value
        else:
            attributes.pop(key, None)
    return TopicConsumer(current.name, False, read_from, codecs, attributes)
