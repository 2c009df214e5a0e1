"""The protocol-neutral broker: topics, their log streams, producer ids, retention.

Both front ends (Kafka, YDB) call this; it knows nothing of wire formats.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from vdl.backends.api import LogRetention, LogStoreOptions, MetaStore
from vdl.backends.registry import LogBackend, open_log_store
from vdl.broker.cluster_view import ClusterView
from vdl.broker.topics import (
    ConfigSpec,
    Topic,
    TopicCatalog,
    TopicConsumer,
    TopicError,
    topic_config_specs,
    validate_assignment,
    validate_configs,
    validate_growth,
    validate_topic_name,
)
from vdl.groups.offsets import OffsetStore
from vdl.groups.service import GroupService
from vdl.log.appender import AppenderFactory, LocalAppender
from vdl.log.cleaner import clean_stream
from vdl.log.compaction import CompactionSettings, deletes, is_compacted
from vdl.log.error_codes import ErrorCode
from vdl.log.flusher import Flusher
from vdl.log.producer_state import PRODUCER_ID_EXPIRATION_MS
from vdl.log.stream import LogStream
from vdl.metrics.stages import STAGES

if TYPE_CHECKING:
    from vdl.txn.coordinator import TxnCoordinator

log = logging.getLogger(__name__)
# Entries retention removed (whole segments, by age or size), for the node's metrics.
_RETENTION_REMOVED = STAGES.counter("retention_removed_entries")

_PRODUCER_ID_KEY = b"producer-id/next"
# Where DeleteRecords moved a partition's log start: log-start/<topic id>/<partition>.
_LOG_START_PREFIX = b"log-start/"
_PRODUCER_ID_BLOCK = 1000
MAX_PARTITIONS = 10_000
# On a cluster each node hands out producer ids of its own residue class (id % this is
# the node id), so two nodes never give one id to two producers.
_NODE_ID_SPACE = 1024


class Broker:
    def __init__(
        self,
        data_dir: Path,
        meta: MetaStore,
        flusher: Flusher,
        clock_ms: Callable[[], int],
        *,
        log_backend: LogBackend = "segment",
        config_specs: Mapping[str, ConfigSpec] | None = None,
        auto_create_topics: bool = True,
        default_partitions: int = 1,
        preallocate_segments: bool = False,
        catalog: TopicCatalog | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        """`catalog`: where topics live (default: this node's MetaStore); a cluster passes
        one that mirrors the metadata group, and opens partition streams itself."""
        # The node's data directory: Kafka's log dir (DescribeLogDirs).
        self.data_dir = data_dir.resolve()
        self._streams_dir = data_dir / "streams"
        self._streams_dir.mkdir(parents=True, exist_ok=True)
        self._meta = meta
        self._flusher = flusher
        self._clock_ms = clock_ms
        self._log_backend = log_backend
        self.config_specs = dict(
            config_specs
            or topic_config_specs(
                retention_ms=-1,
                retention_bytes=-1,
                segment_bytes=64 * 1024 * 1024,
                max_message_bytes=1024 * 1024 + 12,
            )
        )
        self.auto_create_topics = auto_create_topics
        self.default_partitions = default_partitions
        self._preallocate_segments = preallocate_segments
        self._producer_id_expiration_ms = producer_id_expiration_ms
        self.catalog = catalog if catalog is not None else TopicCatalog(meta)
        # The cluster this node belongs to; None on a one-node cluster. Set by the node.
        self.cluster: ClusterView | None = None
        self._streams: dict[tuple[str, int], LogStream] = {}
        self._draining = trio.Event()
        self._long_polls: set[trio.Event] = set()
        self._next_producer_id = 0
        self._producer_id_limit = 0
        # Consumer groups and committed offsets; attached by the node, None until then.
        self.groups: GroupService | None = None
        # The transaction coordinator (vdl.txn); attached by the node, None until then.
        self.transactions: TxnCoordinator | None = None
        for topic in self.catalog.all():
            self._open_streams(topic)

    @property
    def meta(self) -> MetaStore:
        """The node's metadata store (topics, producer ids, committed offsets)."""
        return self._meta

    # -- topics --------------------------------------------------------------------------

    def topic_config(self, topic: Topic, key: str) -> str:
        return topic.configs.get(key, self.config_specs[key].default)

    def _stream_dir(self, name: str, partition: int) -> Path:
        return self._streams_dir / f"{name}-{partition}"

    def _open_streams(self, topic: Topic) -> None:
        for partition in range(topic.partitions):
            self._streams[(topic.name, partition)] = self.open_partition_stream(
                topic, partition, self._stream_dir(topic.name, partition)
            )

    def open_partition_stream(
        self,
        topic: Topic,
        partition: int,
        directory: Path,
        appender: AppenderFactory | None = None,
    ) -> LogStream:
        """Open (creating if needed) one partition's store in `directory` as a stream,
        without registering it (see add_stream). Its appends go to `appender` (a Raft
        group's), or to the store and this node's flusher."""
        options = LogStoreOptions(
            segment_bytes=int(self.topic_config(topic, "segment.bytes")),
            preallocate=self._preallocate_segments,
            retention=self._retention(topic),
            segment_ms=self._segment_ms(topic),
        )
        append_time = self.topic_config(topic, "message.timestamp.type") == "LogAppendTime"
        store = open_log_store(self._log_backend, directory, options)
        saved = self._meta.get(_log_start_key(topic, partition))
        return LogStream(
            f"{topic.name}-{partition}",
            store,
            appender or LocalAppender.factory(self._flusher),
            self._clock_ms,
            log_append_time=append_time,
            producer_expiry_ms=self._producer_id_expiration_ms,
            log_start=int(saved) if saved is not None else 0,
        )

    def _retention(self, topic: Topic) -> LogRetention:
        if not deletes(self.topic_config(topic, "cleanup.policy")):
            return LogRetention()  # compact alone: no time or size retention
        retention_ms = int(self.topic_config(topic, "retention.ms"))
        retention_bytes = int(self.topic_config(topic, "retention.bytes"))
        return LogRetention(
            max_bytes=retention_bytes if retention_bytes >= 0 else None,
            max_age_ms=retention_ms if retention_ms >= 0 else None,
        )

    def _segment_ms(self, topic: Topic) -> int:
        """How far apart in batch time a segment's batches may lie: segment.ms, or for a
        compacted topic max.compaction.lag.ms if smaller, so that records become
        cleanable in time (KIP-354)."""
        segment_ms = int(self.topic_config(topic, "segment.ms"))
        if is_compacted(self.topic_config(topic, "cleanup.policy")):
            segment_ms = min(segment_ms, int(self.topic_config(topic, "max.compaction.lag.ms")))
        return segment_ms

    def topic_updated(self, topic: Topic) -> None:
        """Record a topic's new definition (made here, or applied from the metadata group)
        and give its open streams the settings they apply at run time: retention (from the
        next retention pass), segment.ms (from the next append) and
        message.timestamp.type. max.message.bytes and the timestamp limits are read per
        produce; segment.bytes applies from the next start."""
        self.catalog.update(topic)
        retention = self._retention(topic)
        segment_ms = self._segment_ms(topic)
        append_time = self.topic_config(topic, "message.timestamp.type") == "LogAppendTime"
        for partition in range(topic.partitions):
            stream = self._streams.get((topic.name, partition))
            if stream is not None:
                stream.store.set_retention(retention)
                stream.store.set_segment_ms(segment_ms)
                stream.set_log_append_time(append_time)

    def hosted_streams(self) -> list[tuple[str, int, LogStream]]:
        """(topic, partition, stream) of every partition replica this node holds."""
        return [(name, partition, s) for (name, partition), s in sorted(self._streams.items())]

    def add_stream(self, topic: str, partition: int, stream: LogStream) -> None:
        self._streams[(topic, partition)] = stream

    def pop_stream(self, topic: str, partition: int) -> LogStream | None:
        return self._streams.pop((topic, partition), None)

    def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str] | None = None,
        *,
        validate_only: bool = False,
        consumers: Sequence[TopicConsumer] = (),
        supported_codecs: Sequence[int] = (),
        attributes: Mapping[str, str] | None = None,
    ) -> Topic:
        validate_topic_name(name)
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}",
            )
        configs = dict(configs or {})
        validate_configs(self.config_specs, configs)
        if self.catalog.get(name) is not None:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        names = [c.name for c in consumers]
        if len(set(names)) != len(names):
            raise TopicError(ErrorCode.INVALID_CONFIG, "consumer names must be unique")
        topic = Topic(
            name,
            partitions,
            uuid.uuid4(),
            configs,
            tuple(consumers),
            tuple(supported_codecs),
            dict(attributes or {}),
        )
        if validate_only:
            return topic
        self._refuse_on_cluster()
        for partition in range(partitions):
            # Leftovers of a topic deleted while the node was down must not come back.
            shutil.rmtree(self._stream_dir(name, partition), ignore_errors=True)
        self.catalog.add(topic)
        self._open_streams(topic)
        log.info("created topic %s with %d partitions", name, partitions)
        return topic

    def add_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None = None,
        *,
        node_id: int = 1,
        validate_only: bool = False,
    ) -> Topic:
        """Grow a topic to `count` partitions on this one-node cluster (Kafka's
        CreatePartitions, YDB's AlterTopic): the topic record says the new count in one
        durable write, then the new partitions' streams open (a restart in between opens
        them from the record). `assignments`, if given, must put each new partition on
        this node (`node_id`), its only broker."""
        if not validate_only:
            self._refuse_on_cluster()
        topic = self.catalog.get(name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        validate_growth(topic, count, MAX_PARTITIONS)
        if assignments is not None:
            validate_assignment(assignments, count - topic.partitions, 1, (node_id,))
        grown = topic.grown(count)
        if validate_only:
            return grown
        for partition in range(topic.partitions, count):
            # Leftovers of a topic deleted while the node was down must not come back.
            shutil.rmtree(self._stream_dir(name, partition), ignore_errors=True)
        self.catalog.update(grown)
        for partition in range(topic.partitions, count):
            self._streams[(name, partition)] = self.open_partition_stream(
                grown, partition, self._stream_dir(name, partition)
            )
        log.info("topic %s grew from %d to %d partitions", name, topic.partitions, count)
        return grown

    def ensure_topic(self, name: str) -> Topic | None:
        """The topic, auto-created with default settings if allowed; None if it is absent."""
        topic = self.catalog.get(name)
        if topic is None and self.auto_create_topics:
            if self.cluster is not None:
                # Created through the metadata group; the client asks again meanwhile.
                validate_topic_name(name)
                self.cluster.request_topic(name)
                return None
            topic = self.create_topic(name, self.default_partitions)
        return topic

    def update_topic(self, topic: Topic) -> None:
        """Persist new consumers/codecs/attributes/configs of an existing topic; the open
        streams take them as `topic_updated` says."""
        self._refuse_on_cluster()
        current = self.catalog.get(topic.name)
        if current is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic.name!r}")
        if topic.partitions != current.partitions or topic.topic_id != current.topic_id:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, "partition count cannot change")
        validate_configs(self.config_specs, topic.configs)
        self.topic_updated(topic)

    def _refuse_on_cluster(self) -> None:
        # Topics of a cluster change only through the metadata group (ClusterView).
        if self.cluster is not None:
            raise TopicError(
                ErrorCode.INVALID_REQUEST, "on a cluster, topics change through Kafka admin APIs"
            )

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with every group's committed offsets on it, in one durable batch:
        a topic created again under the name starts with none (Kafka removes a deleted
        topic's offsets at deletion; YDB drops the consumers, which live in the topic)."""
        self._refuse_on_cluster()
        if self.catalog.get(name) is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        topic = self.catalog.remove(name, OffsetStore(self._meta).keys_of_topic(name))
        for partition in range(topic.partitions):
            stream = self._streams.pop((name, partition))
            await stream.close()
            await trio.to_thread.run_sync(shutil.rmtree, self._stream_dir(name, partition), True)
        log.info("deleted topic %s", name)

    def leader_stream(self, topic: str, partition: int) -> LogStream:
        """The stream, if this node leads it (what Kafka produce, fetch and list offsets
        need): NOT_LEADER_OR_FOLLOWER otherwise."""
        stream = self.stream(topic, partition)
        if self.cluster is not None and not self.cluster.is_leader(topic, partition):
            raise TopicError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"not the leader of {topic}-{partition}"
            )
        return stream

    def stream(self, topic: str, partition: int) -> LogStream:
        stream = self._streams.get((topic, partition))
        if stream is None:
            raise TopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {partition} of {topic!r}"
            )
        return stream

    # -- log start (DeleteRecords) --------------------------------------------------------

    async def delete_records(self, name: str, partition: int, offset: int, timeout_s: float) -> int:
        """Kafka's DeleteRecords on a partition this node leads: the log starts at
        `offset` (-1: the high watermark) on every replica; the log start offset after.
        OFFSET_OUT_OF_RANGE above the high watermark; the start never moves backwards.
        On a cluster it is the metadata command `delete_records`
        (`vdl/cluster/log_start_commands.py`), waited for up to `timeout_s`."""
        stream = self.leader_stream(name, partition)
        topic = self.catalog.get(name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        high_watermark = stream.high_watermark
        target = high_watermark if offset == -1 else offset
        if not 0 <= target <= high_watermark:
            raise TopicError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"{offset} is outside 0..{high_watermark} (the high watermark)",
            )
        if target <= stream.log_start_offset:
            return stream.log_start_offset
        if self.cluster is None:
            self.apply_log_start(topic, partition, target)
        else:
            command = {
                "op": "delete_records",
                "name": name,
                "topic_id": str(topic.topic_id),
                "partition": partition,
                "offset": target,
            }
            await self.cluster.run_command(command, timeout_s)
        return stream.log_start_offset

    def apply_log_start(self, topic: Topic, partition: int, offset: int) -> None:
        """Persist that the partition's log starts at `offset` (if that is later) and move
        the start of its stream, if this node holds it."""
        key = _log_start_key(topic, partition)
        saved = self._meta.get(key)
        if saved is None or int(saved) < offset:
            self._meta.put(key, str(offset).encode())
        stream = self._streams.get((topic.name, partition))
        if stream is not None:
            stream.advance_log_start(offset)

    # -- producers -----------------------------------------------------------------------

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before, also across restarts."""
        if self._next_producer_id >= self._producer_id_limit:
            raw = self._meta.get(_PRODUCER_ID_KEY)
            start = int(raw) if raw is not None else 1000
            # Reserve a block durably, so a restart never reissues an id from it.
            self._meta.put(_PRODUCER_ID_KEY, str(start + _PRODUCER_ID_BLOCK).encode())
            self._next_producer_id = start
            self._producer_id_limit = start + _PRODUCER_ID_BLOCK
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        if self.cluster is not None:
            return producer_id * _NODE_ID_SPACE + self.cluster.node_id % _NODE_ID_SPACE
        return producer_id

    # -- waiting ---------------------------------------------------------------------------

    @property
    def draining(self) -> bool:
        """The node is shutting down: long polls answer with what they have."""
        return self._draining.is_set()

    def start_draining(self) -> None:
        self._draining.set()
        for event in self._long_polls:
            event.set()

    async def wait_for_data(self, streams: list[LogStream], timeout_s: float) -> None:
        """Return when any of the streams' high watermark moves, after timeout_s, or once
        the node starts draining (a held fetch must not hold up shutdown)."""
        if self.draining:
            return
        event = trio.Event()
        self._long_polls.add(event)
        for stream in streams:
            stream.watch(event)
        try:
            with trio.move_on_after(timeout_s):
                await event.wait()
        finally:
            self._long_polls.discard(event)
            for stream in streams:
                stream.unwatch(event)

    # -- housekeeping ----------------------------------------------------------------------

    async def run_retention(self, period_s: float) -> None:
        while True:
            await trio.sleep(period_s)
            for key, stream in list(self._streams.items()):
                # One partition at a time: with thousands of them a pass in one go held the
                # event loop (and every produce waiting on it) for its whole length.
                await trio.lowlevel.checkpoint()
                if self._streams.get(key) is not stream:
                    continue  # deleted (or replaced) meanwhile
                removed = stream.apply_retention()
                if removed:
                    _RETENTION_REMOVED.inc(removed)
                    log.info("retention removed %d entries of %s", removed, stream.name)
                topic = self.catalog.get(key[0])
                if topic is not None and is_compacted(self.topic_config(topic, "cleanup.policy")):
                    cleaned = await clean_stream(
                        stream, self._compaction_settings(topic), self._clock_ms()
                    )
                    if cleaned:
                        log.info("log compaction rewrote %d segments of %s", cleaned, stream.name)

    def _compaction_settings(self, topic: Topic) -> CompactionSettings:
        return CompactionSettings(
            delete_retention_ms=int(self.topic_config(topic, "delete.retention.ms")),
            min_cleanable_dirty_ratio=float(self.topic_config(topic, "min.cleanable.dirty.ratio")),
            min_compaction_lag_ms=int(self.topic_config(topic, "min.compaction.lag.ms")),
            max_compaction_lag_ms=int(self.topic_config(topic, "max.compaction.lag.ms")),
        )

    async def close(self) -> None:
        for stream in self._streams.values():
            await stream.close()
        self._streams.clear()


def _log_start_key(topic: Topic, partition: int) -> bytes:
    return _LOG_START_PREFIX + f"{topic.topic_id}/{partition}".encode()
