"""The protocol-neutral broker: topics, their log streams, producer ids, retention.

Both front ends (Kafka, YDB) call this; it knows nothing of wire formats.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import trio

from vdl.backends.api import LogRetention, LogStoreOptions, MetaStore
from vdl.backends.registry import LogBackend, open_log_store
from vdl.broker.topics import (
    ConfigSpec,
    Topic,
    TopicCatalog,
    TopicError,
    topic_config_specs,
    validate_configs,
    validate_topic_name,
)
from vdl.log.error_codes import ErrorCode
from vdl.log.flusher import Flusher
from vdl.log.stream import LogStream

log = logging.getLogger(__name__)

_PRODUCER_ID_KEY = b"producer-id/next"
_PRODUCER_ID_BLOCK = 1000
MAX_PARTITIONS = 10_000


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
    ) -> None:
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
        self.catalog = TopicCatalog(meta)
        self._streams: dict[tuple[str, int], LogStream] = {}
        self._next_producer_id = 0
        self._producer_id_limit = 0
        for topic in self.catalog.all():
            self._open_streams(topic)

    # -- topics --------------------------------------------------------------------------

    def topic_config(self, topic: Topic, key: str) -> str:
        return topic.configs.get(key, self.config_specs[key].default)

    def _stream_dir(self, name: str, partition: int) -> Path:
        return self._streams_dir / f"{name}-{partition}"

    def _open_streams(self, topic: Topic) -> None:
        retention_ms = int(self.topic_config(topic, "retention.ms"))
        retention_bytes = int(self.topic_config(topic, "retention.bytes"))
        options = LogStoreOptions(
            segment_bytes=int(self.topic_config(topic, "segment.bytes")),
            retention=LogRetention(
                max_bytes=retention_bytes if retention_bytes >= 0 else None,
                max_age_ms=retention_ms if retention_ms >= 0 else None,
            ),
        )
        append_time = self.topic_config(topic, "message.timestamp.type") == "LogAppendTime"
        for partition in range(topic.partitions):
            directory = self._stream_dir(topic.name, partition)
            store = open_log_store(self._log_backend, directory, options)
            self._streams[(topic.name, partition)] = LogStream(
                f"{topic.name}-{partition}",
                store,
                self._flusher,
                self._clock_ms,
                log_append_time=append_time,
            )

    def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str] | None = None,
        *,
        validate_only: bool = False,
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
        topic = Topic(name, partitions, uuid.uuid4(), configs)
        if validate_only:
            return topic
        for partition in range(partitions):
            # Leftovers of a topic deleted while the node was down must not come back.
            shutil.rmtree(self._stream_dir(name, partition), ignore_errors=True)
        self.catalog.add(topic)
        self._open_streams(topic)
        log.info("created topic %s with %d partitions", name, partitions)
        return topic

    def ensure_topic(self, name: str) -> Topic | None:
        """The topic, auto-created with default settings if allowed; None if it is absent."""
        topic = self.catalog.get(name)
        if topic is None and self.auto_create_topics:
            topic = self.create_topic(name, self.default_partitions)
        return topic

    async def delete_topic(self, name: str) -> None:
        topic = self.catalog.remove(name)
        for partition in range(topic.partitions):
            stream = self._streams.pop((name, partition))
            await stream.close()
            await trio.to_thread.run_sync(
                shutil.rmtree, self._stream_dir(name, partition), True
            )
        log.info("deleted topic %s", name)

    def stream(self, topic: str, partition: int) -> LogStream:
        stream = self._streams.get((topic, partition))
        if stream is None:
            raise TopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {partition} of {topic!r}"
            )
        return stream

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
        return producer_id

    # -- waiting ---------------------------------------------------------------------------

    async def wait_for_data(self, streams: list[LogStream], timeout_s: float) -> None:
        """Return when any of the streams' high watermark moves, or after timeout_s."""
        event = trio.Event()
        for stream in streams:
            stream.watch(event)
        try:
            with trio.move_on_after(timeout_s):
                await event.wait()
        finally:
            for stream in streams:
                stream.unwatch(event)

    # -- housekeeping ----------------------------------------------------------------------

    async def run_retention(self, period_s: float) -> None:
        while True:
            await trio.sleep(period_s)
            for stream in list(self._streams.values()):
                removed = stream.apply_retention()
                if removed:
                    log.info("retention removed %d entries of %s", removed, stream.name)

    async def close(self) -> None:
        for stream in self._streams.values():
            await stream.close()
        self._streams.clear()
