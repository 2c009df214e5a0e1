"""One segment: a log file of entries plus its raft index and log index files.

Files of a segment share a stem that encodes its first Raft index and the record offset the
stream was at when the segment was created (its "start offset"):

    00000000000000000001-00000000000000000000.log
    00000000000000000001-00000000000000000000.raft_index
    00000000000000000001-00000000000000000000.log_index

Zero-padded, so name order is index order. The start offset is what `next_offset()` falls
back to when no DATA entry is left in the store (after retention or truncation), so an
empty-of-data log never restarts its offsets from zero.

A segment made from a spare (`preallocate.py`) starts as a file of zeros of its target
size; its entries overwrite them and an all-zero header marks the end of the log. A closed
segment's file ends exactly at its last entry: it rolls only once its entries reach the
target, which is at least the preallocated size (`close_file` enforces it anyway), and
recovery cuts the last segment at its last intact entry (see `recovery.py` for why).
"""

from __future__ import annotations

import os
from pathlib import Path

from vdl.backends.api import CorruptionError, StorageError
from vdl.backends.segment import log_index, raft_index
from vdl.backends.segment.file_io import pread_all
from vdl.backends.segment.log_index import LogIndex
from vdl.backends.segment.preallocate import SpareFile
from vdl.backends.segment.raft_index import RaftIndex

LOG_SUFFIX = ".log"
MAX_SEGMENT_BYTES = 0xFFFF_FFFF  # positions in the indexes are u32


def stem_of(first_index: int, start_offset: int) -> str:
    return f"{first_index:020d}-{start_offset:020d}"


def parse_stem(stem: str) -> tuple[int, int] | None:
    first, sep, start = stem.partition("-")
    if not sep or len(first) != 20 or len(start) != 20:
        return None
    if not (first.isdigit() and start.isdigit()):
        return None
    return int(first), int(start)


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
        allocated: int = 0,
    ) -> None:
        self.directory = directory
        self.first_index = first_index
        self.start_offset = start_offset
        self.fd = fd
        # Bytes of whole entries, counting those appended but still queued for the flusher
        # to write: the file may be shorter than this, and longer only by zeros.
        self.size = size
        self.raft = raft
        self.log = log
        # Size of the zero-filled file the segment was made from (0: not preallocated, the
        # file grows by appends); `size` may pass it, entries then append.
        self.allocated = allocated
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

    @property
    def preallocated(self) -> bool:
        return self.allocated > 0

    @classmethod
    def create(
        cls, directory: Path, first_index: int, start_offset: int, spare: SpareFile | None = None
    ) -> Segment:
        """A new empty segment; its file is `spare` renamed if that is ready (the caller
        makes the directory change durable), else a new empty file."""
        stem = stem_of(first_index, start_offset)
        path = directory / (stem + LOG_SUFFIX)
        fd = None if spare is None else spare.take()
        allocated = 0
        if fd is None:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        else:
            assert spare is not None
            try:
                os.rename(spare.path, path)  # replaces leftovers of a removed namesake
            except BaseException:
                os.close(fd)
                raise
            allocated = spare.size
        try:
            raft = RaftIndex.load(first_index, directory / (stem + raft_index.SUFFIX))
            log = LogIndex.load(directory / (stem + log_index.SUFFIX))
        except BaseException:
            os.close(fd)
            raise
        raft.records.truncate(0)  # leftovers of a segment of the same name removed earlier
        log.records.truncate(0)
        return cls(directory, first_index, start_offset, fd, 0, raft, log, allocated)

    def adopt_spare(self, spare: SpareFile) -> int | None:
        """Replace the file of this empty segment with `spare` if it is ready; return the
        old fd for the caller to retire, or None if nothing changed."""
        assert self.size == 0 and self.raft.count == 0
        fd = spare.take()
        if fd is None:
            return None
        try:
            os.rename(spare.path, self.path)
        except BaseException:
            os.close(fd)
            raise
        old, self.fd, self.allocated = self.fd, fd, spare.size
        return old

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
        # Preallocated zeros go too: written-over space past the cut could hold old entries
        # that a later append of the right length would make look like its successors.
        if os.fstat(self.fd).st_size > keep_bytes:
            os.ftruncate(self.fd, keep_bytes)
            self.allocated = 0
        self.size = keep_bytes
        self._newest_timestamp = None

    def close_file(self) -> bool:
        """The segment rolled: cut zeros it did not fill, so the file ends at its data;
        return whether the file changed (its new length is to be synced).

        Queued entries lie below `size`, so they still land inside the file."""
        cut = self.size < self.allocated
        if cut:
            os.ftruncate(self.fd, self.size)
        self.allocated = 0
        return cut

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
