"""A file of fixed-width records, the storage under both per-segment indexes.

Record k lives at byte k * record_size, so lookups are arithmetic and searches are binary.
While its segment is being written, all of a file's records are kept in a bytearray and
reach the file only when `flush` is told they may (the store flushes only records of entries
already fdatasync'ed, so an index on disk never points past durable log data). Once every
record is in the file and the segment is closed, the file is "sealed": the bytearray is
dropped and reads go through a read-only mmap, so closed segments cost page cache, not heap.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from vdl.backends.api import StorageError
from vdl.backends.segment.file_io import pread_all, pwrite_all

Buffer = bytearray | mmap.mmap | bytes


class RecordFile:
    def __init__(self, path: Path, record_size: int) -> None:
        self.path = path
        self.record_size = record_size
        self._fd: int | None = None
        self._mem: bytearray | None = bytearray()
        self._map: mmap.mmap | None = None
        self._count = 0
        self._on_disk = 0  # records known to be in the file

    # -- opening ---------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path, record_size: int) -> RecordFile:
        """Open (creating if missing) for writing, records in memory. A partial last record
        (a torn write) is ignored and cut at the next `truncate` or `flush`."""
        rf = cls(path, record_size)
        fd = rf._open_fd()
        size = os.fstat(fd).st_size
        whole = size - size % record_size
        data = pread_all(fd, whole, 0)
        rf._mem = bytearray(data)
        rf._count = rf._on_disk = whole // record_size
        if whole != size:
            os.ftruncate(fd, whole)
        return rf

    @classmethod
    def open_sealed(cls, path: Path, record_size: int) -> RecordFile | None:
        """Map a closed segment's complete file read-only; None if it is missing or holds a
        partial record (the caller then rebuilds it)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            if size % record_size:
                return None
            rf = cls(path, record_size)
            rf._mem = None
            rf._count = rf._on_disk = size // record_size
            rf._map = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
            return rf
        finally:
            os.close(fd)

    def _open_fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        return self._fd

    # -- reading ---------------------------------------------------------------------

    @property
    def count(self) -> int:
        return self._count

    @property
    def buffer(self) -> Buffer:
        """All records, for `struct.unpack_from(buf, k * record_size)`."""
        if self._mem is not None:
            return self._mem
        return self._map if self._map is not None else b""

    @property
    def sealed(self) -> bool:
        return self._mem is None

    @property
    def unflushed(self) -> int:
        return self._count - self._on_disk

    def first_at_least(self, field: struct.Struct, field_at: int, key: int, lo: int = 0) -> int:
        """Smallest record number k >= lo whose field (unpacked by `field` at byte
        `field_at` of the record) is >= key, or `count` if none; the field must be
        non-decreasing over the records."""
        buf, size, hi = self.buffer, self.record_size, self._count
        while lo < hi:
            mid = (lo + hi) // 2
            if field.unpack_from(buf, mid * size + field_at)[0] < key:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- writing ---------------------------------------------------------------------

    def append(self, record: bytes) -> None:
        mem = self._mem
        if mem is None:
            raise StorageError(f"{self.path.name} is sealed")
        mem += record
        self._count += 1

    def flush(self, upto: int) -> None:
        """Write records [on disk, upto) to the file (not fsync'ed: indexes are rebuilt
        from the log if a crash loses them)."""
        upto = min(upto, self._count)
        if upto <= self._on_disk or self._mem is None:
            return
        size = self.record_size
        view = memoryview(self._mem)[self._on_disk * size : upto * size]
        pwrite_all(self._open_fd(), view, self._on_disk * size)
        self._on_disk = upto

    def sync(self) -> None:
        """fdatasync the file: only for indexes built apart from a store (a snapshot being
        staged), whose swap in must not leave them emptier than they claim to be."""
        os.fdatasync(self._open_fd())

    def truncate(self, count: int) -> None:
        """Keep only the first `count` records, in memory and in the file."""
        if count >= self._count and count >= self._on_disk:
            return
        self.unseal()
        assert self._mem is not None
        del self._mem[count * self.record_size :]
        self._count = min(self._count, count)
        if self._on_disk > count:
            os.ftruncate(self._open_fd(), count * self.record_size)
            self._on_disk = count

    def seal(self) -> None:
        """Drop the memory copy once the file holds every record."""
        if self._mem is None:
            return
        if self._on_disk != self._count:
            raise StorageError(f"{self.path.name}: sealing with unflushed records")
        self.close()
        sealed = RecordFile.open_sealed(self.path, self.record_size)
        if sealed is None or sealed.count != self._count:
            raise StorageError(f"{self.path.name}: file does not hold its records")
        self._mem, self._map = None, sealed._map

    def unseal(self) -> None:
        """Bring the records back into memory so the file can be written again."""
        if self._mem is not None:
            return
        self._mem = bytearray(self.buffer)
        self._close_map()

    # -- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        self._close_map()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _close_map(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
