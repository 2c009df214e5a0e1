"""The newest appended entries, kept in memory so tailing readers and followers catching up
from the leader's tail never touch the disk.

The cache always holds a contiguous run of indexes ending at the last appended entry, so
"is index i cached" is one comparison. It keeps the caller's Entry objects (no copies);
its budget counts payload bytes plus a fixed per-entry overhead, so a run of empty NOOP
entries is bounded too.

The cache is also the only copy of entries appended but not yet written to their segment
file (the flusher writes them): those are never evicted, whatever the budget, so every
stored entry is always readable from the cache or from a file. The store says how far
entries are written (`written_through`); only entries up to there count as evictable.
"""

from __future__ import annotations

from collections.abc import Sequence

from vdl.backends.api import Entry

_PER_ENTRY_OVERHEAD = 128  # rough cost of the Entry object and the dict slot


class RecentCache:
    def __init__(self, max_bytes: int, next_index: int) -> None:
        self._max_bytes = max_bytes
        self._entries: dict[int, Entry] = {}
        self._first = next_index  # oldest cached index; == _next when empty
        self._next = next_index
        self._bytes = 0

    @property
    def first_index(self) -> int:
        return self._first

    def get(self, index: int) -> Entry | None:
        return self._entries.get(index)

    def add(self, entries: Sequence[Entry], written_through: int) -> None:
        if not entries:
            return
        if entries[0].index != self._next:
            # The store appends contiguously, so a gap means nothing cached is unwritten;
            # forgetting an unwritten entry would lose it, hence the check.
            if self._first < self._next and self._next - 1 > written_through:
                raise ValueError(f"unwritten entries cached before {entries[0].index}")
            self.clear(entries[0].index)
        cached = self._entries
        for entry in entries:
            cached[entry.index] = entry
            self._bytes += len(entry.payload) + _PER_ENTRY_OVERHEAD
        self._next = entries[-1].index + 1
        self.trim(written_through)

    def trim(self, written_through: int) -> None:
        """Evict the oldest entries over budget, as far as they are written."""
        limit = min(written_through + 1, self._next)
        while self._bytes > self._max_bytes and self._first < limit:
            self._drop_oldest()

    def truncate_from(self, index: int) -> None:
        """Forget entries with index >= `index` (the log was truncated there)."""
        if index <= self._first:
            self.clear(index)
            return
        while self._next > index:
            self._next -= 1
            gone = self._entries.pop(self._next)
            self._bytes -= len(gone.payload) + _PER_ENTRY_OVERHEAD

    def drop_before(self, index: int) -> None:
        """Forget entries with index < `index` (retention removed them)."""
        while self._first < min(index, self._next):
            self._drop_oldest()
        if self._first == self._next:
            self.clear(max(index, self._next))

    def clear(self, next_index: int) -> None:
        self._entries.clear()
        self._first = self._next = next_index
        self._bytes = 0

    def _drop_oldest(self) -> None:
        gone = self._entries.pop(self._first)
        self._bytes -= len(gone.payload) + _PER_ENTRY_OVERHEAD
        self._first += 1
