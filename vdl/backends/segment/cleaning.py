"""Log compaction on segment files: the part that reads and writes files, off the event loop.

`clean_files` runs in a worker thread over closed segments the store holds for it
(`SegmentLogStore.hold_for_cleaning`, the same hold a snapshot being sent takes, so
retention keeps them and a truncation or install breaks the hold). It builds the key map
over all of them (vdl/log/compaction.py), then writes each segment whose batches change as
a new file of the same name in a staging directory, entries keeping their index, term and
type, with its index files, all synced. The store then swaps each in on its own thread
(`SegmentLogStore.replace_segment`) if the segment is still the one held. A staging
directory left by a crash is removed when the store opens (`log_swap.recover`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from vdl.backends.api import CorruptionError, EntryType, SegmentFile
from vdl.backends.segment import log_swap
from vdl.backends.segment.entry_codec import HEADER, HEADER_SIZE, encode_header, entry_is_intact
from vdl.backends.segment.recovery import index_segment_file
from vdl.backends.segment.segment import LOG_SUFFIX, parse_stem
from vdl.log.compaction import KeyMap, clean_batch

_DATA = int(EntryType.DATA)


@dataclass(frozen=True, slots=True)
class StagedSegment:
    """A cleaned copy of `file`: its log and index files under `directory`, same names."""

    file: SegmentFile
    directory: Path


def _entries(file: SegmentFile) -> Iterator[tuple[int, int, int, memoryview]]:
    """(term, index, type, payload) of every entry of a closed segment file, CRC-checked."""
    data = memoryview(file.path.read_bytes())
    if len(data) != file.size:
        raise CorruptionError(f"segment {file.name}: {len(data)} bytes, {file.size} expected")
    at = 0
    expected = file.first_index
    while at < len(data):
        _, length, term, index, kind = HEADER.unpack_from(data, at)
        if index != expected or not entry_is_intact(data, at, length):
            raise CorruptionError(f"segment {file.name}: entry {expected} fails its CRC")
        body = at + HEADER_SIZE
        yield term, index, kind, data[body : body + length]
        at = body + length
        expected += 1
    if expected != file.last_index + 1:
        raise CorruptionError(f"segment {file.name}: ends before entry {file.last_index}")


def build_key_map(files: Sequence[SegmentFile]) -> KeyMap:
    keys = KeyMap()
    for file in files:
        for _, _, kind, payload in _entries(file):
            if kind == _DATA:
                keys.add(payload)
    return keys


def clean_files(
    files: Sequence[SegmentFile], staging_root: Path, delete_retention_ms: int
) -> list[StagedSegment]:
    """Clean `files` (consecutive closed segments, oldest first) into staged copies under
    a new directory in `staging_root`; only the segments that change are staged."""
    keys = build_key_map(files)
    staged: list[StagedSegment] = []
    staging: Path | None = None
    for file in files:
        parts: list[bytes | memoryview] = []
        changed = False
        for term, index, kind, payload in _entries(file):
            cleaned = clean_batch(payload, keys, delete_retention_ms) if kind == _DATA else None
            if cleaned is not None:
                changed = True
                payload = memoryview(cleaned)
            parts.append(encode_header(term, index, kind, payload))
            parts.append(payload)
        if not changed:
            continue
        if staging is None:
            staging = log_swap.new_staging_path(staging_root)
            staging.mkdir()
        _write_synced(staging / file.name, parts)
        stem = parse_stem(file.name.removesuffix(LOG_SUFFIX))
        if stem is None:
            raise CorruptionError(f"segment file {file.name} has no segment name")
        index_segment_file(staging, stem[0], stem[1], stem[1])
        staged.append(StagedSegment(file, staging))
    if staging is not None:
        log_swap.fsync_directory(staging)
    return staged


def remove_staging(staged: Sequence[StagedSegment]) -> None:
    """Remove the staging directories of `staged` (what was not swapped in goes with them)."""
    for directory in {copy.directory for copy in staged}:
        shutil.rmtree(directory, ignore_errors=True)


def _write_synced(path: Path, parts: list[bytes | memoryview]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        for part in parts:
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view) :]
        os.fdatasync(fd)
    finally:
        os.close(fd)
