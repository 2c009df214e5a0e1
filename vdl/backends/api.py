"""The two storage interfaces every backend implements: `LogStore` and `MetaStore`.

A log store holds one log stream's Raft log. Each entry carries Raft's (term, index) and a
type; the payload of a DATA entry is exactly one Kafka RecordBatch v2 whose baseOffset has
already been assigned, so one write serves both Raft and readers (no double I/O).

Stores are synchronous and single-threaded with one exception: `sync()` may run in a worker
thread while the owning thread keeps appending. `sync()` writes (if the store deferred it)
and makes durable at least every entry appended before it was called, which is what lets
one flusher turn many appends into one fdatasync (group commit) and keeps disk writes off
the owning thread.

Snapshots (a follower too far behind for its leader's log) move a log as it is stored: the
leader's `closed_segments` are files copied byte for byte, the rest goes as entries, and
the follower receives both into a `SnapshotStaging` apart from its log, then swaps its
whole log for it with `install_snapshot`. A store without segment files serves and takes
entries only.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from vdl.log.batch_header import HEADER_SIZE, offset_range

# Any buffer a batch may be held in; stores hand out memoryviews of their own reads.
Buffer = bytes | bytearray | memoryview


class EntryType(enum.IntEnum):
    DATA = 1  # payload: one RecordBatch v2 with its offsets assigned
    NOOP = 2  # Raft-only (e.g. a new leader's empty entry); no record offsets
    CONFIG = 3  # Raft-only membership change; no record offsets


@dataclass(frozen=True, slots=True)
class Entry:
    term: int
    index: int
    type: EntryType
    # A bytearray or a memoryview is accepted so a batch whose offsets were just rewritten
    # in place (in the buffer it was received into) is stored without another copy. Nobody
    # mutates a payload once it is in an Entry: a store may keep it and write it later.
    payload: Buffer


class StorageError(Exception):
    """A store cannot do what was asked (bad arguments, closed, I/O failure)."""


class CorruptionError(StorageError):
    """Stored bytes fail their checksum somewhere other than a torn tail."""


def batch_offsets(payload: Buffer) -> tuple[int, int]:
    """Return (first, last) record offset of a RecordBatch v2 payload.

    Backends need only these two header fields to index data entries by record offset.
    """
    if len(payload) < HEADER_SIZE:
        raise StorageError(f"record batch too short: {len(payload)} bytes")
    return offset_range(payload)


@dataclass(frozen=True, slots=True)
class LogRetention:
    """Limits under which closed segments (or their equivalent) are deleted.

    None means unlimited. The active (last) segment is never deleted by retention.
    """

    max_bytes: int | None = None
    max_age_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LogStoreOptions:
    segment_bytes: int = 64 * 1024 * 1024  # roll target for one segment
    cache_bytes: int = 8 * 1024 * 1024  # recent-entries cache for tailing reads
    # Zero-fill each segment ahead of use, so appends are overwrites whose fdatasync needs
    # no journal commit: lone acks get faster, but every byte is written twice, so it is
    # off by default (see vdl/backends/segment/preallocate.py for the measurements).
    preallocate: bool = False
    retention: LogRetention = LogRetention()
    # segment.ms: a DATA entry whose batch is more than this newer than the active
    # segment's first batch starts a new segment (None: by size only). Segment store only.
    segment_ms: int | None = None


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """The file of one closed segment: a copy of it, byte for byte, is that segment."""

    name: str  # the file's name in its store's directory, and in a staging directory
    path: Path
    size: int
    first_index: int
    last_index: int


class ClosedSegments:
    """Closed segment files of a store, held while they are copied (a snapshot served).

    Until `release()` retention keeps them. Anything else that removes or cuts one of them
    (a truncation, a reset or install, closing the store) makes the hold `broken`: bytes
    read from the files after that may not be the entries they held, so the copy is to be
    abandoned."""

    def __init__(
        self,
        files: Sequence[SegmentFile] = (),
        on_release: Callable[[ClosedSegments], None] | None = None,
    ) -> None:
        self.files = tuple(files)
        self.broken = False
        self._on_release = on_release

    def invalidate(self) -> None:
        self.broken = True

    def release(self) -> None:
        on_release, self._on_release = self._on_release, None
        if on_release is not None:
            on_release(self)


class SnapshotStaging(Protocol):
    """A log being received for a store (a snapshot), kept apart from the store's log
    until `LogStore.install_snapshot`.

    The log arrives as `start`, then segment files (only if `takes_files`), each as
    `begin_file`, `write`s and `end_file`, then entries; either part may be empty. Every
    method may block on the disk and none touches the store: call them from a worker
    thread, one at a time. Each raises StorageError when what arrived cannot be that log
    (an entry failing its CRC, a gap, a file of another name or size than announced)."""

    @property
    def takes_files(self) -> bool: ...

    def start(self, first_index: int, first_offset: int) -> None:
        """The log starts at Raft index `first_index`, its records at `first_offset`."""
        ...

    def begin_file(self, name: str, size: int) -> None: ...

    def write(self, data: Buffer) -> None: ...

    def end_file(self) -> None:
        """The file is complete: check every entry in it."""
        ...

    def add_entries(self, entries: Sequence[Entry]) -> None: ...

    def finish(self, last_index: int, last_term: int) -> None:
        """Check that the staged log runs from its start to `last_index` without a gap and
        that its last entry has term `last_term`, and make it durable."""
        ...

    def discard(self) -> None:
        """Remove whatever was staged (also once finished, if it is not installed)."""
        ...


class LogStore(Protocol):
    """One log stream's Raft log, addressable by Raft index and by record offset.

    Raft indexes are contiguous from `first_index()` to `last_index()`; an empty store has
    `last_index() == first_index() - 1`. Record offsets of DATA entries are contiguous and
    increasing in index order (the layer above assigns them).
    """

    def first_index(self) -> int:
        """Index of the first entry still stored (1 for a new store)."""
        ...

    def last_index(self) -> int:
        """Index of the last entry stored (first_index() - 1 when empty)."""
        ...

    def term_at(self, index: int) -> int:
        """Term of the entry at `index`; raises StorageError if not stored."""
        ...

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries; the first must have index last_index() + 1.

        Queued or written to the OS, and readable at once, but not necessarily durable
        until `sync()` covers it. The store may keep the payloads until then.
        """
        ...

    def truncate_suffix(self, from_index: int) -> None:
        """Delete every entry with index >= from_index (Raft log conflict)."""
        ...

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries with lo <= index < hi; at least one if any exists, then up to max_bytes."""
        ...

    def first_offset(self) -> int:
        """Log start offset: the first record offset still stored (0 for a new store)."""
        ...

    def next_offset(self) -> int:
        """Log end offset: the offset the next appended record would get."""
        ...

    def index_of_offset(self, offset: int) -> int | None:
        """Raft index of the DATA entry whose batch holds `offset`, or of the first DATA
        entry after it if `offset` falls in a gap; None if no such entry is stored."""
        ...

    def read_batches(self, offset: int, max_bytes: int, max_index: int) -> list[Buffer]:
        """Record batches from the one holding `offset`, in order, up to Raft index
        `max_index` (the commit point). The first batch is returned whatever its size; later
        ones only while the total stays within max_bytes. Whole batches only."""
        ...

    def data_headers(self) -> Iterator[tuple[int, bytes]]:
        """(raft index, first 61 bytes of the batch) for every stored DATA entry, in order;
        used to rebuild producer state and to search timestamps."""
        ...

    def sync(self) -> None:
        """Write and make durable every entry appended before this call (writes still
        queued, then fdatasync or equivalent).

        The only method that may run in another thread concurrently with `append`."""
        ...

    def apply_retention(
        self, now_ms: int, keep_from: int | None = None, drop_before: int | None = None
    ) -> int:
        """Delete whole closed segments beyond the configured retention, never an entry at
        or after `keep_from` (a replica keeps what it has not applied yet); return how many
        entries were removed. first_index()/first_offset() move forward accordingly.
        `drop_before`: closed segments whose entries all lie before this index go too,
        whatever the limits (the log start moved by DeleteRecords); a store without
        segment files may keep them until its retention removes them."""
        ...

    def reset(self, first_index: int, first_offset: int) -> None:
        """Drop every entry: the log goes on at `first_index`, its records from
        `first_offset` (a follower taking a snapshot of a log whose prefix is gone)."""
        ...

    def closed_segments(self, upto: int) -> ClosedSegments:
        """The closed segments from the start of the log whose entries all lie at or before
        `upto` and are durable, held for copying until released (see ClosedSegments).
        Empty for a store without segment files."""
        ...

    def stage_snapshot(self) -> SnapshotStaging:
        """A new place to receive a whole log into; nothing of the store changes."""
        ...

    def install_snapshot(self, staging: SnapshotStaging) -> None:
        """Replace the whole log with a finished `staging` of this store. The segment
        backend swaps files so that a crash at any point leaves the old log or the new one,
        never a mix; the new log is durable when this returns (other backends: after
        `sync()`)."""
        ...

    def size_bytes(self) -> int:
        """Bytes of log data currently stored."""
        ...

    def set_retention(self, retention: LogRetention) -> None:
        """Use `retention` from the next `apply_retention` on (a topic's retention settings
        changed while the store is open)."""
        ...

    def set_segment_ms(self, segment_ms: int | None) -> None:
        """Use `segment_ms` (segment.ms: see LogStoreOptions) from the next append on (the
        topic's setting changed while the store is open); None: roll by size only."""
        ...

    def segment_count(self) -> int:
        """Segment files the log occupies (0 for a backend that keeps no segment files)."""
        ...

    def bytes_after(self, index: int) -> int | None:
        """Bytes of the stored entries after `index`: what a follower whose log matches up
        to `index` still lacks. None where the backend cannot tell without reading them."""
        ...

    def close(self) -> None: ...


class MetaStore(Protocol):
    """Small, strongly durable key-value metadata: topics, Raft hard state, offsets.

    Every write is synced before it returns.
    """

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def write_batch(
        self, puts: dict[bytes, bytes], deletes: Sequence[bytes] = (), *, sync: bool = True
    ) -> None:
        """Apply all puts and deletes atomically; durable on return unless `sync` is False.

        An unsynced batch survives the process being killed (the OS holds it) but not the
        machine failing; it is for state rebuilt from a durable log anyway (what group 0's
        commands write), where a synced write per command would only cost an fdatasync.
        Batches stay in order: a later synced write makes every earlier one durable too.
        """
        ...

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) whose key starts with prefix, in key order."""
        ...

    def close(self) -> None: ...
