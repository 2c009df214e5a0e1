from __future__ import annotations

from vdl.backends.api import Entry
from vdl.consensus.log_view import RaftLog, TermRuns

from .helpers import MemStorage, entries_of


def test_unstable_tail_shadows_storage_until_persisted() -> None:
    storage = MemStorage(entries_of(1, 1, 1))
    log = RaftLog(storage)
    log.append(entries_of(2, 2, start=2))  # conflicts at 2: replaces stored 2 and 3
    snapshot, truncate_from, entries = log.unstable.take_ready()
    assert snapshot is None and truncate_from == 2 and [e.index for e in entries] == [2, 3]
    assert log.term_at(3) == 2 and log.last_index() == 3
    assert log.stable_index() == 1
    assert not log.stable_to(3, 1)  # about the replaced entry: ignored
    storage.log[1:] = entries
    assert log.stable_to(3, 2)
    assert log.stable_index() == 3 and log.term_at(3) == 2


def test_truncation_inside_written_tail_is_reported() -> None:
    log = RaftLog(MemStorage())
    log.append(entries_of(1, 1, 1))
    log.unstable.take_ready()
    log.append(entries_of(2, start=3))
    _, truncate_from, entries = log.unstable.take_ready()
    assert truncate_from == 3 and [e.term for e in entries] == [2]


def test_term_runs_bisect_storage() -> None:
    terms = [1] * 50 + [3] * 7 + [4] + [9] * 100
    storage = MemStorage(entries_of(*terms))
    runs = TermRuns()
    runs.load(storage, 1, len(terms))
    for i, t in enumerate(terms, start=1):
        assert runs.at(i) == t


def test_terms_survive_retention() -> None:
    storage = MemStorage(entries_of(1, 1, 2, 2))
    log = RaftLog(storage)
    storage.compact(3)
    assert log.term_at(3) == 2 and log.term_at(4) == 2


def test_entries_respect_byte_limit_across_storage_and_tail() -> None:
    storage = MemStorage(entries_of(1, 1))
    log = RaftLog(storage)
    log.append(entries_of(1, 1, start=3))
    assert [e.index for e in log.entries(1, 5)] == [1, 2, 3, 4]
    assert [e.index for e in log.entries(1, 5, max_bytes=1)] == [1]
    assert [e.index for e in log.entries(2, 5, max_bytes=60)] == [2, 3]


class _CountingStorage(MemStorage):
    def __init__(self, entries: list[Entry]) -> None:
        super().__init__(entries)
        self.reads = 0

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        self.reads += 1
        return super().entries(lo, hi, max_bytes)


def test_applying_by_index_reads_no_entries() -> None:
    storage = _CountingStorage(entries_of(1, 1, 1, 2, 2))
    log = RaftLog(storage, committed=4, applied=1)
    assert log.take_applicable_index() == 4
    assert log.applying == 4
    assert log.take_applicable_index() == 0  # nothing more until the commit moves
    log.commit_to(5)
    assert log.take_applicable_index() == 5
    assert storage.reads == 0
