"""Where a YDB read session reads a partition from: its replica on this node, or a replica
on another node.

A session reads every partition the balancer gives it, on whichever node it is. Where this
node holds a replica (leader or follower: every replica holds the same committed records
at the same offsets) it reads that (`LocalPartition`); otherwise it reads from a node that
holds one (`RemotePartition`), over that node's raft port (`vdl.consensus.record_reads`):
the partition's leader first, then its other replicas, so it keeps reading while the
leader moves. Which one is chosen when the session starts the partition; both have the
same interface (`PartitionReader`).

A remote partition is read ahead by a task of the session: one answer of up to
``READ_AHEAD_BYTES`` waits for the session to take it, and at the end of what is
committed the task waits on the replica (a long poll of ``POLL_MS``) for more.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import trio

from vdl.backends.api import Buffer
from vdl.broker.broker import Broker
from vdl.broker.topics import TopicError
from vdl.consensus.record_reads import RecordReadError, RecordRequest, Records, RecordStream
from vdl.log.record_batch import InvalidBatch, parse_batch_header
from vdl.log.stream import LogStream
from vdl.txn.partition_txns import AbortedTxn

log = logging.getLogger(__name__)

READ_AHEAD_BYTES = 4 << 20
POLL_MS = 5_000
_RETRY_S = (0.1, 0.2, 0.5, 1.0)  # between failed reads, growing


class PartitionReader(Protocol):
    """One partition's committed records for a read session."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def watch(self, event: trio.Event) -> None:
        """Set `event` when more may be read."""
        ...

    def unwatch(self, event: trio.Event) -> None: ...

    def read(self, offset: int, max_bytes: int) -> tuple[list[Buffer], list[AbortedTxn]]:
        """Batches below the last stable offset from the one holding `offset` (none when
        there are none yet), and the aborted transactions that may have records in them."""
        ...

    async def offset_for_timestamp(self, timestamp_ms: int) -> int | None: ...

    async def reach(self, offset: int) -> None:
        """Return once the high watermark is at `offset` or past it (the caller bounds
        the wait)."""
        ...


class LocalPartition:
    """The replica this node holds."""

    def __init__(self, stream: LogStream) -> None:
        self._stream = stream

    @property
    def log_start_offset(self) -> int:
        return self._stream.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._stream.high_watermark

    def watch(self, event: trio.Event) -> None:
        self._stream.watch(event)

    def unwatch(self, event: trio.Event) -> None:
        self._stream.unwatch(event)

    def read(self, offset: int, max_bytes: int) -> tuple[list[Buffer], list[AbortedTxn]]:
        # The store is read here, on the event loop (it is single-threaded).
        batches = self._stream.read_stable(offset, max_bytes)
        if not batches:
            return [], []
        end = parse_batch_header(batches[-1]).next_offset
        return batches, self._stream.txns.aborted(offset, end)

    async def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        return self._stream.offset_for_timestamp(timestamp_ms)

    async def reach(self, offset: int) -> None:
        while self._stream.high_watermark < offset:
            event = trio.Event()
            self._stream.watch(event)
            try:
                await event.wait()
            finally:
                self._stream.unwatch(event)


class Replicas(Protocol):
    """The cluster as a remote partition sees it."""

    def replicas(self, topic: str, partition: int) -> list[int]:
        """The nodes holding a replica of the partition, its leader (if known) first."""
        ...

    async def fetch_records(self, node: int, request: RecordRequest) -> Records: ...


@dataclass(slots=True)
class _Chunk:
    base: int
    next: int
    batch: bytes


@dataclass(slots=True)
class _Ahead:
    chunks: list[_Chunk] = field(default_factory=list)
    aborted: list[AbortedTxn] = field(default_factory=list)


