"""Topic definitions and their settings, persisted in the MetaStore.

Setting names and defaults follow Kafka's topic configs, so admin tools and
DescribeConfigs show what Kafka users expect.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vdl.backends.api import MetaStore
from vdl.log.compaction import CLEANUP_POLICIES
from vdl.log.error_codes import ErrorCode

_TOPIC_KEY = b"topic/"
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_LONG_MAX = 2**63 - 1


class TopicError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class ConfigSpec:
    default: str
    kind: type  # int, float (a ratio in [0, 1]) or str
    choices: tuple[str, ...] = ()
    minimum: int | None = None  # the smallest value allowed (int settings)
    # Values Kafka takes that VDL refuses, and why (INVALID_CONFIG names the reason).
    refused: tuple[str, ...] = ()
    reason: str = ""


def topic_config_specs(
    *, retention_ms: int, retention_bytes: int, segment_bytes: int, max_message_bytes: int
) -> dict[str, ConfigSpec]:
    """The topic settings VDL honours, with the node's defaults."""
    return {
        # compact and compact,delete: log compaction (vdl/log/compaction.py).
        "cleanup.policy": ConfigSpec("delete", str, CLEANUP_POLICIES),
        "delete.retention.ms": ConfigSpec("86400000", int, minimum=0),
        "min.cleanable.dirty.ratio": ConfigSpec("0.5", float),
        "min.compaction.lag.ms": ConfigSpec("0", int, minimum=0),
        # A record is cleanable at most this long after it was written (KIP-354); for a
        # compacted topic the active segment rolls by it too. Kafka's default: no limit.
        "max.compaction.lag.ms": ConfigSpec(str(_LONG_MAX), int, minimum=1),
        # Roll the active segment once a batch is this much newer than its first one
        # (by batch timestamps, vdl/backends/segment/store.py). Kafka's default: 7 days.
        "segment.ms": ConfigSpec("604800000", int, minimum=1),
        "retention.ms": ConfigSpec(str(retention_ms), int),
        "retention.bytes": ConfigSpec(str(retention_bytes), int),
        "segment.bytes": ConfigSpec(str(segment_bytes), int),
        "max.message.bytes": ConfigSpec(str(max_message_bytes), int),
        "message.timestamp.type": ConfigSpec("CreateTime", str, ("CreateTime", "LogAppendTime")),
        # How far a CreateTime record's timestamp may lie before / after the leader's clock
        # (KIP-937); the older difference setting stands for both when they are left at
        # their default. Kafka's defaults: no limit (Long.MAX_VALUE).
        "message.timestamp.before.max.ms": ConfigSpec(str(_LONG_MAX), int, minimum=0),
        "message.timestamp.after.max.ms": ConfigSpec(str(_LONG_MAX), int, minimum=0),
        "message.timestamp.difference.max.ms": ConfigSpec(str(_LONG_MAX), int, minimum=0),
        # Not Kafka's: the data centre (a node's --dc) whose nodes should lead the
        # partitions when they are healthy (VDL 3.2, vdl/cluster/placement_leader.py).
        "preferred.dc": ConfigSpec("", str),
        # Kafka's default, "producer", keeps batches as the producer compressed them; VDL
        # stores them only that way (recompressing on append is not done).
        "compression.type": ConfigSpec(
            "producer",
            str,
            ("producer",),
            refused=("uncompressed", "gzip", "snappy", "lz4", "zstd"),
            reason="VDL keeps record batches as the producer compressed them "
            "(compression.type=producer); set compression.type on the producer instead",
        ),
    }


def validate_topic_name(name: str) -> None:
    if not _LEGAL_NAME.match(name) or name in (".", ".."):
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name {name!r} must be 1-249 characters of [a-zA-Z0-9._-]",
        )


