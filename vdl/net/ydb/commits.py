"""Merging a partition session's commit ranges into one committed offset (sans-I/O).

Readers commit ``[start, end)`` ranges, normally contiguous, but an application may commit
batches out of order. The committed offset advances over the contiguous prefix only; ranges
beyond a gap wait until the gap is filled.
"""

from __future__ import annotations


class CommitTracker:
    def __init__(self, committed: int) -> None:
        self.committed = committed
        self._pending: list[tuple[int, int]] = []

    @property
    def pending(self) -> list[tuple[int, int]]:
        return list(self._pending)

    def add(self, start: int, end: int) -> int:
        """Fold in one range; return the (possibly unchanged) committed offset."""
        if end <= self.committed or end <= start:
            return self.committed
        self._pending.append((start, end))
        self._pending.sort()
        advanced = True
        while advanced:
            advanced = False
            keep: list[tuple[int, int]] = []
            for lo, hi in self._pending:
                if lo <= self.committed:
                    if hi > self.committed:
                        self.committed = hi
                        advanced = True
                else:
                    keep.append((lo, hi))
            self._pending = keep
        return self.committed