class RemotePartition:
    """A partition read from another node's replica; `run` (a task of the session) reads
    ahead until `close`."""

    def __init__(self, cluster: Replicas, topic: str, partition: int, records: Records) -> None:
        self._cluster = cluster
        self._topic = topic
        self._partition = partition
        self._start = records.log_start_offset
        self._hw = records.high_watermark
        self._stable = records.last_stable_offset
        self._next: int | None = None  # where the next read-ahead starts (once read)
        self._ahead = _Ahead()
        self._taken = trio.Event()  # what was read ahead is taken, or the reader moved
        self._watchers: set[trio.Event] = set()
        self._scope = trio.CancelScope()

    @classmethod
    async def open(cls, cluster: Replicas, topic: str, partition: int) -> RemotePartition:
        """Learn where the partition starts and ends (RecordReadError if no replica
        answers)."""
        records = await fetch_any(cluster, RecordRequest(topic, partition, 0, 0))
        return cls(cluster, topic, partition, records)

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def high_watermark(self) -> int:
        return self._hw

    def watch(self, event: trio.Event) -> None:
        self._watchers.add(event)

    def unwatch(self, event: trio.Event) -> None:
        self._watchers.discard(event)

    def read(self, offset: int, max_bytes: int) -> tuple[list[Buffer], list[AbortedTxn]]:
        chunks = self._ahead.chunks
        while chunks and chunks[0].next <= offset:
            chunks.pop(0)
        if chunks and chunks[0].base <= offset:
            batches: list[Buffer] = []
            size = 0
            for chunk in chunks:
                if batches and size + len(chunk.batch) > max_bytes:
                    break
                batches.append(chunk.batch)
                size += len(chunk.batch)
            return batches, self._ahead.aborted
        if chunks or offset != self._next:
            # Not what was read ahead (the reader moved): read ahead from `offset` instead.
            self._ahead = _Ahead()
            self._next = offset
        self._taken.set()
        return [], []

    async def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        request = RecordRequest(self._topic, self._partition, 0, 0, timestamp_ms=timestamp_ms)
        records = await fetch_any(self._cluster, request)
        return records.timestamp_offset

    async def reach(self, offset: int) -> None:
        while self._hw < offset:
            # A long poll from the high watermark: answered when it moves.
            request = RecordRequest(self._topic, self._partition, self._hw, 0, POLL_MS)
            records = await fetch_any(self._cluster, request, keep_trying=True)
            self._start = records.log_start_offset
            self._hw = max(self._hw, records.high_watermark)
            self._stable = records.last_stable_offset

    def close(self) -> None:
        self._scope.cancel()

    async def run(self) -> None:
        with self._scope:
            while True:
                at = self._next
                if self._ahead.chunks or at is None:
                    await self._taken.wait()
                    self._taken = trio.Event()
                    continue
                wait = POLL_MS if at >= self._stable else 0
                request = RecordRequest(self._topic, self._partition, at, READ_AHEAD_BYTES, wait)
                records = await fetch_any(self._cluster, request, keep_trying=True)
                moved = self._start, self._hw
                self._start = records.log_start_offset
                self._hw = records.high_watermark
                self._stable = records.last_stable_offset
                if self._next != at:
                    continue  # the reader moved meanwhile
                try:
                    chunks = _chunks(records.batches)
                except InvalidBatch as exc:
                    log.warning(
                        "a replica sent a malformed batch of %s partition %d: %s",
                        self._topic,
                        self._partition,
                        exc,
                    )
                    await trio.sleep(_RETRY_S[-1])
                    continue
                if chunks:
                    self._next = chunks[-1].next
                    aborted = [AbortedTxn(*a) for a in records.aborted]
                    self._ahead = _Ahead(chunks, aborted)
                elif at < self._start:
                    self._next = self._start  # retention removed what was next
                if chunks or moved != (self._start, self._hw):
                    for event in self._watchers:
                        event.set()
                    self._watchers.clear()


def _chunks(batches: Sequence[bytes]) -> list[_Chunk]:
    result = []
    for batch in batches:
        header = parse_batch_header(batch)
        result.append(_Chunk(header.base_offset, header.next_offset, batch))
    return result


async def fetch_any(
    cluster: Replicas, request: RecordRequest, *, keep_trying: bool = False
) -> Records:
    """Read from the partition's leader, else from its other replicas in turn; with
    `keep_trying`, round after round until one answers (logged once per outage), else
    RecordReadError after one round."""
    failures = 0
    while True:
        errors = []
        for node in cluster.replicas(request.topic, request.partition):
            try:
                records = await cluster.fetch_records(node, request)
            except RecordReadError as exc:
                errors.append(str(exc))
                continue
            if failures:
                log.info(
                    "reading %s partition %d from another node again",
                    request.topic,
                    request.partition,
                )
            return records
        reason = "; ".join(errors) or "no node holds a replica"
        if not keep_trying:
            raise RecordReadError(reason)
        if not failures:
            log.warning(
                "cannot read %s partition %d from any replica (retrying): %s",
                request.topic,
                request.partition,
                reason,
            )
        await trio.sleep(_RETRY_S[min(failures, len(_RETRY_S) - 1)])
        failures += 1


class BrokerRecords:
    """This node's replicas as other nodes read them (`record_reads.RecordSource`)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def record_stream(self, topic: str, partition: int) -> RecordStream | None:
        try:
            return _Served(self._broker.stream(topic, partition))
        except TopicError:
            return None


class _Served:
    def __init__(self, stream: LogStream) -> None:
        self._stream = stream

    @property
    def log_start_offset(self) -> int:
        return self._stream.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._stream.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self._stream.last_stable_offset

    def read_stable(self, offset: int, max_bytes: int) -> list[Buffer]:
        return self._stream.read_stable(offset, max_bytes)

    def aborted(self, start: int, end: int) -> list[tuple[int, int, int]]:
        return [
            (a.producer_id, a.first_offset, a.last_offset)
            for a in self._stream.txns.aborted(start, end)
        ]

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        return self._stream.offset_for_timestamp(timestamp_ms)

    def watch(self, event: trio.Event) -> None:
        self._stream.watch(event)

    def unwatch(self, event: trio.Event) -> None:
        self._stream.unwatch(event)