def validate_configs(specs: Mapping[str, ConfigSpec], configs: Mapping[str, str]) -> None:
    for key, value in configs.items():
        spec = specs.get(key)
        if spec is None:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"unknown topic config {key!r}")
        if spec.kind is int:
            try:
                number = int(value)
            except ValueError:
                raise TopicError(
                    ErrorCode.INVALID_CONFIG, f"{key} must be an integer, got {value!r}"
                ) from None
            if spec.minimum is not None and number < spec.minimum:
                raise TopicError(
                    ErrorCode.INVALID_CONFIG, f"{key} must be at least {spec.minimum}, got {number}"
                )
        if spec.kind is float:
            try:
                ratio = float(value)
            except ValueError:
                ratio = -1.0
            if not 0.0 <= ratio <= 1.0:
                raise TopicError(
                    ErrorCode.INVALID_CONFIG, f"{key} must be a number in [0, 1], got {value!r}"
                )
        if value in spec.refused:
            raise TopicError(
                ErrorCode.INVALID_CONFIG, f"{key}={value} is not supported: {spec.reason}"
            )
        if spec.choices and value not in spec.choices:
            raise TopicError(
                ErrorCode.INVALID_CONFIG, f"{key} must be one of {', '.join(spec.choices)}"
            )
    _check_compaction_lags(specs, configs)


def _check_compaction_lags(specs: Mapping[str, ConfigSpec], configs: Mapping[str, str]) -> None:
    """min.compaction.lag.ms may not exceed max.compaction.lag.ms (Kafka refuses the pair
    as a conflict, KIP-354)."""
    if "min.compaction.lag.ms" not in specs or "max.compaction.lag.ms" not in specs:
        return
    least = int(configs.get("min.compaction.lag.ms", specs["min.compaction.lag.ms"].default))
    most = int(configs.get("max.compaction.lag.ms", specs["max.compaction.lag.ms"].default))
    if least > most:
        raise TopicError(
            ErrorCode.INVALID_CONFIG,
            f"conflicting topic configs: min.compaction.lag.ms ({least}) is greater than "
            f"max.compaction.lag.ms ({most})",
        )


@dataclass(frozen=True, slots=True)
class TopicConsumer:
    """A consumer registered with a topic (YDB read rule). Its committed offsets live in the
    shared offsets store under the same name a Kafka consumer group would use."""

    name: str
    important: bool = False
    read_from_ms: int = 0
    codecs: tuple[int, ...] = ()
    attributes: dict[str, str] = field(default_factory=dict)

    def to_doc(self) -> dict[str, object]:
        return {
            "name": self.name,
            "important": self.important,
            "read_from_ms": self.read_from_ms,
            "codecs": list(self.codecs),
            "attributes": self.attributes,
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> TopicConsumer:
        return cls(
            doc["name"],
            bool(doc.get("important", False)),
            int(doc.get("read_from_ms", 0)),
            tuple(int(c) for c in doc.get("codecs", ())),
            dict(doc.get("attributes", {})),
        )


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    partitions: int
    topic_id: uuid.UUID
    # Only the settings given explicitly; defaults come from the node's specs.
    configs: dict[str, str] = field(default_factory=dict)
    consumers: tuple[TopicConsumer, ...] = ()
    # YDB codec ids writers may use; empty means any codec the server understands.
    supported_codecs: tuple[int, ...] = ()
    attributes: dict[str, str] = field(default_factory=dict)
    # How many partitions a YDB writer without a partition id is hashed over: the count
    # the topic had before it first grew (0 while it never did), so a writer keeps its
    # partition, and its deduplication state, across reconnects after partitions are
    # added (as YDB keeps a producer's partition; new partitions take writers that name
    # them, and Kafka producers).
    writer_partitions: int = 0

    def consumer(self, name: str) -> TopicConsumer | None:
        for consumer in self.consumers:
            if consumer.name == name:
                return consumer
        return None

    @property
    def hashed_partitions(self) -> int:
        """The partitions a YDB writer without a partition id is hashed over."""
        return self.writer_partitions or self.partitions

    def grown(self, count: int) -> Topic:
        """This topic with `count` partitions (more than it has)."""
        return replace(self, partitions=count, writer_partitions=self.hashed_partitions)

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "name": self.name,
            "partitions": self.partitions,
            "id": str(self.topic_id),
            "configs": self.configs,
            "consumers": [c.to_doc() for c in self.consumers],
            "supported_codecs": list(self.supported_codecs),
            "attributes": self.attributes,
        }
        if self.writer_partitions:
            doc["writer_partitions"] = self.writer_partitions
        return json.dumps(doc).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Topic:
        doc = json.loads(raw)
        # Records written before consumers existed simply lack the newer keys.
        return cls(
            doc["name"],
            doc["partitions"],
            uuid.UUID(doc["id"]),
            doc["configs"],
            tuple(TopicConsumer.from_doc(c) for c in doc.get("consumers", ())),
            tuple(int(c) for c in doc.get("supported_codecs", ())),
            dict(doc.get("attributes", {})),
            int(doc.get("writer_partitions", 0)),
        )


