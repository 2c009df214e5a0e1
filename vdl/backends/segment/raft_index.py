"""Raft index of one segment: entry `first_index + k` is described by record k.

Record (16 bytes, little-endian): term u64, position u32 (of the entry's header in the
segment file), type u8, 3 bytes padding. Keeping term and type here lets `term_at` and the
recovery checks answer without touching the log; the 4-byte position caps a segment at 4 GiB,
which the store enforces when it rolls.
"""

from __future__ import annotations

import struct
from pathlib import Path

from vdl.backends.api import EntryType
from vdl.backends.segment.record_file import RecordFile

RECORD = struct.Struct("<QIB3x")
_TYPE_AT = 12  # byte of the type field inside a record
SUFFIX = ".raft_index"


class RaftIndex:
    def __init__(self, first_index: int, records: RecordFile) -> None:
        self.first_index = first_index
        self.records = records

    @classmethod
    def load(cls, first_index: int, path: Path) -> RaftIndex:
        return cls(first_index, RecordFile.load(path, RECORD.size))

    @classmethod
    def open_sealed(cls, first_index: int, path: Path) -> RaftIndex | None:
        records = RecordFile.open_sealed(path, RECORD.size)
        return None if records is None else cls(first_index, records)

    @property
    def count(self) -> int:
        return self.records.count

    def entry(self, index: int) -> tuple[int, int, int]:
        """(term, position, type) of entry `index` (must be in this segment)."""
        k = index - self.first_index
        term, position, kind = RECORD.unpack_from(self.records.buffer, k * RECORD.size)
        return term, position, kind

    def position(self, index: int) -> int:
        return self.entry(index)[1]

    def append(self, term: int, position: int, kind: int) -> None:
        self.records.append(RECORD.pack(term, position, kind))

    def data_entries(self, upto: int) -> int:
        """How many of the first `upto` records are DATA entries (a C-speed byte count)."""
        types = self.records.buffer[_TYPE_AT : upto * RECORD.size : RECORD.size]
        return bytes(types).count(EntryType.DATA)

    def flush_through(self, index: int) -> None:
        self.records.flush(index - self.first_index + 1)

    def truncate_from(self, index: int) -> None:
        self.records.truncate(max(0, index - self.first_index))
