"""Log index of one segment: one record per DATA entry, in offset order.

Record (40 bytes, little-endian): base offset i64, last offset i64, raft index u64,
max timestamp i64, position u32 (of the entry's header), payload length u32.
Searching by last offset finds the batch holding an offset, or the first batch after a gap,
with one binary search. The max timestamp is kept so age retention never reads batches.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

from vdl.backends.segment.record_file import RecordFile

RECORD = struct.Struct("<qqQqII")
_LAST_OFFSET = struct.Struct("<q")
_LAST_OFFSET_AT = 8
_RAFT_INDEX = struct.Struct("<Q")
_RAFT_INDEX_AT = 16
SUFFIX = ".log_index"


class BatchRecord(NamedTuple):
    base_offset: int
    last_offset: int
    raft_index: int
    max_timestamp: int
    position: int
    length: int


class LogIndex:
    def __init__(self, records: RecordFile) -> None:
        self.records = records

    @classmethod
    def load(cls, path: Path) -> LogIndex:
        return cls(RecordFile.load(path, RECORD.size))

    @classmethod
    def open_sealed(cls, path: Path) -> LogIndex | None:
        records = RecordFile.open_sealed(path, RECORD.size)
        return None if records is None else cls(records)

    @property
    def count(self) -> int:
        return self.records.count

    def record(self, k: int) -> BatchRecord:
        return BatchRecord._make(RECORD.unpack_from(self.records.buffer, k * RECORD.size))

    def append(
        self,
        base_offset: int,
        last_offset: int,
        raft_index: int,
        max_timestamp: int,
        position: int,
        length: int,
    ) -> None:
        self.records.append(
            RECORD.pack(base_offset, last_offset, raft_index, max_timestamp, position, length)
        )

    def find_offset(self, offset: int) -> int:
        """Record number of the batch holding `offset` or else the first one after it;
        `count` if there is none."""
        return self.records.first_at_least(_LAST_OFFSET, _LAST_OFFSET_AT, offset)

    def count_before(self, raft_index: int) -> int:
        """How many records describe entries with index < raft_index."""
        return self.records.first_at_least(_RAFT_INDEX, _RAFT_INDEX_AT, raft_index)

    def max_timestamp(self) -> int | None:
        if not self.count:
            return None
        return max(self.record(k).max_timestamp for k in range(self.count))

    def flush_through(self, raft_index: int) -> None:
        self.records.flush(self.count_before(raft_index + 1))

    def truncate_from(self, raft_index: int) -> None:
        self.records.truncate(self.count_before(raft_index))
