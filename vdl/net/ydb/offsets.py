"""YDB consumers' committed offsets, kept in the shared store of ``vdl.groups.offsets``.

A YDB consumer named ``c`` and a Kafka consumer group ``c`` read and write the same cursor
per (topic, partition). YDB's "committed offset" is Kafka's: the next offset to read.
"""

from __future__ import annotations

from collections.abc import Callable

from vdl.groups.offsets import CommittedOffset, OffsetStore


class ConsumerOffsets:
    def __init__(self, store: OffsetStore, clock_ms: Callable[[], int]) -> None:
        self._store = store
        self._clock_ms = clock_ms

    def committed(self, consumer: str, topic: str, partition: int) -> int | None:
        found = self._store.fetch(consumer, [(topic, partition)]).get((topic, partition))
        return None if found is None or found.offset < 0 else found.offset

    def commit(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        """Durable when it returns (one synced MetaStore batch)."""
        self._store.commit(
            consumer,
            {(topic, partition): CommittedOffset(offset, commit_time_ms=self._clock_ms())},
        )
