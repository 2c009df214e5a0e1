"""The core's view of its Raft log: durable entries in storage plus an in-memory tail.

The core never writes storage. New entries live in the *unstable* tail until the caller
reports them durable (`RaftLog.stable_to`); only then does the view read them from storage.
Until that happens the tail shadows storage from its offset on, so the caller may apply a
truncation, append, or crash at any moment without the core reading stale data.

Indexes below `unstable.offset` are "stable": durable, or present at start-up (whatever the
store holds after a restart is taken as durable; the driver syncs on open).
"""

from __future__ import annotations

import bisect
from typing import Protocol

from vdl.backends.api import Entry
from vdl.consensus.errors import SafetyViolation
from vdl.consensus.state import SnapshotMeta


class LogSource(Protocol):
    """Read-only access to persisted entries; `vdl.backends.api.LogStore` satisfies it.

    `term_at` and `entries` are only called for indexes between first_index() and
    last_index().
    """

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def term_at(self, index: int) -> int: ...

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]: ...


class Compacted(Exception):
    """The requested entries are no longer in the log (retention or snapshot)."""


def limit_size(entries: list[Entry], max_bytes: int | None) -> list[Entry]:
    """The longest prefix within max_bytes, but always at least one entry."""
    if max_bytes is None or not entries:
        return entries
    total = 0
    for i, entry in enumerate(entries):
        # Rough per-entry framing (24), so empty entries still count.
        total += len(entry.payload) + 24
        if total > max_bytes and i > 0:
            return entries[:i]
    return entries


class Unstable:
    """Entries (and possibly a snapshot) not yet reported durable.

    `handed` is the index of the first entry not yet given to the caller in a Ready; a
    pending `truncate_from` tells the caller to delete what it wrote from there on.
    """

    def __init__(self, offset: int) -> None:
        self.snapshot: SnapshotMeta | None = None
        self.snapshot_handed = False
        self.offset = offset
        self.entries: list[Entry] = []
        self.handed = offset
        self.truncate_from: int | None = None

    def last_index(self) -> int:
        return self.offset + len(self.entries) - 1

    def entry(self, index: int) -> Entry | None:
        if self.offset <= index < self.offset + len(self.entries):
            return self.entries[index - self.offset]
        return None

    def append(self, entries: list[Entry]) -> None:
        first = entries[0].index
        end = self.offset + len(self.entries)
        if first > end:
            raise SafetyViolation(f"gap in log: appending {first} after {end - 1}")
        if first < self.handed:
            # The caller already wrote (some of) what is being replaced.
            self.truncate_from = (
                first if self.truncate_from is None else min(self.truncate_from, first)
            )
            self.handed = first
        if first == end:
            self.entries.extend(entries)
        elif first <= self.offset:
            # Replaces part of the stable log: the tail now starts at the conflict.
            self.offset = first
            self.entries = list(entries)
        else:
            self.entries = self.entries[: first - self.offset] + list(entries)

    def restore(self, snapshot: SnapshotMeta) -> None:
        self.snapshot = snapshot
        self.snapshot_handed = False
        self.offset = snapshot.index + 1
        self.entries = []
        self.handed = self.offset
        self.truncate_from = None  # installing a snapshot replaces the whole log anyway

    def take_ready(self) -> tuple[SnapshotMeta | None, int | None, list[Entry]]:
        """Hand the not-yet-handed snapshot, truncation and entries to the caller."""
        snapshot = None
        if self.snapshot is not None and not self.snapshot_handed:
            snapshot = self.snapshot
            self.snapshot_handed = True
        entries = self.entries[self.handed - self.offset :]
        truncate_from = self.truncate_from
        self.truncate_from = None
        self.handed = self.offset + len(self.entries)
        return snapshot, truncate_from, entries

    def has_ready(self) -> bool:
        return (
            (self.snapshot is not None and not self.snapshot_handed)
            or self.handed < self.offset + len(self.entries)
            or self.truncate_from is not None
        )


