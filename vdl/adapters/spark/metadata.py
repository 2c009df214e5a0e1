"""Driver-side questions to the log: which partitions a topic has, their offset bounds, and
which offset a timestamp falls on.

One lazily created confluent-kafka consumer per reader. It never subscribes or commits; it
only asks Metadata and ListOffsets (by position, and by timestamp as in KIP-79).
``allow.auto.create.topics`` is off so a typo in ``subscribe`` is reported rather than
creating an empty topic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from vdl.adapters.spark.offsets import Offsets, TopicPartition
from vdl.adapters.spark.options import Subscription, matches_pattern

METADATA_TIMEOUT_S = 30.0
# The consumer has a group id only because confluent-kafka insists on one; it never joins it.
CLIENT_GROUP = "vdl-spark-adapter"


class UnknownTopicError(ValueError):
    """A subscribed or assigned topic (or partition) that the log does not have."""


def consumer_config(bootstrap: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": CLIENT_GROUP,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "allow.auto.create.topics": False,
        # librdkafka's own log lines go to stderr of Spark workers; warnings and worse only.
        "log_level": 4,
        **extra,
    }


class LogMetadata:
    def __init__(self, bootstrap: str, client_config: dict[str, str]) -> None:
        self._consumer = Consumer(consumer_config(bootstrap, client_config))
        self._bootstrap = bootstrap

    def close(self) -> None:
        self._consumer.close()

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """Every partition to read now; subscribed topics may have grown new ones."""
        if subscription.pattern is not None:
            return self._matching(subscription)
        found: list[TopicPartition] = []
        for topic in subscription.topics:
            try:
                metadata = self._consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
            except KafkaException as exc:
                raise UnknownTopicError(
                    f'cannot read metadata of topic "{topic}" from {self._bootstrap}: {exc}'
                ) from None
            info = metadata.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                raise UnknownTopicError(
                    f'topic "{topic}" does not exist on {self._bootstrap}'
                    + (f" ({info.error.str()})" if info is not None and info.error else "")
                )
            found.extend((topic, p) for p in sorted(info.partitions))
        if subscription.partitions is None:
            return found
        missing = sorted(set(subscription.partitions) - set(found))
        if missing:
            listed = ", ".join(f"{t}/{p}" for t, p in missing)
            raise UnknownTopicError(
                f"assigned partitions do not exist on {self._bootstrap}: {listed}"
            )
        return list(subscription.partitions)

    def _matching(self, subscription: Subscription) -> list[TopicPartition]:
        """Partitions of the topics whose names the pattern matches now (maybe none yet)."""
        assert subscription.pattern is not None
        try:
            metadata = self._consumer.list_topics(timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise UnknownTopicError(f"cannot list the topics of {self._bootstrap}: {exc}") from None
        found: list[TopicPartition] = []
        for name, info in sorted(metadata.topics.items()):
            if info.error is None and matches_pattern(subscription.pattern, name):
                found.extend((name, p) for p in sorted(info.partitions))
        return found

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """The offset of each partition's first record stamped at or after its timestamp.

        ``None`` where no record is that late (ListOffsets answers offset -1).
        """
        if not timestamps:
            return {}
        asked = [KafkaTopicPartition(t, p, ts) for (t, p), ts in timestamps.items()]
        try:
            answers = self._consumer.offsets_for_times(asked, timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise UnknownTopicError(
                f"cannot look up offsets by timestamp on {self._bootstrap}: {exc}"
            ) from None
        out: dict[TopicPartition, int | None] = {}
        for answer in answers:
            if answer.error is not None:
                raise UnknownTopicError(
                    f'offset by timestamp of "{answer.topic}" partition {answer.partition}: '
                    f"{answer.error.str()}"
                )
            out[(answer.topic, answer.partition)] = answer.offset if answer.offset >= 0 else None
        return out

    def bounds(self, partitions: Iterable[TopicPartition]) -> tuple[Offsets, Offsets]:
        """(earliest, latest) per partition: the first offset kept and the next one to come."""
        earliest: Offsets = {}
        latest: Offsets = {}
        for topic, partition in partitions:
            low, high = self._consumer.get_watermark_offsets(
                KafkaTopicPartition(topic, partition), timeout=METADATA_TIMEOUT_S, cached=False
            )
            earliest[(topic, partition)] = int(low)
            latest[(topic, partition)] = int(high)
        return earliest, latest
