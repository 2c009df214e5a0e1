"""`SnapshotStaging` for a store without segment files: the log is received as entries and
kept in memory until it is installed with `reset` and `append`.

A snapshot is then bounded by memory, and its install is only as atomic as the store's
reset and append; the segment backend stages files on disk instead (`segment/staging.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from vdl.backends.api import Buffer, Entry, StorageError


class EntryStaging:
    def __init__(self) -> None:
        self.first_index = 0
        self.first_offset = 0
        self.entries: list[Entry] = []
        self.finished = False
        self._started = False

    @property
    def takes_files(self) -> bool:
        return False

    def start(self, first_index: int, first_offset: int) -> None:
        if self._started:
            raise StorageError("the snapshot started twice")
        self._started = True
        self.first_index, self.first_offset = first_index, first_offset

    def begin_file(self, name: str, size: int) -> None:
        raise StorageError(f"this store takes no segment files ({name})")

    def write(self, data: Buffer) -> None:
        raise StorageError("this store takes no segment files")

    def end_file(self) -> None:
        raise StorageError("this store takes no segment files")

    def add_entries(self, entries: Sequence[Entry]) -> None:
        if not self._started:
            raise StorageError("entries before the start of the snapshot")
        expected = self.first_index + len(self.entries)
        for entry in entries:
            if entry.index != expected:
                raise StorageError(f"snapshot entry {entry.index} where {expected} was expected")
            expected += 1
        self.entries.extend(entries)

    def finish(self, last_index: int, last_term: int) -> None:
        if not self.entries:
            raise StorageError("the snapshot holds no entries")
        last = self.entries[-1]
        if last.index != last_index:
            raise StorageError(f"the snapshot ends at {last.index}, not at {last_index}")
        if last.term != last_term:
            raise StorageError(f"entry {last_index} has term {last.term}, not {last_term}")
        self.finished = True

    def discard(self) -> None:
        self.entries = []
        self.finished = False
