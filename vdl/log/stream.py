"""One log stream (a topic partition): offsets, visibility and waiting, over a LogStore.

Writers append validated record batches; the stream assigns offsets, checks idempotent
producer sequences and hands the entry to the store. Readers see only first offset .. high
watermark, where the high watermark is the offset after the last committed entry. On one
node an entry commits when the flusher has made it durable; under Raft the consensus driver
reports commits instead, through the same `on_commit`. Which of the two serves a stream is
its appender's business (`vdl/log/appender.py`), chosen when the stream is built.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import trio

from vdl.backends.api import Buffer, LogStore
from vdl.log.appender import AppenderFactory
from vdl.log.error_codes import ErrorCode
from vdl.log.leader_epochs import LeaderEpochs
from vdl.log.producer_state import (
    PRODUCER_ID_EXPIRATION_MS,
    Accept,
    Duplicate,
    ProducerStateTable,
    Refuse,
)
from vdl.log.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    BatchInfo,
    assign_offsets,
    build_control_batch,
    control_record,
    parse_batch_header,
)
from vdl.log.timestamp_index import TimestampIndex, first_record_at
from vdl.log.ydb_mapping import YdbProducerTable
from vdl.metrics.stages import STAGES
from vdl.txn.partition_txns import PartitionTxns

# Kafka's producer.id.expiration.check.interval.ms: expiry is a sweep, not per append.
_EXPIRY_CHECK_MS = 10 * 60 * 1000
# Batches and records appended by the partitions this node leads (the node's metrics).
_APPENDS = STAGES.counter("log_appended_batches")
_APPENDED_RECORDS = STAGES.counter("log_appended_records")
# A timestamp search reads the log in pieces of this size.
_SEARCH_READ_BYTES = 64 * 1024


class StreamError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class Appended:
    base_offset: int
    last_offset: int
    timestamp_ms: int  # log append time, or -1 for CreateTime
    duplicate: bool


class LogStream:
    def __init__(
        self,
        name: str,
        store: LogStore,
        appender: AppenderFactory,
        clock_ms: Callable[[], int],
        *,
        log_append_time: bool = False,
        producer_expiry_ms: int = PRODUCER_ID_EXPIRATION_MS,
        log_start: int = 0,
    ) -> None:
        """`log_start`: where DeleteRecords last moved the log start (Kafka's
        logStartOffset), which may lie inside the first stored batch; the log starts at
        it or at the first offset stored, whichever is later."""
        self.name = name
        self._store = store
        self._clock_ms = clock_ms
        self._log_append_time = log_append_time
        self._closed = False
        # Entries appended but not yet committed: (raft index, offset after the entry).
        self._uncommitted: deque[tuple[int, int]] = deque()
        # Entries not yet durable on this node's own disk (raft index, offset after), the
        # offset after the last one that is, and who waits for it (Kafka acks=1 is
        # leader-durable, acks=all majority-durable; on one replica the two are one).
        self._unsynced: deque[tuple[int, int]] = deque()
        self._local_durable = store.next_offset()  # what is stored when it opens is durable
        self._durable_waiters: list[tuple[int, int, trio.Event]] = []
        self._commit_waiters: list[tuple[int, int, trio.Event]] = []
        # When a commit woke each commit waiter (time.perf_counter), until it resumes.
        self._woken_at: dict[trio.Event, float] = {}
        self._waiter_seq = itertools.count()
        self._watchers: set[trio.Event] = set()
        self.producers = ProducerStateTable()
        self.txns = PartitionTxns()
        self._timestamps = TimestampIndex()
        self.epochs = LeaderEpochs()
        self._log_start = log_start
        self._producer_expiry_ms = producer_expiry_ms
        self._next_expiry_ms = clock_ms() + min(_EXPIRY_CHECK_MS, producer_expiry_ms)
        self._ydb_producers: YdbProducerTable | None = None
        # The raft index log compaction last cleaned through (vdl/log/cleaner.py).
        self.cleaned_through = 0
        self._truncated_waiters: set[trio.Event] = set()
        self._appender = appender(store, self)
        # Visible: what the log held committed when it opened; the rest waits for its commit.
        self._commit_index = self._appender.initial_commit_index()
        self._high_watermark = store.next_offset()
        self._rebuild_batch_state(opening=True)

    @property
    def store(self) -> LogStore:
        return self._store

    def clock_ms(self) -> int:
        """The time by the stream's clock, in ms (the clock of its LogAppendTime stamps)."""
        return self._clock_ms()

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed readers stop (KIP-98): the first offset of the earliest
        transaction not yet decided (or whose marker is not committed yet), else the high
        watermark; never below the log start."""
        return max(self.txns.last_stable_offset(self._high_watermark), self.log_start_offset)

    @property
    def commit_index(self) -> int:
        """The last committed entry's raft index (log compaction cleans only below it)."""
        return self._commit_index

    @property
    def durable_end(self) -> int:
        """The offset after the last entry durable on this node's disk (or committed)."""
        return max(self._high_watermark, self._local_durable)

    @property
    def log_start_offset(self) -> int:
        return max(self._store.first_offset(), self._log_start)

    @property
    def leader_epoch(self) -> int:
        """The partition's leader epoch now (the Raft term; 1 on a single replica)."""
        return self._appender.term()

    def advance_log_start(self, offset: int) -> int:
        """DeleteRecords: the log starts at `offset` from now on, if that is later than
        where it starts (never backwards). Reads below it are out of range at once; whole
        segments below it go at the next retention pass. The log start offset after."""
        if offset > self._log_start:
            self._log_start = offset
            start = self.log_start_offset
            self._timestamps.drop_before(start)
            self.epochs.drop_before(start)
            self.txns.drop_before(start)
        return self.log_start_offset

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= `epoch` in the log, its end offset)."""
        return self.epochs.end_offset_for(epoch, self.log_end_offset, self.leader_epoch)

    @property
    def log_end_offset(self) -> int:
        return self._appender.next_offset()

    def _expire_producers(self, now_ms: int) -> None:
        # Bounds the table's memory on leaders and followers alike. Replicas sweep on
        # their own clocks, so they may briefly disagree about a silent producer; that is
        # harmless because a forgotten producer's next batch is accepted (Kafka's rule).
        if now_ms < self._next_expiry_ms:
            return
        self._next_expiry_ms = now_ms + min(_EXPIRY_CHECK_MS, self._producer_expiry_ms)
        self.producers.expire(now_ms, self._producer_expiry_ms, self.txns.open_producers())

    def _rebuild_batch_state(self, *, opening: bool = False) -> None:
        """The producer table, the partition's transactions, the timestamp index and the
        leader epochs, from the batch headers stored (and the few control batches'
        records: their type), in one pass over the headers. `opening`: the same pass also
        finds the high watermark (the end of the entries up to the commit index) and the
        entries after it, which wait for their commit."""
        self.producers = ProducerStateTable()
        self.txns = PartitionTxns()
        self._timestamps = TimestampIndex()
        self.epochs = LeaderEpochs()
        now = self._clock_ms()
        # Only a replica restarted with entries past its commit index (a Raft group's)
        # needs the high watermark from the headers; otherwise it is the log end.
        commit_index = self._commit_index
        split = opening and commit_index < self._store.last_index()
        if split:
            self._high_watermark = self._store.first_offset()
        for index, header in self._store.data_headers():
            info = parse_batch_header(header)
            if split:
                if index <= commit_index:
                    self._high_watermark = info.next_offset
                else:
                    self._uncommitted.append((index, info.next_offset))
            self._timestamps.add(info.base_offset, info.max_timestamp, info.size)
            self.epochs.assign(info.partition_leader_epoch, info.base_offset)
            batch = None
            if info.is_control:
                read = self._store.read_batches(info.base_offset, 1, self._store.last_index())
                batch = read[0] if read else None
            self._track_producer(info, batch, now)
        self.epochs.drop_before(self.log_start_offset)
        self.txns.drop_before(self.log_start_offset)

    def _track_producer(self, info: BatchInfo, batch: Buffer | None, now: int) -> None:
        """Account one batch of the log (appended, replicated or read back on open) to the
        producer table and the partition's transactions; `batch` is needed for a control
        batch only (its record's type)."""
        if info.is_control:
            found = None if batch is None else control_record(batch)
            if found is not None and found[0] in (CONTROL_ABORT, CONTROL_COMMIT):
                kind, coordinator_epoch = found
                self.producers.record_marker(
                    info.producer_id, info.producer_epoch, now, coordinator_epoch
                )
                self.txns.on_marker(info.producer_id, kind == CONTROL_COMMIT, info.base_offset)
            return
        self.producers.record(
            info.producer_id,
            info.producer_epoch,
            info.base_sequence,
            info.last_offset_delta,
            info.base_offset,
            info.max_timestamp if info.timestamp_type else -1,
            now,
        )
        if info.is_transactional:
            self.txns.on_data(info.producer_id, info.base_offset)

    def ydb_producers(self) -> YdbProducerTable:
        """The YDB producers' last seq_no table, rebuilt from the log on first use.

        Lazily, unlike the Kafka table: it needs every record's headers, not just batch
        headers, and most streams never see a YDB writer. Entries appended but not yet
        committed count too, so a resent message is recognised while its first copy is
        still being flushed (the writer then waits for that copy's commit before acking).
        """
        if self._ydb_producers is None:
            table = YdbProducerTable()
            offset = self._store.first_offset()
            end = self._store.next_offset()
            while offset < end:
                batches = self._store.read_batches(offset, 4 << 20, self._store.last_index())
                if not batches:
                    break
                table.scan(batches)
                offset = parse_batch_header(batches[-1]).next_offset
            self._ydb_producers = table
        return self._ydb_producers

    def append(self, batch: memoryview | bytes, info: BatchInfo) -> Appended:
        """Append one validated batch now (synchronously, so callers keep their order).

        A writable memoryview is taken over: its offsets are stamped in place and the store
        keeps it (the Kafka framing hands out writable views only of a frame's own buffer).
        """
        if self._closed:
            raise StreamError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.name} is closed")
        verdict = self.producers.check(
            info.producer_id, info.producer_epoch, info.base_sequence, info.last_offset_delta
        )
        if isinstance(verdict, Duplicate):
            last = verdict.base_offset + info.last_offset_delta
            return Appended(verdict.base_offset, last, verdict.timestamp_ms, True)
        if isinstance(verdict, Refuse):
            raise StreamError(verdict.error, verdict.message)
        assert isinstance(verdict, Accept)
        now = self._clock_ms()
        self._expire_producers(now)
        appender = self._appender
        base = appender.next_offset()
        append_time = now if self._log_append_time else None
        epoch = appender.term()
        payload = assign_offsets(batch, base, epoch, append_time, in_place=True)
        last = base + info.last_offset_delta
        index = appender.append(payload, last + 1)
        _APPENDS.inc()
        _APPENDED_RECORDS.inc(info.last_offset_delta + 1)
        self._uncommitted.append((index, last + 1))
        self._unsynced.append((index, last + 1))
        self.epochs.assign(epoch, base)
        timestamp = now if append_time is not None else -1
        self._timestamps.add(base, info.max_timestamp if append_time is None else now, info.size)
        self.producers.record(
            info.producer_id,
            info.producer_epoch,
            info.base_sequence,
            info.last_offset_delta,
            base,
            timestamp,
            now,
        )
        if info.is_transactional:
            self.txns.on_data(info.producer_id, base)
        return Appended(base, last, timestamp, False)

    def append_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> int:
        """Append a commit or abort marker of the producer's transaction (KIP-98); the
        offset whose commit makes it final (the marker's, or for a marker already written
        the log end's). INVALID_PRODUCER_EPOCH for an epoch older than the producer's.

        `coordinator_epoch` numbers the coordinator's decisions for the producer's
        transactional id, strictly increasing (`vdl.txn.state.TxnRecord.decisions`); the
        log keeps the last one per producer, in its marker. A marker of the producer's
        epoch whose number is not above that one is a copy of a decision already written
        here: nothing is written again. This is what makes a late copy harmless: a resent
        request that arrives after the producer began its next transaction on this
        partition must not end that transaction (Kafka fences stale markers by the
        coordinator epoch they carry in the same way). Any other marker is written, even
        with no transaction open: its number, and a newer epoch in it (which fences an
        older producer), must be in the log."""
        if self._closed:
            raise StreamError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.name} is closed")
        entry = self.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise StreamError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker of producer {producer_id} epoch {producer_epoch}, "
                f"older than {entry.epoch}",
            )
        if (
            entry is not None
            and producer_epoch == entry.epoch
            and coordinator_epoch <= entry.coordinator_epoch
        ):
            return self.log_end_offset - 1
        now = self._clock_ms()
        self._expire_producers(now)
        appender = self._appender
        base = appender.next_offset()
        epoch = appender.term()
        batch = build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch, now)
        payload = assign_offsets(batch, base, epoch)
        index = appender.append(payload, base + 1)
        _APPENDS.inc()
        self._uncommitted.append((index, base + 1))
        self._unsynced.append((index, base + 1))
        self.epochs.assign(epoch, base)
        self._timestamps.add(base, now, len(payload))
        self.producers.record_marker(producer_id, producer_epoch, now, coordinator_epoch)
        self.txns.on_marker(producer_id, commit, base)
        return base

    def on_commit(self, index: int) -> None:
        if index <= self._commit_index:
            return
        self._commit_index = index
        advanced = False
        while self._uncommitted and self._uncommitted[0][0] <= index:
            self._high_watermark = self._uncommitted.popleft()[1]
            advanced = True
        if advanced:
            self.txns.release(self._high_watermark)
            self._wake()

    def _wake(self) -> None:
        hw = self._high_watermark
        while self._commit_waiters and self._commit_waiters[0][0] < hw:
            event = heapq.heappop(self._commit_waiters)[2]
            self._woken_at[event] = time.perf_counter()
            event.set()
        self._wake_durable()
        for event in self._watchers:
            event.set()
        self._watchers.clear()

    async def wait_committed(self, last_offset: int) -> float:
        """Return once every offset up to last_offset is committed (visible to readers):
        the `time.perf_counter()` when the commit woke this wait, 0.0 if it did not wait."""
        if last_offset < self._high_watermark:
            return 0.0
        event = await self._wait(self._commit_waiters, last_offset, lambda: self._high_watermark)
        return self._woken_at.pop(event, 0.0)

    async def wait_durable(self, last_offset: int) -> None:
        """Return once every offset up to last_offset is durable on this node (Kafka
        acks=1): on one node that is the commit; under Raft the leader's own flush, or the
        majority commit if that comes first. Not yet visible to readers, and lost if a new
        leader replaces the entries before they commit (as with Kafka's acks=1)."""
        if last_offset < self.durable_end:
            return
        await self._wait(self._durable_waiters, last_offset, lambda: self.durable_end)

    async def _wait(
        self,
        waiters: list[tuple[int, int, trio.Event]],
        last_offset: int,
        reached: Callable[[], int],
    ) -> trio.Event:
        """Park on `waiters` until the point `reached()` passes last_offset; the event is
        also set when the stream closes or a new leader replaces the entry."""
        if self._closed:
            raise StreamError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.name} is closed")
        event = trio.Event()
        heapq.heappush(waiters, (last_offset, next(self._waiter_seq), event))
        await event.wait()
        if event in self._truncated_waiters:
            self._truncated_waiters.discard(event)
            raise StreamError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.name}: a new leader replaced the entry"
            )
        if last_offset >= reached():
            raise StreamError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.name} was closed")
        return event

    def on_local_durable(self, index: int) -> None:
        """Every entry up to raft `index` is durable on this node's disk."""
        advanced = False
        while self._unsynced and self._unsynced[0][0] <= index:
            self._local_durable = self._unsynced.popleft()[1]
            advanced = True
        if advanced:
            self._wake_durable()

    def _wake_durable(self) -> None:
        end = self.durable_end
        while self._durable_waiters and self._durable_waiters[0][0] < end:
            heapq.heappop(self._durable_waiters)[2].set()

    def watch(self, event: trio.Event) -> None:
        """Set `event` on the next advance of the high watermark (used by long polls)."""
        self._watchers.add(event)

    def unwatch(self, event: trio.Event) -> None:
        self._watchers.discard(event)

    def read(self, offset: int, max_bytes: int) -> list[Buffer]:
        """Committed batches from the one holding `offset`; out-of-range is the caller's check."""
        if offset >= self._high_watermark:
            return []
        # A Raft leader may learn of a commit before its own store has written the entry.
        upto = min(self._commit_index, self._store.last_index())
        return self._store.read_batches(offset, max_bytes, upto)

    def read_stable(self, offset: int, max_bytes: int) -> list[Buffer]:
        """`read` for read_committed readers (KIP-98): only the batches below the last
        stable offset. The LSO is where a batch starts (a transaction's first batch, or the
        high watermark), so each batch returned lies wholly below it."""
        lso = self.last_stable_offset
        if offset >= lso:
            return []
        batches = self.read(offset, max_bytes)
        for i, batch in enumerate(batches):
            if parse_batch_header(batch).base_offset >= lso:
                return batches[:i]
        return batches

    def batch_for_timestamp(self, timestamp_ms: int) -> Buffer | None:
        """The first committed batch with a record at or after timestamp_ms, if any.

        The index skips what is older (see timestamp_index.py), so this reads at most
        about one checkpoint interval, like a fetch; the store is single-threaded, so it
        is read here, on the stream's own thread. `first_record_at` then finds the record.
        """
        start = self._timestamps.start_for(timestamp_ms)
        if start is None:
            return None
        offset = max(start, self.log_start_offset)
        while True:
            batches = self.read(offset, _SEARCH_READ_BYTES)
            if not batches:
                return None
            for batch in batches:
                info = parse_batch_header(batch)
                if info.max_timestamp >= timestamp_ms:
                    return batch
            offset = info.next_offset

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """First committed offset of a record with a timestamp >= timestamp_ms, if any."""
        batch = self.batch_for_timestamp(timestamp_ms)
        return None if batch is None else first_record_at(batch, timestamp_ms)[0]

    def set_log_append_time(self, on: bool) -> None:
        """Stamp appended batches with the append time (message.timestamp.type changed)."""
        self._log_append_time = on

    def apply_retention(self) -> int:
        removed = self._appender.apply_retention(self._clock_ms(), self._drop_before())
        if removed:
            self._timestamps.drop_before(self.log_start_offset)
            self.epochs.drop_before(self.log_start_offset)
            self.txns.drop_before(self.log_start_offset)
        return removed

    def _drop_before(self) -> int | None:
        """The raft index before which every entry lies below the log start that
        DeleteRecords set (None when it set none beyond what is stored)."""
        store = self._store
        if self._log_start <= store.first_offset():
            return None
        index = store.index_of_offset(self._log_start)
        return store.last_index() + 1 if index is None else index

    async def close(self) -> None:
        """Answer waiters with an error, wait out an in-flight sync, close the store."""
        if self._closed:
            return
        self._closed = True
        for _, _, event in [*self._commit_waiters, *self._durable_waiters]:
            event.set()
        self._commit_waiters.clear()
        self._durable_waiters.clear()
        self._wake()
        await self._appender.close()
        self._store.close()

    # -- replication: what a Raft group's state machine reports (vdl/consensus/stream_replica.py)

    def on_replicated(self, index: int, payload: Buffer) -> None:
        """A follower stored the leader's DATA entry at `index` (not committed yet)."""
        info = parse_batch_header(payload)
        if self._ydb_producers is not None:
            # Kept current on followers too: it is what dedups YDB writers if this
            # replica becomes the leader (a stale table would accept resent messages).
            self._ydb_producers.scan([payload])
        self._uncommitted.append((index, info.next_offset))
        self._unsynced.append((index, info.next_offset))
        now = self._clock_ms()
        self._expire_producers(now)
        self._timestamps.add(info.base_offset, info.max_timestamp, info.size)
        self.epochs.assign(info.partition_leader_epoch, info.base_offset)
        self._track_producer(info, payload, now)

    def on_restored(self, index: int) -> None:
        """The group replaced this replica's log by a snapshot ending at raft `index`:
        everything stored is committed, and nothing is pending."""
        self._uncommitted.clear()
        self._unsynced.clear()
        self._commit_index = index
        end = self._store.next_offset()
        self._high_watermark = self._local_durable = end
        self._commit_waiters = self._fail_from(self._commit_waiters, end)
        self._durable_waiters = self._fail_from(self._durable_waiters, end)
        self._rebuild_batch_state()
        self._ydb_producers = None
        self._wake()

    def on_truncated(self, from_index: int) -> int:
        """Entries from `from_index` on will never commit (a new leader replaced them):
        their producers fail with NOT_LEADER_OR_FOLLOWER. Returns the offset after the
        last entry kept, where the next one (the new leader's) starts."""
        while self._uncommitted and self._uncommitted[-1][0] >= from_index:
            self._uncommitted.pop()
        while self._unsynced and self._unsynced[-1][0] >= from_index:
            self._unsynced.pop()
        next_offset = self._uncommitted[-1][1] if self._uncommitted else self._high_watermark
        self._local_durable = min(self._local_durable, next_offset)
        self._commit_waiters = self._fail_from(self._commit_waiters, next_offset)
        self._durable_waiters = self._fail_from(self._durable_waiters, next_offset)
        # Sequences of the removed batches must be accepted again from the new leader,
        # and their timestamps no longer count.
        self._rebuild_batch_state()
        self._ydb_producers = None
        return next_offset

    def _fail_from(
        self, waiters: list[tuple[int, int, trio.Event]], next_offset: int
    ) -> list[tuple[int, int, trio.Event]]:
        """Wake the waiters of offsets from `next_offset` on as truncated; the others stay."""
        kept = []
        for waiter in waiters:
            if waiter[0] >= next_offset:
                self._truncated_waiters.add(waiter[2])
                waiter[2].set()
            else:
                kept.append(waiter)
        heapq.heapify(kept)
        return kept