class TermRuns:
    """The term of every index as runs: (first index, term) for each term in the log.

    Terms only grow along the log, so a handful of runs describe millions of entries.
    """

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._terms: list[int] = []

    def add(self, index: int, term: int) -> None:
        """Record that the entry at `index` (after every recorded one) has `term`."""
        if not self._terms or self._terms[-1] != term:
            self._starts.append(index)
            self._terms.append(term)

    def truncate(self, from_index: int) -> None:
        cut = bisect.bisect_left(self._starts, from_index)
        del self._starts[cut:]
        del self._terms[cut:]

    def at(self, index: int) -> int | None:
        k = bisect.bisect_right(self._starts, index) - 1
        return self._terms[k] if k >= 0 else None

    def load(self, storage: LogSource, lo: int, hi: int) -> None:
        """Learn the runs of storage[lo..hi] with O(terms * log n) reads, by bisection."""
        term_lo = storage.term_at(lo)
        self.add(lo, term_lo)
        while lo < hi:
            term_hi = storage.term_at(hi)
            if term_hi == term_lo:
                return
            # Find the first index after lo whose term differs from term_lo.
            left, right = lo + 1, hi
            while left < right:
                mid = (left + right) // 2
                if storage.term_at(mid) == term_lo:
                    left = mid + 1
                else:
                    right = mid
            lo, term_lo = left, storage.term_at(left)
            self.add(lo, term_lo)


