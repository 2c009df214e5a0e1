"""`LogStore` on native segment files (VDL design 5.2.1).

Layout of a stream directory and the file formats: `segment.py` (names), `entry_codec.py`
(log entries), `raft_index.py` and `log_index.py` (the two fixed-width indexes).

Write path: append() does no I/O. It places each entry after the previous one (rolling to a
new segment by segment.bytes, or by segment.ms from the log's own timestamps:
`time_to_roll`), encodes its header and CRC, records it in the in-memory indexes and the
recent-entries cache, and queues header + payload; `sync()`, which the flusher runs in its
own thread, writes everything queued with gathered writes (`pwritev`, no copy of the
payload) and then fdatasyncs (`durability.py`). Until written, an entry is served from the
cache, which never evicts unwritten entries. Index records are appended in memory and reach
their files only once the entries they describe are durable (see `_flush_indexes`), so after
a crash an index is at worst behind the log, never ahead of what survived; recovery
(`recovery.py`) re-verifies and re-indexes only the unindexed tail. Indexes are therefore
never fdatasync'ed: they cost no extra flush on the commit path and can always be rebuilt.
Recovery is unaffected by the deferred writes: what no sync covered may be lost in a crash,
exactly as before, and it was never acknowledged.

Read path: entries still in the recent-entries cache come from memory; older ones are read
with one pread per run of entries in a segment, located arithmetically through the raft
index (by Raft index) or by binary search of the log index (by offset), and CRC-checked.

Preallocation: a shared background thread prepares a spare file of zeros of the segment
target size (`preallocate.py`), so that the flusher's writes overwrite allocated blocks and
its fdatasyncs need no journal commit. A roll renames the spare into the new segment if it
is ready; if not, the new segment is an empty file that grows by appends as before, and the
first append after the spare is ready rolls early into it (an empty active segment swaps
its file instead). The same covers a new store, a recovered one (recovery cuts the last
segment at its data) and one whose active segment a truncation cut. The next spare is
prepared once the active segment is half full, so an idle stream keeps at most one
segment's worth of zeros besides its active segment.

Snapshots: `closed_segments` hands out the files of closed, durable segments for a leader
to send as they are, holding them against retention until released; truncation, reset,
install and close break such holds rather than wait for them. A follower receives a log
into `stage_snapshot` (`staging.py`, run in a worker thread) and `install_snapshot` swaps
it in for the whole log by renames (`log_swap.py`), then loads it as `open` does.

Log compaction: `hold_for_cleaning` holds closed, committed segments as a snapshot does
(both through `_hold`, cleaning adding its stop rule); `cleaning.py` writes cleaned copies
in a worker thread and `replace_segment` swaps each in by renames, if the segment is still
held and not being sent.

Threads: everything runs on the owning thread except `sync()`, whose shared state (the
write queue among it) is confined to `SyncTracker` (`durability.py`), and the spare's
preparation, confined to `SpareFile`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from vdl.backends.api import (
    Buffer,
    ClosedSegments,
    CorruptionError,
    Entry,
    EntryType,
    LogRetention,
    LogStoreOptions,
    SegmentFile,
    SnapshotStaging,
    StorageError,
    batch_offsets,
)
from vdl.backends.segment import log_index, log_swap, raft_index
from vdl.backends.segment.cleaning import StagedSegment
from vdl.backends.segment.durability import PendingWrite, SyncTracker
from vdl.backends.segment.entry_codec import HEADER, HEADER_SIZE, encode_header, entry_is_intact
from vdl.backends.segment.log_index import BatchRecord
from vdl.backends.segment.preallocate import SpareFile, prepare_spare
from vdl.backends.segment.recent_cache import RecentCache
from vdl.backends.segment.recovery import open_segments, recover_segment
from vdl.backends.segment.segment import MAX_SEGMENT_BYTES, Segment
from vdl.backends.segment.segment_list import SegmentList
from vdl.backends.segment.staging import SegmentStaging
from vdl.log.batch_header import HEADER_SIZE as BATCH_HEADER_SIZE
from vdl.log.batch_header import max_timestamp

# Index records are written out once this many durable entries are waiting (or a closed
# segment still has unwritten ones): a crash then costs at most this many entries of
# re-scan, and the index files see one write per this many entries.
_INDEX_FLUSH_EVERY = 1024
# How far one read of data_headers reaches to take the headers of following entries too.
_HEADERS_READ = 1 << 20
_DATA = int(EntryType.DATA)
_RAFT_ONLY = frozenset({int(EntryType.NOOP), int(EntryType.CONFIG)})
_NO_TIMESTAMP = -1  # a batch's timestamp field when it has none (Kafka's NO_TIMESTAMP)


def time_to_roll(first_stamp: int, stamp: int, segment_ms: int) -> bool:
    """segment.ms: whether a DATA entry whose batch has maxTimestamp `stamp` starts a new
    segment after one whose first batch has maxTimestamp `first_stamp`.

    Kafka's rule (its roll check on append): the new batch's timestamp is more than
    segment.ms past the segment's first batch's. Both times come from the batches in the
    log, never from this node's clock: every replica appends the same entries, so every
    replica rolls before the same entry and its segments hold the same entries (which
    is what lets cleaned replicas agree byte for byte, vdl/log/compaction.py). A clock
    read at append time would differ between the leader and each follower, and between
    a follower appending live and one catching up later. Like Kafka, a roll happens only
    on an append: a partition that receives nothing keeps its active segment open. A
    batch without timestamps (-1) never rolls by time."""
    if first_stamp == _NO_TIMESTAMP or stamp == _NO_TIMESTAMP:
        return False
    return stamp - first_stamp > segment_ms


class SegmentLogStore:
    def __init__(
        self,
        directory: Path,
        options: LogStoreOptions,
        segments: list[Segment],
        dir_fd: int,
        preallocate: bool = True,
    ) -> None:
        self._directory = directory
        self._options = options
        self._roll_at = min(options.segment_bytes, MAX_SEGMENT_BYTES)
        self._roll_ms = options.segment_ms
        self._preallocate = preallocate
        self._spare: SpareFile | None = None
        self._tracker = SyncTracker(dir_fd, durable_index=segments[-1].last_index)
        self._pins: dict[ClosedSegments, list[Segment]] = {}  # segments held for copying
        self._adopt(segments)
        self._closed = False
        self._maybe_prepare_spare()

    def _adopt(self, segments: list[Segment]) -> None:
        """Take `segments` (just opened, all durable) as the whole log."""
        self._segments = SegmentList(segments)
        self._size = sum(s.size for s in segments)
        last = self._segments.active.last_index
        self._cache = RecentCache(self._options.cache_bytes, last + 1)
        self._index_flushed = last  # index records of entries up to here are in files
        self._unsealed_closed: list[Segment] = []  # closed, index records not all written
        self._next_offset = 0
        self._first_offset = 0
        self._recompute_offsets()

    @classmethod
    def open(
        cls, directory: Path, options: LogStoreOptions, *, preallocate: bool | None = None
    ) -> SegmentLogStore:
        """Open (recovering) or create the store; `preallocate` overrides
        `options.preallocate` (False keeps every segment growing by appends)."""
        if preallocate is None:
            preallocate = options.preallocate
        if options.segment_bytes <= 0:
            raise StorageError(f"segment_bytes must be positive, not {options.segment_bytes}")
        directory.mkdir(parents=True, exist_ok=True)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            log_swap.recover(directory)
            segments = _load_segments(directory, dir_fd)
        except BaseException:
            os.close(dir_fd)
            raise
        return cls(directory, options, segments, dir_fd, preallocate)

    # -- Raft side -------------------------------------------------------------------

    def first_index(self) -> int:
        return self._segments.first.first_index

    def last_index(self) -> int:
        return self._segments.active.last_index

    def term_at(self, index: int) -> int:
        self._live()
        if not self.first_index() <= index <= self.last_index():
            raise StorageError(
                f"no entry {index}: stored are {self.first_index()}..{self.last_index()}"
            )
        cached = self._cache.get(index)
        if cached is not None:
            return cached.term
        return self._segments.holding_index(index).raft.entry(index)[0]

    def append(self, entries: Sequence[Entry]) -> None:
        self._live()
        self._tracker.check_healthy()
        if not entries:
            return
        offsets = self._check_appendable(entries)
        first = entries[0].index
        try:
            writes = self._encode(entries, offsets)
        except BaseException:
            # Undo the partial append (a failed roll) so memory, indexes and files agree.
            self._truncate(first)
            raise
        # From here the entries are readable from the cache until the flusher wrote them.
        written = self._tracker.written_index
        self._tracker.queue(writes, entries[-1].index)
        self._cache.add(entries, written)
        self._flush_indexes()

    def _check_appendable(self, entries: Sequence[Entry]) -> list[tuple[int, int] | None]:
        """Validate the whole call before writing any of it; return each entry's batch
        offsets (None for Raft-only entries)."""
        expected = self.last_index() + 1
        next_offset = self._next_offset
        offsets: list[tuple[int, int] | None] = []
        for entry in entries:
            if entry.index != expected:
                raise StorageError(f"entry {entry.index} appended where {expected} was expected")
            expected += 1
            if entry.type == _DATA:
                first, last = batch_offsets(entry.payload)
                # The log index is binary-searched: offsets must grow with the index.
                if first < next_offset or last < first:
                    raise StorageError(
                        f"entry {entry.index}: batch offsets {first}..{last} "
                        f"do not follow offset {next_offset}"
                    )
                next_offset = last + 1
                offsets.append((first, last))
            elif entry.type in _RAFT_ONLY:
                offsets.append(None)
            else:
                raise StorageError(f"entry {entry.index}: unknown type {entry.type!r}")
            if len(entry.payload) > MAX_SEGMENT_BYTES - HEADER_SIZE:
                raise StorageError(f"entry {entry.index}: payload too large")
        return offsets

    def _encode(
        self, entries: Sequence[Entry], offsets: list[tuple[int, int] | None]
    ) -> list[PendingWrite]:
        """Place and encode `entries`, rolling as needed, and index them in memory; return
        their writes for the flusher. Nothing is written here: this runs on the event loop."""
        active = self._use_ready_spare(entries[0].index)
        roll_at = self._roll_at
        writes: list[PendingWrite] = []
        no_data_yet = self._first_offset == self._next_offset  # an empty offset range
        for entry, batch in zip(entries, offsets, strict=True):
            payload = entry.payload
            entry_bytes = HEADER_SIZE + len(payload)
            stamp = None if batch is None else max_timestamp(payload)
            if active.raft.count and (
                active.size >= roll_at
                or active.size + entry_bytes > MAX_SEGMENT_BYTES
                or (stamp is not None and self._time_to_roll(active, stamp))
            ):
                active = self._roll(entry.index)
            kind = int(entry.type)
            header = encode_header(entry.term, entry.index, kind, payload)
            position = active.reserve(entry_bytes)
            self._size += entry_bytes
            if batch is not None and stamp is not None:
                first, last = batch
                active.log.append(first, last, entry.index, stamp, position, len(payload))
                self._next_offset = last + 1
                if no_data_yet:
                    self._first_offset, no_data_yet = first, False
            active.raft.append(entry.term, position, kind)
            writes.append(PendingWrite(active.fd, position, entry.index, header, payload))
        self._maybe_prepare_spare()
        return writes

    def _time_to_roll(self, active: Segment, stamp: int) -> bool:
        """segment.ms: whether a DATA entry whose batch has maxTimestamp `stamp` starts a
        new segment after `active` (see `time_to_roll`)."""
        if self._roll_ms is None or not active.log.count:
            return False
        return time_to_roll(active.log.record(0).max_timestamp, stamp, self._roll_ms)

    def _roll(self, first_index: int) -> Segment:
        closing = self._segments.active
        if closing.close_file():
            self._tracker.cut(closing.fd)
        segment = Segment.create(self._directory, first_index, self._next_offset, self._spare)
        if segment.preallocated:
            self._spare = None
        self._segments.push(segment)
        self._unsealed_closed.append(closing)
        self._tracker.directory_changed()
        return segment

    def _use_ready_spare(self, next_index: int) -> Segment:
        """The segment to append `next_index` to: the active one, unless it is not
        preallocated and a spare is ready to take over."""
        active = self._segments.active
        if active.preallocated or self._spare is None or not self._spare.ready():
            return active
        if active.raft.count:
            return self._roll(next_index)
        old_fd = active.adopt_spare(self._spare)
        if old_fd is not None:
            self._spare = None
            self._tracker.retire(old_fd)
            self._tracker.directory_changed()
        return active

    def _maybe_prepare_spare(self) -> None:
        if self._spare is not None or not self._preallocate:
            return
        active = self._segments.active
        if active.preallocated and active.size < self._roll_at // 2:
            return
        self._spare = prepare_spare(self._directory, self._roll_at)

    def truncate_suffix(self, from_index: int) -> None:
        self._live()
        self._truncate(max(from_index, self.first_index()))

    def _truncate(self, start: int) -> None:
        segments = self._segments
        if start >= segments.active.next_index:
            return
        # A sync writing queued entries finishes first (the owner waits for at most one
        # round of writes; truncations are rare Raft conflicts), so every removed entry is
        # either dropped from the queue here or already in its file and cut below.
        with self._tracker.writes_paused():
            self._tracker.truncated(start - 1)
            removed_files = False
            while len(segments) > 1 and segments.active.first_index >= start:
                self._delete_segment(segments.pop_last())
                removed_files = True
            active = segments.active
            if start < active.next_index:
                self._invalidate_pins(active)  # cut in place below
            if active in self._unsealed_closed:
                self._unsealed_closed.remove(active)
            active.unseal_indexes()  # it takes appends again
            before = active.size
            active.truncate_from(start)
            self._size -= before - active.size
            self._tracker.cut(active.fd)  # the shorter length must be synced
        self._index_flushed = min(self._index_flushed, start - 1)
        self._cache.truncate_from(start)
        self._recompute_offsets()
        if removed_files:
            # Now, not at the next sync: a removed segment must not reappear next to one
            # of the same first index created after it.
            self._tracker.sync_directory()

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        self._live()
        if lo < self.first_index():
            raise StorageError(f"entry {lo} is before the first stored {self.first_index()}")
        hi = min(hi, self.last_index() + 1)
        out: list[Entry] = []
        total = 0
        index = lo
        cache_from = self._cache.first_index
        while index < hi:
            cached = self._cache.get(index) if index >= cache_from else None
            if cached is not None:
                total += len(cached.payload)
                if out and max_bytes is not None and total > max_bytes:
                    break
                out.append(cached)
                index += 1
                continue
            segment = self._segments.holding_index(index)
            run_end = min(hi, segment.next_index, max(cache_from, index + 1))
            budget = None if max_bytes is None else max_bytes - total
            run = _read_entries(segment, index, run_end, budget, first_is_free=not out)
            out.extend(run)
            total += sum(len(e.payload) for e in run)
            index += len(run)
            if index < run_end:
                break  # out of budget
        return out

    # -- reader side -----------------------------------------------------------------

    def first_offset(self) -> int:
        return self._first_offset

    def next_offset(self) -> int:
        return self._next_offset

    def index_of_offset(self, offset: int) -> int | None:
        self._live()
        found = self._locate_offset(offset)
        if found is None:
            return None
        number, k = found
        return self._segments[number].log.record(k).raft_index

    def read_batches(self, offset: int, max_bytes: int, max_index: int) -> list[Buffer]:
        self._live()
        out: list[Buffer] = []
        found = self._locate_offset(offset)
        if found is None:
            return out
        first_number, k = found
        total = 0
        for number in range(first_number, len(self._segments)):
            segment = self._segments[number]
            on_disk: list[BatchRecord] = []  # a run of batches to read with one pread
            stop = False
            for j in range(k, segment.log.count):
                record = segment.log.record(j)
                if record.raft_index > max_index or (
                    (out or on_disk) and total + record.length > max_bytes
                ):
                    stop = True
                    break
                total += record.length
                cached = self._cache.get(record.raft_index)
                if cached is None:
                    on_disk.append(record)
                    continue
                _read_batches(segment, on_disk, out)  # older than the cached one
                on_disk = []
                out.append(cached.payload)
            _read_batches(segment, on_disk, out)
            if stop:
                break
            k = 0
        return out

    def data_headers(self) -> Iterator[tuple[int, bytes]]:
        self._live()
        for segment in self._segments.snapshot():
            log = segment.log
            k, count = 0, log.count
            while k < count:
                record = log.record(k)
                cached = self._cache.get(record.raft_index)
                if cached is not None:
                    # Possibly not written yet: from memory.
                    yield record.raft_index, bytes(cached.payload[:BATCH_HEADER_SIZE])
                    k += 1
                    continue
                # The headers of the entries that follow within _HEADERS_READ bytes come
                # with one read: a log of many small batches opens without a read per
                # batch, a log of large ones reads only their headers.
                run = [record]
                k += 1
                while k < count:
                    following = log.record(k)
                    end = following.position + HEADER_SIZE + BATCH_HEADER_SIZE
                    if (
                        end - record.position > _HEADERS_READ
                        or self._cache.get(following.raft_index) is not None
                    ):
                        break
                    run.append(following)
                    k += 1
                if len(run) == 1:
                    yield (
                        record.raft_index,
                        segment.read(record.position + HEADER_SIZE, BATCH_HEADER_SIZE),
                    )
                    continue
                span = segment.read(
                    record.position,
                    run[-1].position + HEADER_SIZE + BATCH_HEADER_SIZE - record.position,
                )
                for entry in run:
                    start = entry.position - record.position + HEADER_SIZE
                    yield entry.raft_index, span[start : start + BATCH_HEADER_SIZE]

    def _locate_offset(self, offset: int) -> tuple[int, int] | None:
        """(segment number, log record number) of the batch holding `offset`, or of the first
        batch after it; None if no stored batch ends at or after `offset`."""
        if offset >= self._next_offset:
            return None
        segments = self._segments
        for number in range(segments.number_for_offset(offset), len(segments)):
            segment = segments[number]
            k = segment.log.find_offset(offset)
            if k < segment.log.count:
                return number, k
        return None

    # -- durability, retention, lifecycle ----------------------------------------------

    def sync(self) -> None:
        """Write what is queued and make it durable; safe to call from another thread while
        the owner appends (see durability.py)."""
        self._tracker.sync()

    def _flush_indexes(self, force: bool = False) -> None:
        """Write out the index records of entries already durable."""
        durable = self._tracker.durable_index
        if durable <= self._index_flushed:
            return
        if not force and not self._unsealed_closed:
            if durable - self._index_flushed < _INDEX_FLUSH_EVERY:
                return
        for segment in [*self._unsealed_closed, self._segments.active]:
            segment.flush_indexes_through(durable)
        still_open = []
        for segment in self._unsealed_closed:
            if segment.indexes_flushed():
                segment.seal_indexes()
            else:
                still_open.append(segment)
        self._unsealed_closed = still_open
        self._index_flushed = durable

    def reset(self, first_index: int, first_offset: int) -> None:
        self._live()
        with self._tracker.writes_paused():
            for segment in self._segments.snapshot():
                self._delete_segment(segment)
            # Removals before the creation: a crash in between leaves an empty log here.
            self._tracker.sync_directory()
            segment = Segment.create(self._directory, first_index, first_offset, self._spare)
            if segment.preallocated:
                self._spare = None
            self._segments = SegmentList([segment])
            self._tracker.restart_at(first_index - 1)
            self._tracker.directory_changed()
        self._size = 0
        self._unsealed_closed = []
        self._cache = RecentCache(self._options.cache_bytes, first_index)
        self._index_flushed = first_index - 1
        self._recompute_offsets()
        self._maybe_prepare_spare()

    def apply_retention(
        self, now_ms: int, keep_from: int | None = None, drop_before: int | None = None
    ) -> int:
        self._live()
        retention = self._options.retention
        if retention.max_bytes is None and retention.max_age_ms is None and drop_before is None:
            return 0
        deadline = None if retention.max_age_ms is None else now_ms - retention.max_age_ms
        removed = 0
        segments = self._segments
        while len(segments) > 1:
            oldest = segments.first
            if keep_from is not None and segments[1].first_index > keep_from:
                break  # it holds entries the replica has not applied yet
            if any(oldest in held for held in self._pins.values()):
                break  # being sent to a follower
            # Below the log start (DeleteRecords): every entry of the segment is before it.
            expired = drop_before is not None and segments[1].first_index <= drop_before
            if not expired:
                expired = retention.max_bytes is not None and self._size > retention.max_bytes
            if not expired and deadline is not None:
                newest = oldest.newest_timestamp(closed=True)
                expired = (oldest.mtime_ms() if newest is None else newest) < deadline
            if not expired:
                break
            segments.pop_first()
            removed += oldest.raft.count
            self._delete_segment(oldest)
        if removed:
            # Entries of the deleted segments still queued went with them (`retire`).
            self._cache.drop_before(self.first_index())
            self._recompute_offsets()
            self._tracker.directory_changed()
        return removed

    def closed_segments(self, upto: int) -> ClosedSegments:
        self._live()
        return self._hold(upto)

    def _hold(self, upto: int, stop: Callable[[Segment], bool] | None = None) -> ClosedSegments:
        """Hold the closed segments, oldest first, up to the first that ends after raft
        index `upto`, is not durable yet, or (if given) meets `stop`."""
        # A closed segment's queued entries may not be in its file yet.
        upto = min(upto, self._tracker.durable_index)
        held: list[Segment] = []
        for segment in self._segments.snapshot()[:-1]:
            if segment.last_index > upto or (stop is not None and stop(segment)):
                break
            held.append(segment)
        files = [
            SegmentFile(s.path.name, s.path, s.size, s.first_index, s.last_index) for s in held
        ]
        pin = ClosedSegments(files, self._unpin)
        if held:
            self._pins[pin] = held
        return pin

    def _unpin(self, pin: ClosedSegments) -> None:
        self._pins.pop(pin, None)

    def _invalidate_pins(self, segment: Segment | None = None) -> None:
        """Break the holds on `segment` (None: on every segment)."""
        for pin, held in list(self._pins.items()):
            if segment is None or segment in held:
                pin.invalidate()
                del self._pins[pin]

    # -- log compaction (cleaning.py) ---------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._directory

    def hold_for_cleaning(self, upto: int, newest_ms: int) -> ClosedSegments:
        """Hold the closed, durable segments that end at or before raft index `upto` and
        whose newest batch timestamp is at most `newest_ms`: the first ones in log order
        only, so the part held is a prefix of the log (min.compaction.lag.ms, KIP-58)."""
        self._live()
        self._flush_indexes()  # seals the closed segments whose entries are all durable

        def too_new_or_unsealed(segment: Segment) -> bool:
            newest = segment.newest_timestamp(closed=True)
            # A segment whose index records are not all written yet is not cleaned yet.
            return (newest is not None and newest > newest_ms) or segment in self._unsealed_closed

        return self._hold(upto, too_new_or_unsealed)

    def first_timestamp_after(self, index: int) -> int | None:
        """maxTimestamp of the first DATA entry after raft index `index` (None if there is
        none): where the part of the log not cleaned yet starts, for max.compaction.lag.ms."""
        self._live()
        start = max(index + 1, self.first_index())
        if start > self.last_index():
            return None
        segments = self._segments
        for number in range(segments.number_holding_index(start), len(segments)):
            log = segments[number].log
            k = log.count_before(start)
            if k < log.count:
                return log.record(k).max_timestamp
        return None

    def replace_segment(self, pin: ClosedSegments, staged: StagedSegment) -> bool:
        """Swap the cleaned copy `staged` in for its segment, held by `pin`; False (nothing
        changed) if the hold broke or the segment is being sent in a snapshot.

        Crash safety: the old index files go first, then the log file is replaced by a
        rename, then the new index files arrive, a directory sync after each step. At any
        point the directory holds a whole log file (old or new) and no index file of the
        other one; recovery re-indexes a closed segment without index files by reading it."""
        self._live()
        held = self._pins.get(pin)
        segment = next((s for s in held or () if s.path == staged.file.path), None)
        if pin.broken or held is None or segment is None:
            return False
        if any(segment in other for key, other in self._pins.items() if key is not pin):
            return False
        number = self._segments.number_holding_index(segment.first_index)
        if self._segments[number] is not segment or number == len(self._segments) - 1:
            return False
        directory = self._directory
        stem = segment.stem
        segment.raft.records.delete()
        segment.log.records.delete()
        log_swap.fsync_directory(directory)
        os.rename(staged.directory / staged.file.name, segment.path)
        log_swap.fsync_directory(directory)
        for suffix in (raft_index.SUFFIX, log_index.SUFFIX):
            os.rename(staged.directory / (stem + suffix), directory / (stem + suffix))
        log_swap.fsync_directory(directory)
        new, complete = recover_segment(
            directory, segment.first_index, segment.start_offset, segment.next_index
        )
        if not complete or new.last_index != segment.last_index:
            raise CorruptionError(f"segment {stem}: its cleaned copy did not open whole")
        new.seal_indexes()
        self._tracker.retire(segment.fd)
        self._segments.replace(number, new)
        held[held.index(segment)] = new
        self._size += new.size - segment.size
        if self._cache.first_index <= new.last_index:
            self._cache.drop_before(new.last_index + 1)
        return True

    def stage_snapshot(self) -> SnapshotStaging:
        self._live()
        return SegmentStaging(log_swap.new_staging_path(self._directory), self._roll_at)

    def install_snapshot(self, staging: SnapshotStaging) -> None:
        self._live()
        if (
            not isinstance(staging, SegmentStaging)
            or not staging.finished
            or staging.directory.parent != self._directory
        ):
            raise StorageError("only a finished staging of this store can be installed")
        self._invalidate_pins()
        if self._spare is not None:
            # Loading the new log removes spare files (recovery cannot trust them).
            self._spare.discard()
            self._spare = None
        with self._tracker.writes_paused():
            log_swap.commit(self._directory, staging.directory)
            try:
                for segment in self._segments.snapshot():
                    self._tracker.retire(segment.fd)
                    segment.close_indexes()
                log_swap.roll_forward(self._directory)
                segments = _load_segments(self._directory, None)
            except BaseException:
                # The new log is committed; opening the store again finishes the swap.
                self._closed = True
                self._tracker.close()
                raise
            self._tracker.restart_at(segments[-1].last_index)
        self._adopt(segments)
        self._maybe_prepare_spare()

    def _delete_segment(self, segment: Segment) -> None:
        self._invalidate_pins(segment)
        if segment in self._unsealed_closed:
            self._unsealed_closed.remove(segment)
        self._size -= segment.size
        self._tracker.retire(segment.fd)
        segment.delete_files()

    def size_bytes(self) -> int:
        return self._size

    def set_retention(self, retention: LogRetention) -> None:
        self._options = replace(self._options, retention=retention)

    def set_segment_ms(self, segment_ms: int | None) -> None:
        """segment.ms changed: it applies from the next append."""
        self._options = replace(self._options, segment_ms=segment_ms)
        self._roll_ms = segment_ms

    def segment_count(self) -> int:
        return len(self._segments)

    def bytes_after(self, index: int) -> int | None:
        # Arithmetic on the raft index: the entry's position in its segment, and the sizes
        # of the segments after it (entry headers included: the bytes on disk).
        self._live()
        start = max(index + 1, self.first_index())
        if start > self.last_index():
            return 0
        segments = self._segments
        number = segments.number_holding_index(start)
        holding = segments[number]
        total = holding.size - holding.raft.position(start)
        for later in range(number + 1, len(segments)):
            total += segments[later].size
        return total

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._tracker.healthy():
                self._tracker.sync()
                self._flush_indexes(force=True)
        finally:
            self._closed = True
            self._invalidate_pins()
            if self._spare is not None:
                self._spare.discard()
                self._spare = None
            self._tracker.close()
            for segment in self._segments.snapshot():
                os.close(segment.fd)
                segment.close_indexes()

    # -- helpers ---------------------------------------------------------------------

    def _live(self) -> None:
        if self._closed:
            raise StorageError("log store is closed")

    def _recompute_offsets(self) -> None:
        segments = self._segments.snapshot()
        self._next_offset = segments[-1].start_offset
        for segment in reversed(segments):
            if segment.log.count:
                self._next_offset = segment.log.record(segment.log.count - 1).last_offset + 1
                break
        self._first_offset = self._next_offset
        for segment in segments:
            if segment.log.count:
                self._first_offset = segment.log.record(0).base_offset
                break


def _load_segments(directory: Path, dir_fd: int | None) -> list[Segment]:
    """Recover the segments of `directory` (a new one if there are none) and make what
    recovery kept durable and indexed."""
    segments: list[Segment] = []
    try:
        segments = open_segments(directory)
        if not segments:
            segments = [Segment.create(directory, 1, 0)]
        # Whatever recovery kept beyond the old indexes becomes durable here, so its
        # rebuilt index records may be written (and cuts and removals stick).
        for segment in segments:
            if not segment.raft.records.sealed:
                os.fdatasync(segment.fd)
        if dir_fd is None:
            log_swap.fsync_directory(directory)
        else:
            os.fsync(dir_fd)
        for segment in segments:
            segment.flush_indexes_through(segment.last_index)
        for segment in segments[:-1]:
            segment.seal_indexes()
    except BaseException:
        for segment in segments:
            os.close(segment.fd)
            segment.close_indexes()
        raise
    return segments


def _read_entries(
    segment: Segment, lo: int, hi: int, budget: int | None, first_is_free: bool
) -> list[Entry]:
    """Entries lo..hi-1 of `segment` within `budget` payload bytes, with one pread."""
    start = segment.position_of(lo)
    end = start
    index = lo
    spent = 0
    while index < hi:
        following = segment.position_of(index + 1)
        length = following - end - HEADER_SIZE
        if budget is not None and spent + length > budget and not (first_is_free and index == lo):
            break
        spent += length
        end = following
        index += 1
    data = segment.read(start, end - start)
    out: list[Entry] = []
    at = 0
    for expected in range(lo, index):
        _, length, term, got, kind = HEADER.unpack_from(data, at)
        if got != expected or not entry_is_intact(data, at, length):
            raise CorruptionError(f"segment {segment.stem}: entry {expected} fails its CRC")
        body = at + HEADER_SIZE
        out.append(Entry(term, expected, EntryType(kind), data[body : body + length]))
        at = body + length
    return out


def _read_batches(segment: Segment, records: list[BatchRecord], out: list[Buffer]) -> None:
    """Append the payloads of `records` (consecutive DATA entries of `segment`) to `out`
    as views into one pread covering them all."""
    if not records:
        return
    start = records[0].position
    last = records[-1]
    data = memoryview(segment.read(start, last.position + HEADER_SIZE + last.length - start))
    for record in records:
        at = record.position - start
        if HEADER.unpack_from(data, at)[3] != record.raft_index or not entry_is_intact(
            data, at, record.length
        ):
            raise CorruptionError(
                f"segment {segment.stem}: entry {record.raft_index} fails its CRC"
            )
        out.append(data[at + HEADER_SIZE : at + HEADER_SIZE + record.length])
