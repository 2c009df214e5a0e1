"""One segment: a log file of entries plus its raft index and log index files.

Files of a segment share a stem that encodes its first Raft index and the record offset the
stream was at when the segment was created (its "start offset"):

    00000000000000000001-00000000000000000000.log
    00000000000000000001-00000000000000000000.raft_index
    00000000000000000001-00000000000000000000.log_index

Zero-padded, so name order is index order. The start offset is what `next_offset()` falls
back to when no DATA entry is left in the store (after retention or truncation), so an
empty-of-data log never restarts its offsets from zero.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from vdl.backends.api import CorruptionError, StorageError
from vdl.backends.segment import log_index, raft_index
from vdl.backends.segment.file_io import pread_all
from vdl.backends.segment.log_index import LogIndex
from vdl.backends.segment.raft_index import RaftIndex

LOG_SUFFIX = ".log"
MAX_SEGMENT_BYTES = 0xFFFF_FFFF  # positions in the indexes are u32
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35  # in a RecordBatch v2 header


def stem_of(first_index: int, start_offset: int) -> str:
    return f"{first_index:020d}-{start_offset:020d}"


def parse_stem(stem: str) -> tuple[int, int] | None:
    first, sep, start = stem.partition("-")
    if not sep or len(first) != 20 or len(start) != 20:
        return None
    if not (first.isdigit() and start.isdigit()):
        return None
    return int(first), int(start)


def batch_max_timestamp(payload: bytes | bytearray | memoryview) -> int:
    ts: int = _MAX_TIMESTAMP.unpack_from(payload, _MAX_TIMESTAMP_AT)[0]
    return ts


class Segment:
    def __init__(
        self,
        directory: Path,
        first_index: int,
        start_offset: int,
        fd: int,
        size: int,
        raft: RaftIndex,
        log: LogIndex,
    ) -> None:
        self.directory = directory
        self.first_index = first_index
        self.start_offset = start_offset
        self.fd = fd
        # Bytes of whole entries, counting those appended but still queued for the flusher
        # to write: the file may be shorter than this, never longer once recovered.
        self.size = size
        self.raft = raft
        self.log = log
        self._newest_timestamp: int | None = None  # cached once the segment is closed

    @property
    def stem(self) -> str:
        return stem_of(self.first_index, self.start_offset)

    @property
    def path(self) -> Path:
        return self.directory / (self.stem + LOG_SUFFIX)

    @property
    def last_index(self) -> int:
        return self.first_index + self.raft.count - 1

    @property
    def next_index(self) -> int:
        return self.first_index + self.raft.count

    @classmethod
    def create(cls, directory: Path, first_index: int, start_offset: int) -> Segment:
        stem = stem_of(first_index, start_offset)
        fd = os.open(
            directory / (stem + LOG_SUFFIX),
            os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
            0o644,
        )
        raft = RaftIndex.load(first_index, directory / (stem + raft_index.SUFFIX))
        log = LogIndex.load(directory / (stem + log_index.SUFFIX))
        raft.records.truncate(0)  # leftovers of a segment of the same name removed earlier
        log.records.truncate(0)
        return cls(directory, first_index, start_offset, fd, 0, raft, log)

    # -- I/O -------------------------------------------------------------------------

    def reserve(self, n: int) -> int:
        """Claim the next `n` bytes for an entry written later; return their position."""
        if self.size + n > MAX_SEGMENT_BYTES:
            raise StorageError(f"segment {self.stem} would exceed 4 GiB")
        position = self.size
        self.size += n
        return position

    def read(self, position: int, n: int) -> bytes:
        data = pread_all(self.fd, n, position)
        if len(data) != n:
            raise CorruptionError(
                f"segment {self.stem}: {n} bytes at {position} expected, file is shorter"
            )
        return data

    def position_of(self, index: int) -> int:
        """Byte position of entry `index`, or the end of the segment for next_index."""
        if index >= self.next_index:
            return self.size
        return self.raft.position(index)

    def newest_timestamp(self, closed: bool) -> int | None:
        """Largest batch maxTimestamp in the segment (None without DATA entries)."""
        if self._newest_timestamp is not None:
            return self._newest_timestamp
        newest = self.log.max_timestamp()
        if closed:
            self._newest_timestamp = newest
        return newest

    def mtime_ms(self) -> int:
        return os.stat(self.fd).st_mtime_ns // 1_000_000

    # -- changes ---------------------------------------------------------------------

    def truncate_from(self, index: int) -> None:
        """Drop entries with index >= `index` from the file and both indexes."""
        if index >= self.next_index:
            return
        keep_bytes = self.position_of(index)
        self.raft.truncate_from(index)
        self.log.truncate_from(index)
        # Entries still queued may not have reached the file: cutting must not lengthen it.
        if os.fstat(self.fd).st_size > keep_bytes:
            os.ftruncate(self.fd, keep_bytes)
        self.size = keep_bytes
        self._newest_timestamp = None

    def flush_indexes_through(self, index: int) -> None:
        """Write index records of entries up to `index` (already durable) to their files."""
        self.raft.flush_through(index)
        self.log.flush_through(index)

    def indexes_flushed(self) -> bool:
        return self.raft.records.unflushed == 0 and self.log.records.unflushed == 0

    def seal_indexes(self) -> None:
        self.raft.records.seal()
        self.log.records.seal()

    def unseal_indexes(self) -> None:
        self.raft.records.unseal()
        self.log.records.unseal()

    def close_indexes(self) -> None:
        self.raft.records.close()
        self.log.records.close()

    def delete_files(self) -> None:
        """Remove the files (the data fd is closed by the caller, who may have to wait for
        a concurrent sync to let go of it)."""
        self.raft.records.delete()
        self.log.records.delete()
        self.path.unlink(missing_ok=True)