class RaftLog:
    """Stable storage + unstable tail, with the commit and apply positions."""

    def __init__(
        self,
        storage: LogSource,
        snapshot: SnapshotMeta | None = None,
        committed: int = 0,
        applied: int | None = None,
    ) -> None:
        self.storage = storage
        last = storage.last_index()
        if snapshot is not None:
            self._base_index, self._base_term = snapshot.index, snapshot.term
        else:
            # Without a snapshot the term before the first stored entry is unknown unless the
            # store starts at 1; an unknown term just means "send a snapshot" to followers
            # who need it.
            self._base_index, self._base_term = storage.first_index() - 1, 0
        last = max(last, self._base_index)
        self.unstable = Unstable(last + 1)
        self._terms = TermRuns()
        if self._base_term or self._base_index == 0:
            self._terms.add(self._base_index, self._base_term)
        first = storage.first_index()
        if first <= storage.last_index():
            self._terms.load(storage, max(first, self._base_index + 1), storage.last_index())
        self.committed = min(max(committed, self._base_index), last)
        self.applied = (
            self._base_index
            if applied is None
            else min(max(applied, self._base_index), self.committed)
        )
        # Index of the last entry given to the caller to apply (>= applied until advance).
        self.applying = self.applied

    # ---- positions -------------------------------------------------------------------

    def last_index(self) -> int:
        return self.unstable.last_index()

    def first_index(self) -> int:
        """Lowest index whose entry can still be read."""
        if self.unstable.snapshot is not None:
            return self.unstable.snapshot.index + 1
        return max(self.storage.first_index(), 1)

    def stable_index(self) -> int:
        """Last index known durable locally (the leader's own match index)."""
        return self.unstable.offset - 1

    def last_term(self) -> int:
        term = self.term_at(self.last_index())
        return 0 if term is None else term

    def term_at(self, index: int) -> int | None:
        """Term of the entry at `index`, or None if it is beyond the log or compacted.

        Answered from memory (one item per term), so it keeps working after retention has
        deleted the entry itself, which the leader needs to describe a snapshot.
        """
        if index > self.last_index():
            return None
        return self._terms.at(index)

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Is a log ending at (last_index, last_term) at least as up to date as ours?"""
        our_term = self.last_term()
        return last_term > our_term or (last_term == our_term and last_index >= self.last_index())

    # ---- reading ---------------------------------------------------------------------

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries lo <= index < hi (at least one if lo < hi), within max_bytes."""
        hi = min(hi, self.last_index() + 1)
        if lo >= hi:
            return []
        if lo < self.first_index():
            raise Compacted(f"entry {lo} is compacted (first is {self.first_index()})")
        offset = self.unstable.offset
        out: list[Entry] = []
        if lo < offset:
            stored = self.storage.entries(lo, min(hi, offset), max_bytes)
            if not stored:
                raise Compacted(f"storage returned nothing for [{lo}, {min(hi, offset)})")
            out = limit_size(stored, max_bytes)
            if out[-1].index + 1 < min(hi, offset):
                return out  # the size limit stopped us inside storage
        if hi > offset:
            start = max(lo, offset)
            out = out + self.unstable.entries[start - offset : hi - offset]
        return limit_size(out, max_bytes)

    def entry_at(self, index: int) -> Entry | None:
        try:
            found = self.entries(index, index + 1)
        except Compacted:
            return None
        return found[0] if found else None

    # ---- writing (only the tail changes) ---------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        if not entries:
            return
        if entries[0].index <= self.committed:
            raise SafetyViolation(
                f"overwriting committed entry {entries[0].index} (commit {self.committed})"
            )
        self.unstable.append(entries)
        self._terms.truncate(entries[0].index)
        for entry in entries:
            self._terms.add(entry.index, entry.term)

    def find_conflict(self, entries: tuple[Entry, ...] | list[Entry]) -> int:
        """Position in `entries` of the first one we lack or hold with another term;
        len(entries) if we already have them all. Entries at or below the commit point are
        the same everywhere and are skipped without reading (they may be compacted)."""
        for i, entry in enumerate(entries):
            if entry.index <= self.committed:
                continue
            if self.term_at(entry.index) != entry.term:
                return i
        return len(entries)

    def commit_to(self, index: int) -> bool:
        if index > self.committed:
            if index > self.last_index():
                raise SafetyViolation(f"commit {index} beyond last index {self.last_index()}")
            self.committed = index
            return True
        return False

    def restore(self, snapshot: SnapshotMeta) -> None:
        self.unstable.restore(snapshot)
        self._terms = TermRuns()
        self._terms.add(snapshot.index, snapshot.term)
        self.committed = snapshot.index
        self.applied = max(self.applied, snapshot.index)
        self.applying = max(self.applying, snapshot.index)

    def stable_to(self, index: int, term: int) -> bool:
        """The caller made everything up to (index, term) durable; True if that moved us.

        A report about an entry that has since been replaced (different term) or was never
        handed out is ignored; it refers to a write that no longer matters.
        """
        unstable = self.unstable
        snapshot = unstable.snapshot
        if snapshot is not None:
            if not unstable.snapshot_handed or index < snapshot.index:
                return False
            if index == snapshot.index:
                if term != snapshot.term:
                    return False
                self._finish_snapshot(snapshot)
                return True
        if index < unstable.offset:
            return False
        entry = unstable.entry(index)
        if entry is None or entry.term != term or index >= unstable.handed:
            return False
        if snapshot is not None:
            self._finish_snapshot(snapshot)
        cut = index + 1 - unstable.offset
        unstable.entries = unstable.entries[cut:]
        unstable.offset = index + 1
        return True

    def _finish_snapshot(self, snapshot: SnapshotMeta) -> None:
        self.unstable.snapshot = None
        self.unstable.snapshot_handed = False
        self._base_index, self._base_term = snapshot.index, snapshot.term

    # ---- applying --------------------------------------------------------------------

    def applicable_hi(self) -> int:
        """Entries up to here may be applied: committed *and* durable locally."""
        return min(self.committed, self.stable_index())

    def has_applicable(self) -> bool:
        return self.applicable_hi() > self.applying

    def take_applicable(self, max_bytes: int | None) -> list[Entry]:
        hi = self.applicable_hi()
        if hi <= self.applying:
            return []
        entries = self.entries(self.applying + 1, hi + 1, max_bytes)
        if entries:
            self.applying = entries[-1].index
        return entries

    def take_applicable_index(self) -> int:
        """Like `take_applicable` without reading the entries: the last index to apply
        (all that is applicable at once, as nothing is read), or 0 if there is none."""
        hi = self.applicable_hi()
        if hi <= self.applying:
            return 0
        self.applying = hi
        return hi
