"""`LogStore` on RocksDB: one database per log stream (key layout in `log_keys`).

Appends go to the WAL without syncing; `sync()` fsyncs the WAL, which covers every write
made before it because the WAL is one ordered file (truncations and retention included).
That is what lets a flusher thread group-commit many appends.

Snapshots: there are no segment files to copy, so a snapshot is served and taken as
entries (`entry_staging.py`) and installed with `reset` and `append`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from rocksdict import Rdict, WriteBatch

from vdl.backends.api import (
    Buffer,
    ClosedSegments,
    CorruptionError,
    Entry,
    EntryType,
    LogRetention,
    LogStoreOptions,
    SnapshotStaging,
    StorageError,
    batch_offsets,
)
from vdl.backends.entry_staging import EntryStaging
from vdl.backends.rocks.db import open_raw, rocks_errors, write_options
from vdl.backends.rocks.log_keys import (
    ENTRY_HEADER_SIZE,
    ENTRY_KEYS_END,
    ENTRY_PREFIX,
    META_FIRST_INDEX,
    META_FLOOR_OFFSET,
    META_SIZE,
    OFFSET_KEYS_END,
    OFFSET_PREFIX,
    decode_entry,
    decode_entry_header,
    decode_offset_value,
    decode_u64,
    encode_entry,
    encode_offset_value,
    encode_u64,
    entry_key,
    key_number,
    offset_key,
)
from vdl.backends.rocks.log_retention import plan_retention
from vdl.log.batch_header import HEADER_SIZE as BATCH_HEADER_SIZE

_UNSYNCED = write_options(sync=False)


class RocksLogStore:
    def __init__(self, db: Rdict, options: LogStoreOptions) -> None:
        self._db: Rdict | None = db
        self._options = options
        # Taken by sync() and close() only, so that close() cannot pull the database away
        # from a sync running in a worker thread, while appends never wait for a sync.
        self._lifecycle = threading.Lock()
        # Everything below is a cache of what the database holds, recovered on open.
        self._first_index = 1
        self._last_index = 0
        self._last_term = 0
        self._floor_offset = 0
        self._first_data_offset: int | None = None
        self._next_offset = 0
        self._size = 0
        with rocks_errors("cannot recover log store"):
            self._recover(db)

    @classmethod
    def open(cls, directory: Path, options: LogStoreOptions) -> RocksLogStore:
        # The block cache plays the part of the segment backend's recent-entries cache,
        # alongside the memtable, which already holds the newest entries.
        db = open_raw(directory, block_cache_bytes=options.cache_bytes)
        try:
            return cls(db, options)
        except BaseException:
            db.close()
            raise

    def _recover(self, db: Rdict) -> None:
        self._first_index = decode_u64(db.get(META_FIRST_INDEX), 1)
        self._floor_offset = decode_u64(db.get(META_FLOOR_OFFSET), 0)
        self._size = decode_u64(db.get(META_SIZE), 0)
        it = db.iter()
        it.seek_for_prev(ENTRY_KEYS_END)
        if it.valid() and it.key().startswith(ENTRY_PREFIX):
            self._last_index = key_number(it.key())
            self._last_term = decode_entry_header(self._last_index, it.value())[0]
            it.seek(ENTRY_PREFIX)
            if key_number(it.key()) != self._first_index:
                raise CorruptionError(
                    f"first stored entry is {key_number(it.key())}, "
                    f"metadata says {self._first_index}"
                )
        else:
            self._last_index = self._first_index - 1
        self._reload_offsets(db)

    def _reload_offsets(self, db: Rdict) -> None:
        """Re-derive the offset bounds from the offset index after it changed."""
        it = db.iter()
        it.seek(OFFSET_PREFIX)
        if it.valid() and it.key().startswith(OFFSET_PREFIX):
            self._first_data_offset = key_number(it.key())
            it.seek_for_prev(OFFSET_KEYS_END)
            self._next_offset = decode_offset_value(it.value())[1] + 1
        else:
            self._first_data_offset = None
            self._next_offset = self._floor_offset

    # -- Raft side -------------------------------------------------------------------

    def first_index(self) -> int:
        return self._first_index

    def last_index(self) -> int:
        return self._last_index

    def term_at(self, index: int) -> int:
        if index == self._last_index and index >= self._first_index:
            return self._last_term
        if not self._first_index <= index <= self._last_index:
            raise StorageError(
                f"no entry {index}: stored are {self._first_index}..{self._last_index}"
            )
        return self._read_term(self._live(), index)

    @staticmethod
    def _read_term(db: Rdict, index: int) -> int:
        with rocks_errors(f"cannot read entry {index}"):
            value: bytes | None = db.get(entry_key(index))
        if value is None:
            raise CorruptionError(f"entry {index} is missing")
        return decode_entry_header(index, value)[0]

    def append(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        db = self._live()
        batch = WriteBatch(raw_mode=True)
        index, size, next_offset = self._last_index, self._size, self._next_offset
        first_data_offset = self._first_data_offset
        for entry in entries:
            index += 1
            if entry.index != index:
                raise StorageError(f"entry {entry.index} appended where {index} was expected")
            value = encode_entry(entry)
            batch.put(entry_key(index), value)
            size += len(value)
            if entry.type == EntryType.DATA:
                first, last = batch_offsets(entry.payload)
                # The offset index is searched by seeking, which is only right while
                # offsets grow with the Raft index.
                if first < next_offset or last < first:
                    raise StorageError(
                        f"entry {index}: batch offsets {first}..{last} "
                        f"do not follow offset {next_offset}"
                    )
                batch.put(offset_key(first), encode_offset_value(index, last))
                if first_data_offset is None:
                    first_data_offset = first
                next_offset = last + 1
        batch.put(META_SIZE, encode_u64(size))
        with rocks_errors("append failed"):
            db.write(batch, _UNSYNCED)
        self._last_index, self._last_term = index, entries[-1].term
        self._size, self._next_offset = size, next_offset
        self._first_data_offset = first_data_offset

    def truncate_suffix(self, from_index: int) -> None:
        db = self._live()
        start = max(from_index, self._first_index)
        if start > self._last_index:
            return
        removed, first_removed_offset = 0, None
        with rocks_errors("truncate failed"):
            for index, value in self._scan_entries(db, start):
                removed += len(value)
                if first_removed_offset is None:
                    _, kind = decode_entry_header(index, value)
                    if kind == EntryType.DATA:
                        payload = memoryview(value)[ENTRY_HEADER_SIZE:]
                        first_removed_offset = batch_offsets(payload)[0]
            batch = WriteBatch(raw_mode=True)
            batch.delete_range(entry_key(start), entry_key(self._last_index + 1))
            if first_removed_offset is not None:
                batch.delete_range(offset_key(first_removed_offset), OFFSET_KEYS_END)
            batch.put(META_SIZE, encode_u64(self._size - removed))
            db.write(batch, _UNSYNCED)
            self._size -= removed
            self._last_index = start - 1
            self._last_term = 0
            if self._last_index >= self._first_index:
                self._last_term = self._read_term(db, self._last_index)
            if first_removed_offset is not None:
                self._reload_offsets(db)

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        if lo < self._first_index:
            raise StorageError(f"entry {lo} is before the first stored {self._first_index}")
        hi = min(hi, self._last_index + 1)
        out: list[Entry] = []
        if lo >= hi:
            return out
        db = self._live()
        total = 0
        with rocks_errors(f"cannot read entries {lo}..{hi}"):
            for index, value in self._scan_entries(db, lo):
                if index >= hi:
                    break
                entry = decode_entry(index, value)
                total += len(entry.payload)
                if out and max_bytes is not None and total > max_bytes:
                    break
                out.append(entry)
        return out

    # -- reader side -----------------------------------------------------------------

    def first_offset(self) -> int:
        if self._first_data_offset is None:
            return self._floor_offset
        return self._first_data_offset

    def next_offset(self) -> int:
        return self._next_offset

    def index_of_offset(self, offset: int) -> int | None:
        if offset >= self._next_offset or self._first_data_offset is None:
            return None
        db = self._live()
        with rocks_errors(f"cannot look up offset {offset}"):
            it = db.iter()
            it.seek_for_prev(offset_key(offset))
            if it.valid() and it.key().startswith(OFFSET_PREFIX):
                index, last = decode_offset_value(it.value())
                if offset <= last:
                    return index
                it.next()  # `offset` lies in a gap: the next batch after it
            else:
                it.seek(OFFSET_PREFIX)  # `offset` lies before the first stored batch
            if it.valid() and it.key().startswith(OFFSET_PREFIX):
                return decode_offset_value(it.value())[0]
        return None

    def read_batches(self, offset: int, max_bytes: int, max_index: int) -> list[Buffer]:
        start = self.index_of_offset(offset)
        out: list[Buffer] = []
        if start is None or start > max_index:
            return out
        db = self._live()
        total = 0
        with rocks_errors(f"cannot read batches from offset {offset}"):
            for index, value in self._scan_entries(db, start):
                if index > max_index:
                    break
                if decode_entry_header(index, value)[1] != EntryType.DATA:
                    continue
                total += len(value) - ENTRY_HEADER_SIZE
                if out and total > max_bytes:
                    break
                out.append(memoryview(value)[ENTRY_HEADER_SIZE:])
        return out

    def data_headers(self) -> Iterator[tuple[int, bytes]]:
        db = self._live()
        with rocks_errors("cannot read batch headers"):
            for index, value in self._scan_entries(db, self._first_index):
                if decode_entry_header(index, value)[1] == EntryType.DATA:
                    yield index, value[ENTRY_HEADER_SIZE : ENTRY_HEADER_SIZE + BATCH_HEADER_SIZE]

    # -- durability, retention, lifecycle ------------------------------------------

    def sync(self) -> None:
        with self._lifecycle:
            db = self._live()
            with rocks_errors("sync failed"):
                db.flush_wal(True)

    def reset(self, first_index: int, first_offset: int) -> None:
        db = self._live()
        with rocks_errors("reset failed"):
            batch = WriteBatch(raw_mode=True)
            batch.delete_range(entry_key(0), ENTRY_KEYS_END)
            batch.delete_range(OFFSET_PREFIX, OFFSET_KEYS_END)
            batch.put(META_FIRST_INDEX, encode_u64(first_index))
            batch.put(META_FLOOR_OFFSET, encode_u64(first_offset))
            batch.put(META_SIZE, encode_u64(0))
            db.write(batch, _UNSYNCED)
            self._first_index, self._last_index, self._last_term = first_index, first_index - 1, 0
            self._floor_offset, self._size = first_offset, 0
            self._reload_offsets(db)

    def apply_retention(
        self, now_ms: int, keep_from: int | None = None, drop_before: int | None = None
    ) -> int:
        # No segment files: entries below a DeleteRecords log start (`drop_before`) stay
        # until the limits below remove them; readers never see them (the stream's start).
        retention = self._options.retention
        if retention.max_bytes is None and retention.max_age_ms is None:
            return 0
        db = self._live()
        with rocks_errors("retention failed"):
            cut = plan_retention(
                self._scan_entries(db, self._first_index),
                first_index=self._first_index,
                # plan_retention never cuts at or after last_index.
                last_index=self._last_index
                if keep_from is None
                else min(self._last_index, keep_from),
                size=self._size,
                options=self._options,
                now_ms=now_ms,
            )
            removed = cut.keep_from - self._first_index
            if removed == 0:
                return 0
            floor = self._floor_offset if cut.next_floor_offset is None else cut.next_floor_offset
            batch = WriteBatch(raw_mode=True)
            # Range deletes: one tombstone per keyspace however many entries go.
            batch.delete_range(entry_key(self._first_index), entry_key(cut.keep_from))
            if cut.next_floor_offset is not None:
                batch.delete_range(OFFSET_PREFIX, offset_key(floor))
            batch.put(META_FIRST_INDEX, encode_u64(cut.keep_from))
            batch.put(META_FLOOR_OFFSET, encode_u64(floor))
            batch.put(META_SIZE, encode_u64(self._size - cut.removed_bytes))
            db.write(batch, _UNSYNCED)
            self._first_index, self._floor_offset = cut.keep_from, floor
            self._size -= cut.removed_bytes
            self._reload_offsets(db)
        return removed

    def closed_segments(self, upto: int) -> ClosedSegments:
        self._live()
        return ClosedSegments()

    def stage_snapshot(self) -> SnapshotStaging:
        self._live()
        return EntryStaging()

    def install_snapshot(self, staging: SnapshotStaging) -> None:
        if not isinstance(staging, EntryStaging) or not staging.finished:
            raise StorageError("only a finished staging of entries can be installed here")
        self.reset(staging.first_index, staging.first_offset)
        entries = staging.entries
        for start in range(0, len(entries), 1024):
            self.append(entries[start : start + 1024])
        staging.discard()

    def size_bytes(self) -> int:
        return self._size

    def set_retention(self, retention: LogRetention) -> None:
        self._options = replace(self._options, retention=retention)

    def set_segment_ms(self, segment_ms: int | None) -> None:
        """Recorded, and otherwise without effect: entries live in RocksDB's own files, so
        there are no segments to roll (by time or by size)."""
        self._options = replace(self._options, segment_ms=segment_ms)

    def segment_count(self) -> int:
        return 0  # entries live in RocksDB's own files

    def bytes_after(self, index: int) -> int | None:
        return None  # only by reading the entries' values

    def close(self) -> None:
        with self._lifecycle:
            db, self._db = self._db, None
            if db is not None:
                with rocks_errors("close failed"):
                    # A clean close leaves nothing for WAL recovery to drop.
                    db.flush_wal(True)
                    db.close()

    def _live(self) -> Rdict:
        db = self._db
        if db is None:
            raise StorageError("log store is closed")
        return db

    @staticmethod
    def _scan_entries(db: Rdict, start: int) -> Iterator[tuple[int, bytes]]:
        """(index, encoded value) of stored entries from `start` on, in index order."""
        it = db.iter()
        it.seek(entry_key(start))
        while it.valid():
            key: bytes = it.key()
            if not key.startswith(ENTRY_PREFIX):
                return
            yield key_number(key), it.value()
            it.next()
