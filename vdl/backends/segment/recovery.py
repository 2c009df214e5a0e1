"""Opening a log directory: trust what the index files prove, scan and verify the rest.

The store writes an index record only after the entry it describes was fdatasync'ed, so an
index on disk describes a durable prefix of its segment; whatever follows that prefix may be
torn (a crash mid-write, or pages of an unsynced write that never reached the disk). Hence:

- A closed segment whose index files are complete (as many raft records as the next segment
  says it has, one log record per DATA type in them) and whose last entry checks out (header
  matches its record, CRC good, ends exactly at the end of the file) is trusted without
  reading it: corruption inside it is bit rot, reported by CorruptionError when read.
- Otherwise (the last segment always, a closed segment rolled just before a crash) the index
  prefix is checked the same way at its last record and every entry after it is read and
  CRC-checked. The first bad one (short, CRC mismatch, wrong index, unknown type) ends the
  log: the file is cut there and every later segment is removed. Nothing before is touched.
- An all-zero header is not a bad entry but free space: a preallocated segment
  (`preallocate.py`) is zeros past its last entry. It ends the log all the same, and the
  last segment is cut there too, not kept preallocated: a zero header proves nothing about
  what follows. A round of writes torn by a crash can leave its first page unwritten (zeros)
  and later pages on disk; an intact stale entry among them would be taken for the
  successor of whatever a later append happens to end next to it. Cutting costs one early
  roll into a new preallocated spare (see `store.py`).

The index records rebuilt here reach their files only after the store has fdatasync'ed the
scanned segments, keeping the rule above for the next crash.

The same scan checks and indexes a segment file received whole in a snapshot
(`index_segment_file`), where nothing may be cut: one bad entry rejects the file.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from vdl.backends.api import CorruptionError, EntryType, batch_offsets
from vdl.backends.segment import log_index, raft_index
from vdl.backends.segment.entry_codec import HEADER, HEADER_SIZE, entry_is_intact, valid_kind
from vdl.backends.segment.file_io import pread_all
from vdl.backends.segment.log_index import LogIndex
from vdl.backends.segment.preallocate import remove_spares
from vdl.backends.segment.raft_index import RaftIndex
from vdl.backends.segment.segment import LOG_SUFFIX, Segment, parse_stem, stem_of
from vdl.log.batch_header import HEADER_SIZE as BATCH_HEADER_SIZE
from vdl.log.batch_header import max_timestamp

_SUFFIXES = (LOG_SUFFIX, raft_index.SUFFIX, log_index.SUFFIX)
_READ_CHUNK = 1 << 20
_FREE = bytes(HEADER_SIZE)

_log = logging.getLogger(__name__)


def open_segments(directory: Path) -> list[Segment]:
    """Recover every segment of `directory`, in index order (empty list if there are none)."""
    remove_spares(directory)
    stems = _find_stems(directory)
    segments: list[Segment] = []
    try:
        for n, (first, start) in enumerate(stems):
            if segments and segments[-1].next_index != first:
                # A hole in the index sequence: what follows belongs after a cut log.
                _remove_files(directory, stems[n:])
                break
            next_first = stems[n + 1][0] if n + 1 < len(stems) else None
            segment, complete = _recover_segment(directory, first, start, next_first)
            segments.append(segment)
            if not complete:
                _remove_files(directory, stems[n + 1 :])
                break
    except BaseException:
        for segment in segments:
            os.close(segment.fd)
            segment.close_indexes()
        raise
    return segments


@dataclass(frozen=True, slots=True)
class IndexedFile:
    count: int  # entries
    last_term: int
    next_offset: int  # after the file's last batch (the given one if it holds none)


def index_segment_file(directory: Path, first: int, start: int, next_offset: int) -> IndexedFile:
    """Check every entry of the complete segment file of stem (`first`, `start`) in
    `directory` and write its index files, synced, next to it. CorruptionError unless its
    entries are intact, numbered from `first`, fill the file exactly, and their batches'
    offsets go up from `next_offset`."""
    stem = stem_of(first, start)
    fd = os.open(directory / (stem + LOG_SUFFIX), os.O_RDONLY | os.O_CLOEXEC)
    raft = log = None
    try:
        raft = RaftIndex.load(first, directory / (stem + raft_index.SUFFIX))
        log = LogIndex.load(directory / (stem + log_index.SUFFIX))
        raft.truncate_from(first)
        log.truncate_from(first)
        file_size = os.fstat(fd).st_size
        segment = Segment(directory, first, start, fd, 0, raft, log)
        _, clean = _scan_tail(segment, file_size, None)
        if not clean or segment.size != file_size or not raft.count:
            raise CorruptionError(
                f"segment file {stem}: entry {segment.next_index} at byte {segment.size} "
                "is torn, fails its CRC or is out of sequence"
            )
        for k in range(log.count):
            record = log.record(k)
            if record.base_offset < next_offset or record.last_offset < record.base_offset:
                raise CorruptionError(
                    f"segment file {stem}: entry {record.raft_index} holds offsets "
                    f"{record.base_offset}..{record.last_offset} after {next_offset - 1}"
                )
            next_offset = record.last_offset + 1
        segment.flush_indexes_through(segment.last_index)
        raft.records.sync()
        log.records.sync()
        return IndexedFile(raft.count, raft.entry(segment.last_index)[0], next_offset)
    finally:
        os.close(fd)
        for index in (raft, log):
            if index is not None:
                index.records.close()


def _find_stems(directory: Path) -> list[tuple[int, int]]:
    logs: set[tuple[int, int]] = set()
    indexes: set[tuple[int, int]] = set()
    for path in directory.iterdir():
        if path.suffix not in _SUFFIXES:
            continue
        parsed = parse_stem(path.stem)
        if parsed is None:
            continue
        (logs if path.suffix == LOG_SUFFIX else indexes).add(parsed)
    # Index files whose segment is gone (removed just before a crash).
    _remove_files(directory, sorted(indexes - logs))
    return sorted(logs)


def _remove_files(directory: Path, stems: list[tuple[int, int]]) -> None:
    for first, start in stems:
        for suffix in _SUFFIXES:
            (directory / (stem_of(first, start) + suffix)).unlink(missing_ok=True)


def recover_segment(
    directory: Path, first: int, start: int, next_first: int | None
) -> tuple[Segment, bool]:
    """Open the segment of stem (`first`, `start`), checking what its index files do not
    prove; whether it is complete (it holds every entry before `next_first`)."""
    return _recover_segment(directory, first, start, next_first)


def _recover_segment(
    directory: Path, first: int, start: int, next_first: int | None
) -> tuple[Segment, bool]:
    stem = stem_of(first, start)
    fd = os.open(directory / (stem + LOG_SUFFIX), os.O_RDWR | os.O_CLOEXEC)
    try:
        file_size = os.fstat(fd).st_size
        expected = None if next_first is None else next_first - first
        if expected is not None:
            trusted = _open_complete(directory, stem, fd, file_size, first, start, expected)
            if trusted is not None:
                return trusted, True
        raft = RaftIndex.load(first, directory / (stem + raft_index.SUFFIX))
        log = LogIndex.load(directory / (stem + log_index.SUFFIX))
        kept, end = _trusted_prefix(fd, file_size, raft, log, expected)
        raft.truncate_from(first + kept)
        log.truncate_from(first + kept)
        segment = Segment(directory, first, start, fd, end, raft, log)
        complete, clean = _scan_tail(segment, file_size, expected)
        if not clean:
            _log.warning(
                "segment %s: torn or corrupt entry %d at byte %d cut (%d bytes after it)",
                stem,
                segment.next_index,
                segment.size,
                file_size - segment.size,
            )
        if file_size > segment.size:
            os.ftruncate(fd, segment.size)
        return segment, complete
    except BaseException:
        os.close(fd)
        raise


def _open_complete(
    directory: Path, stem: str, fd: int, file_size: int, first: int, start: int, expected: int
) -> Segment | None:
    """The closed segment with its sealed indexes, if they prove it complete; else None."""
    raft = RaftIndex.open_sealed(first, directory / (stem + raft_index.SUFFIX))
    log = LogIndex.open_sealed(directory / (stem + log_index.SUFFIX))
    if raft is not None and log is not None and raft.count == expected > 0:
        if _consistent(fd, file_size, raft, log, expected) == file_size:
            return Segment(directory, first, start, fd, file_size, raft, log)
    for index in (raft, log):
        if index is not None:
            index.records.close()
    return None


def _trusted_prefix(
    fd: int, file_size: int, raft: RaftIndex, log: LogIndex, expected: int | None
) -> tuple[int, int]:
    """(entries, bytes) of the prefix the index files prove; (0, 0) if they prove nothing."""
    kept = raft.count if expected is None else min(raft.count, expected)
    if kept:
        end = _consistent(fd, file_size, raft, log, kept)
        if end is not None:
            return kept, end
    return 0, 0


def _consistent(fd: int, file_size: int, raft: RaftIndex, log: LogIndex, kept: int) -> int | None:
    """End position of entry `kept - 1` if the first `kept` raft records and the log
    records of those entries agree with each other and with that entry on disk."""
    first = raft.first_index
    data = log.count_before(first + kept)
    if data != raft.data_entries(kept):
        return None
    if data:
        record = log.record(data - 1)
        if not first <= record.raft_index < first + kept:
            return None
        _, position, kind = raft.entry(record.raft_index)
        if kind != EntryType.DATA or position != record.position:
            return None
    term, position, kind = raft.entry(first + kept - 1)
    return _verified_end(fd, file_size, position, first + kept - 1, term, kind)


def _verified_end(fd: int, file_size: int, at: int, index: int, term: int, kind: int) -> int | None:
    """End of the entry at `at` if it is intact and is (index, term, kind)."""
    if at + HEADER_SIZE > file_size:
        return None
    _, length, got_term, got_index, got_kind = HEADER.unpack_from(pread_all(fd, HEADER_SIZE, at))
    end: int = at + HEADER_SIZE + length
    if (got_index, got_term, got_kind) != (index, term, kind) or end > file_size:
        return None
    if not entry_is_intact(pread_all(fd, end - at, at), 0, length):
        return None
    return end


def _scan_tail(segment: Segment, file_size: int, expected: int | None) -> tuple[bool, bool]:
    """Index the intact entries after `segment.size`, stopping at the first bad one, at free
    space or at `expected` entries; return whether the segment holds all it should and
    whether it ended cleanly (not at a torn or corrupt entry)."""
    window = _ReadWindow(segment.fd, file_size)
    position, index = segment.size, segment.next_index
    limit = None if expected is None else segment.first_index + expected
    clean = True
    while limit is None or index < limit:
        if position + HEADER_SIZE > file_size:
            # A few bytes short of a header: torn, unless they are preallocated zeros.
            rest = window.view(position, file_size - position)
            clean = not any(rest)
            break
        header = window.view(position, HEADER_SIZE)
        if header == _FREE:
            break
        _, length, term, got_index, kind = HEADER.unpack_from(header)
        end = position + HEADER_SIZE + length
        if got_index != index or not valid_kind(kind) or end > file_size:
            clean = False
            break
        entry = window.view(position, end - position)
        if not entry_is_intact(entry, 0, length):
            clean = False
            break
        if kind == EntryType.DATA:
            if length < BATCH_HEADER_SIZE:
                break
            payload = entry[HEADER_SIZE:]
            base, last = batch_offsets(payload)
            segment.log.append(base, last, index, max_timestamp(payload), position, length)
        segment.raft.append(term, position, kind)
        position, index = end, index + 1
    segment.size = position
    return limit is None or index == limit, clean


class _ReadWindow:
    """Sequential reads in large chunks, handing out views of whole entries."""

    def __init__(self, fd: int, file_size: int) -> None:
        self._fd = fd
        self._file_size = file_size
        self._buf = b""
        self._at = 0

    def view(self, position: int, n: int) -> memoryview:
        if position < self._at or position + n > self._at + len(self._buf):
            want = min(max(n, _READ_CHUNK), self._file_size - position)
            self._buf = pread_all(self._fd, want, position)
            self._at = position
        start = position - self._at
        return memoryview(self._buf)[start : start + n]
