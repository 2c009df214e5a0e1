"""YDB consumers' committed offsets, kept in the shared store of ``vdl.groups.offsets``.

A YDB consumer named ``c`` and a Kafka consumer group ``c`` read and write the same cursor
per (topic, partition). YDB's "committed offset" is Kafka's: the next offset to read.

On a cluster a commit is a metadata-group command, the same one Kafka's coordinator
proposes (``vdl.cluster.offset_commands``): it is applied into every node's store, so the
cursor survives any node and a YDB reader on any node starts from it.
"""

from __future__ import annotations

from collections.abc import Callable

from vdl.groups.offsets import CommittedOffset, OffsetStore
from vdl.net.ydb.cluster import YdbCluster


class ConsumerOffsets:
    def __init__(
        self,
        store: OffsetStore,
        clock_ms: Callable[[], int],
        cluster: YdbCluster | None = None,
    ) -> None:
        self._store = store
        self._clock_ms = clock_ms
        self._cluster = cluster

    def committed(self, consumer: str, topic: str, partition: int) -> int | None:
        found = self._store.fetch(consumer, [(topic, partition)]).get((topic, partition))
        return None if found is None or found.offset < 0 else found.offset

    async def commit(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        """Durable when it returns: one synced MetaStore batch, or applied by group 0
        (raises TopicError when the cluster could not apply it in time)."""
        offsets = {(topic, partition): CommittedOffset(offset, commit_time_ms=self._clock_ms())}
        if self._cluster is not None:
            await self._cluster.commit_offsets(consumer, offsets)
        else:
            self._store.commit(consumer, offsets)