def validate_growth(topic: Topic, count: int, max_partitions: int) -> None:
    """May `topic` grow to `count` partitions? INVALID_PARTITIONS if that is no increase or
    above `max_partitions` (Kafka's CreatePartitions answers, KIP-195)."""
    if count > max_partitions:
        raise TopicError(
            ErrorCode.INVALID_PARTITIONS,
            f"partitions must be at most {max_partitions}, got {count}",
        )
    if count == topic.partitions:
        raise TopicError(
            ErrorCode.INVALID_PARTITIONS, f"topic already has {topic.partitions} partition(s)"
        )
    if count < topic.partitions:
        raise TopicError(
            ErrorCode.INVALID_PARTITIONS,
            f"topic {topic.name} currently has {topic.partitions} partition(s); "
            f"{count} would not be an increase",
        )


def validate_assignment(
    assignments: Sequence[Sequence[int]],
    added: int,
    replication_factor: int,
    brokers: Collection[int],
) -> list[list[int]]:
    """A manual replica assignment of `added` new partitions, checked as Kafka checks
    CreatePartitions' (INVALID_REPLICA_ASSIGNMENT): one list per new partition, each of
    `replication_factor` distinct known brokers."""
    if len(assignments) != added:
        raise TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"attempted to add {added} additional partition(s), but "
            f"{len(assignments)} assignment(s) were specified",
        )
    result = []
    for replicas in assignments:
        ids = [int(n) for n in replicas]
        if len(ids) != replication_factor:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"the manual partition assignment includes a partition with {len(ids)} "
                f"replica(s), but the topic's partitions have {replication_factor}",
            )
        if len(set(ids)) != len(ids):
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"the manual partition assignment {ids} names a broker more than once",
            )
        unknown = [n for n in ids if n not in brokers]
        if unknown:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"the manual partition assignment includes broker(s) {unknown}, "
                f"but no such broker is registered",
            )
        result.append(ids)
    return result


class TopicCatalog:
    """The durable list of topics."""

    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta
        self._topics = {t.name: t for t in self._load()}

    def _load(self) -> Iterator[Topic]:
        for _key, value in self._meta.scan(_TOPIC_KEY):
            yield Topic.decode(value)

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def all(self) -> list[Topic]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def add(self, topic: Topic) -> None:
        if topic.name in self._topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} exists")
        self._meta.put(_TOPIC_KEY + topic.name.encode(), topic.encode())
        self._topics[topic.name] = topic

    def update(self, topic: Topic) -> None:
        """Replace a topic's definition (same name; partitions only ever grow), durably: one
        record, written at once."""
        if topic.name not in self._topics:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic.name!r}")
        self._meta.put(_TOPIC_KEY + topic.name.encode(), topic.encode())
        self._topics[topic.name] = topic

    def remove(self, name: str, also_delete: Sequence[bytes] = ()) -> Topic:
        """Forget a topic, durably; `also_delete` (keys of what belongs to it, such as its
        committed offsets) go in the same atomic batch."""
        topic = self._topics.pop(name, None)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        self._meta.write_batch({}, [_TOPIC_KEY + name.encode(), *also_delete])
        return topic
