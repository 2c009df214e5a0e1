"""`SnapshotStaging` of the segment backend: a received log, as segment files on disk.

Segment files arrive whole, named as the leader stores them; entries after them are
written here into more segment files, in the same format, rolled at the store's segment
size. Every file is checked entry by
entry as soon as it is complete and indexed by the scan recovery uses (so no index file
travels), and synced; `finish` checks the files join up into the announced log and writes
the manifest that `log_swap.py` commits. Nothing but the staging directory is touched, so
all of it runs in a worker thread while the store goes on serving its old log.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from vdl.backends.api import Buffer, Entry, StorageError
from vdl.backends.segment import log_index, log_swap, raft_index
from vdl.backends.segment.entry_codec import HEADER_SIZE, encode_header
from vdl.backends.segment.file_io import pwrite_all, pwritev_all
from vdl.backends.segment.recovery import IndexedFile, index_segment_file
from vdl.backends.segment.segment import LOG_SUFFIX, MAX_SEGMENT_BYTES, parse_stem, stem_of

_OPEN_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


class _OpenFile:
    def __init__(self, fd: int, first: int, start: int, size: int | None) -> None:
        self.fd = fd
        self.first = first
        self.start = start
        self.size = size  # announced size of a received file; None for the entries' file
        self.at = 0


class SegmentStaging:
    def __init__(self, directory: Path, roll_at: int) -> None:
        self.directory = directory
        self._roll_at = roll_at
        self.finished = False
        self.files = 0  # segment files received (not counting the one written from entries)
        self._started = False
        self._next_index = 0
        self._next_offset = 0
        self._last_term = 0
        self._first_index = 0
        self._names: list[str] = []
        self._file: _OpenFile | None = None  # a received file being written
        self._tail: _OpenFile | None = None  # the file entries are being written to

    @property
    def takes_files(self) -> bool:
        return True

    def start(self, first_index: int, first_offset: int) -> None:
        if self._started:
            raise StorageError("the snapshot started twice")
        self.directory.mkdir()
        self._started = True
        self._first_index = self._next_index = first_index
        self._next_offset = first_offset

    def begin_file(self, name: str, size: int) -> None:
        if not self._started or self._file is not None or self._tail is not None:
            raise StorageError(f"segment file {name!r} out of place")
        stem = name[: -len(LOG_SUFFIX)] if name.endswith(LOG_SUFFIX) else ""
        parsed = parse_stem(stem)
        if parsed is None:
            raise StorageError(f"{name!r} is not the name of a segment file")
        first, start = parsed
        if first != self._next_index:
            raise StorageError(f"segment file {name} does not follow entry {first - 1}")
        if not 0 < size <= MAX_SEGMENT_BYTES:
            raise StorageError(f"segment file {name} of {size} bytes")
        fd = os.open(self.directory / name, _OPEN_NEW, 0o644)
        self._file = _OpenFile(fd, first, start, size)

    def write(self, data: Buffer) -> None:
        file = self._file
        if file is None or file.size is None:
            raise StorageError("file data outside a file")
        if file.at + len(data) > file.size:
            raise StorageError(f"more than the {file.size} bytes announced for a file")
        pwrite_all(file.fd, data, file.at)
        file.at += len(data)

    def end_file(self) -> None:
        file = self._file
        if file is None or file.at != file.size:
            raise StorageError("a file ended short of its size")
        self._file = None
        self._close(file)
        self.files += 1

    def add_entries(self, entries: Sequence[Entry]) -> None:
        if not self._started or self._file is not None:
            raise StorageError("entries out of place")
        expected = self._next_index
        for entry in entries:
            if entry.index != expected:
                raise StorageError(f"snapshot entry {entry.index} where {expected} was expected")
            expected += 1
        run: list[Entry] = []
        run_bytes = 0
        for entry in entries:
            size = (0 if self._tail is None else self._tail.at) + run_bytes
            entry_bytes = HEADER_SIZE + len(entry.payload)
            if size and (size >= self._roll_at or size + entry_bytes > MAX_SEGMENT_BYTES):
                self._write_run(run)
                run, run_bytes = [], 0
                tail, self._tail = self._tail, None
                assert tail is not None
                self._close(tail)
            run.append(entry)
            run_bytes += entry_bytes
        self._write_run(run)

    def _write_run(self, run: list[Entry]) -> None:
        """Write entries to the current entries' file (starting one if there is none)."""
        if not run:
            return
        tail = self._tail
        if tail is None:
            stem = stem_of(self._next_index, self._next_offset)
            fd = os.open(self.directory / (stem + LOG_SUFFIX), _OPEN_NEW, 0o644)
            tail = self._tail = _OpenFile(fd, self._next_index, self._next_offset, None)
        buffers: list[Buffer] = []
        for entry in run:
            buffers.append(encode_header(entry.term, entry.index, int(entry.type), entry.payload))
            buffers.append(entry.payload)
        tail.at += pwritev_all(tail.fd, buffers, tail.at)
        self._next_index = run[-1].index + 1

    def finish(self, last_index: int, last_term: int) -> None:
        if self._file is not None:
            raise StorageError("the snapshot ended inside a file")
        tail, self._tail = self._tail, None
        if tail is not None:
            self._close(tail)
        if self._next_index == self._first_index:
            raise StorageError("the snapshot holds no entries")
        if self._next_index - 1 != last_index:
            raise StorageError(f"the snapshot ends at {self._next_index - 1}, not at {last_index}")
        if self._last_term != last_term:
            raise StorageError(f"entry {last_index} has term {self._last_term}, not {last_term}")
        log_swap.write_manifest(self.directory, self._names)
        self.finished = True

    def discard(self) -> None:
        for file in (self._file, self._tail):
            if file is not None:
                os.close(file.fd)
        self._file = self._tail = None
        self.finished = False
        shutil.rmtree(self.directory, ignore_errors=True)

    def _close(self, file: _OpenFile) -> None:
        """Sync and close a complete file, then check and index it."""
        try:
            os.fdatasync(file.fd)
        finally:
            os.close(file.fd)
        indexed: IndexedFile = index_segment_file(
            self.directory, file.first, file.start, self._next_offset
        )
        if file.first + indexed.count != self._next_index and file.size is None:
            raise StorageError("the entries' file does not hold every entry written to it")
        stem = stem_of(file.first, file.start)
        self._names += [stem + LOG_SUFFIX, stem + raft_index.SUFFIX, stem + log_index.SUFFIX]
        self._next_index = file.first + indexed.count
        self._next_offset = indexed.next_offset
        self._last_term = indexed.last_term
