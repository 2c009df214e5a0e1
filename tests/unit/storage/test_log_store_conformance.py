"""The `LogStore` contract, run against every log backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.storage.conftest import OpenStore
from tests.unit.storage.log_helpers import (
    LogWriter,
    data_entry,
    noop_entry,
    record_batch,
    same_entries,
)
from tests.unit.storage.snapshot_copy import copy_log
from vdl.backends.api import (
    Buffer,
    Entry,
    EntryType,
    LogRetention,
    LogStore,
    LogStoreOptions,
    StorageError,
    batch_offsets,
)
from vdl.backends.registry import LogBackend
from vdl.log.batch_header import HEADER_SIZE

SMALL_SEGMENTS = LogStoreOptions(segment_bytes=2_000, cache_bytes=1_000)
NOW_MS = 10_000_000


def payloads(batches: list[Buffer]) -> list[bytes]:
    return [bytes(b) for b in batches]


# -- empty store -------------------------------------------------------------------------


def test_empty_store_invariants(store: LogStore) -> None:
    assert store.first_index() == 1
    assert store.last_index() == 0
    assert store.first_offset() == 0
    assert store.next_offset() == 0
    assert store.size_bytes() == 0
    assert store.entries(1, 10) == []
    assert store.index_of_offset(0) is None
    assert store.read_batches(0, 1 << 20, 100) == []
    assert list(store.data_headers()) == []
    with pytest.raises(StorageError):
        store.term_at(1)
    assert store.apply_retention(NOW_MS) == 0
    store.sync()


# -- appending and reading by index --------------------------------------------------------


def test_append_and_read_by_index(store: LogStore) -> None:
    log = LogWriter(store, term=3)
    log.data(count=2)
    log.noop()
    log.config()
    log.data(count=5, n=2)
    assert (store.first_index(), store.last_index()) == (1, 5)
    assert same_entries(store.entries(1, 6), log.appended)
    assert same_entries(store.entries(2, 4), log.appended[1:3])
    assert same_entries(store.entries(4, 100), log.appended[3:])
    assert store.entries(6, 10) == []
    assert all(store.term_at(i) == 3 for i in range(1, 6))
    assert (store.first_offset(), store.next_offset()) == (0, 12)
    assert store.size_bytes() >= sum(len(e.payload) for e in log.appended)


def test_entry_types_survive(store: LogStore) -> None:
    log = LogWriter(store)
    log.data()
    log.noop()
    log.config()
    assert [e.type for e in store.entries(1, 4)] == [
        EntryType.DATA,
        EntryType.NOOP,
        EntryType.CONFIG,
    ]


def test_append_rejects_wrong_index(store: LogStore) -> None:
    with pytest.raises(StorageError):
        store.append([data_entry(2, 0)])
    store.append([data_entry(1, 0)])
    with pytest.raises(StorageError):
        store.append([data_entry(1, 1)])
    with pytest.raises(StorageError):
        store.append([data_entry(2, 1), data_entry(4, 2)])
    assert store.last_index() == 1
    assert store.next_offset() == 1


def test_append_rejects_offsets_going_back(store: LogStore) -> None:
    store.append([data_entry(1, 0, count=3)])
    with pytest.raises(StorageError):
        store.append([data_entry(2, 1)])
    assert store.last_index() == 1


def test_entries_max_bytes(store: LogStore) -> None:
    log = LogWriter(store)
    log.data(value_size=1_000, n=5)
    size = len(log.appended[0].payload)
    assert len(store.entries(1, 6, max_bytes=1)) == 1  # always at least one
    assert len(store.entries(1, 6, max_bytes=size)) == 1
    assert len(store.entries(1, 6, max_bytes=2 * size + 1)) == 2
    assert len(store.entries(2, 6, max_bytes=10 * size)) == 4
    assert len(store.entries(1, 6, max_bytes=None)) == 5


def test_entries_before_first_index_are_an_error(store: LogStore) -> None:
    LogWriter(store).data(n=2)
    with pytest.raises(StorageError):
        store.entries(0, 2)


def test_terms(store: LogStore) -> None:
    LogWriter(store, term=1).data(n=2)
    LogWriter(store, term=4).noop()
    assert [store.term_at(i) for i in (1, 2, 3)] == [1, 1, 4]
    with pytest.raises(StorageError):
        store.term_at(4)
    with pytest.raises(StorageError):
        store.term_at(0)


# -- reading by offset ----------------------------------------------------------------------


def test_read_by_offset_skips_raft_only_entries(store: LogStore) -> None:
    log = LogWriter(store)
    a = log.data(count=3)[0]  # offsets 0..2, index 1
    log.noop()  # index 2
    b = log.data(count=3)[0]  # offsets 3..5, index 3
    log.config()  # index 4
    log.noop()  # index 5
    c = log.data(count=3)[0]  # offsets 6..8, index 6
    assert [store.index_of_offset(o) for o in range(9)] == [1, 1, 1, 3, 3, 3, 6, 6, 6]
    assert store.index_of_offset(9) is None
    assert payloads(store.read_batches(0, 1 << 20, 6)) == [a.payload, b.payload, c.payload]
    # An offset inside a multi-record batch returns that whole batch.
    assert payloads(store.read_batches(4, 1 << 20, 6)) == [b.payload, c.payload]
    assert payloads(store.read_batches(8, 1 << 20, 6)) == [c.payload]
    assert store.read_batches(9, 1 << 20, 6) == []


def test_read_by_offset_in_a_gap_starts_at_the_next_batch(store: LogStore) -> None:
    store.append([data_entry(1, 0, count=2), noop_entry(2), data_entry(3, 10, count=2)])
    assert store.index_of_offset(5) == 3
    assert payloads(store.read_batches(5, 1 << 20, 3)) == [record_batch(10, 2)]
    assert store.next_offset() == 12


def test_read_batches_max_bytes(store: LogStore) -> None:
    log = LogWriter(store)
    entries = log.data(count=2, value_size=500, n=4)
    size = len(entries[0].payload)
    assert payloads(store.read_batches(0, 1, 4)) == [entries[0].payload]  # first always
    assert len(store.read_batches(0, size, 4)) == 1
    assert len(store.read_batches(0, 2 * size, 4)) == 2
    assert len(store.read_batches(0, 3 * size - 1, 4)) == 2
    assert len(store.read_batches(2, 100 * size, 4)) == 3


def test_read_batches_stops_at_max_index(store: LogStore) -> None:
    log = LogWriter(store)
    log.data(count=2, n=2)  # indexes 1, 2
    log.noop()  # index 3
    log.data(count=2)  # index 4
    assert len(store.read_batches(0, 1 << 20, 1)) == 1
    assert len(store.read_batches(0, 1 << 20, 3)) == 2
    assert len(store.read_batches(0, 1 << 20, 4)) == 3
    # Nothing is served beyond the commit point, not even the first batch.
    assert store.read_batches(4, 1 << 20, 3) == []
    assert store.read_batches(0, 1 << 20, 0) == []


def test_data_headers(store: LogStore) -> None:
    log = LogWriter(store)
    log.data(count=3)
    log.noop()
    log.data(count=1, n=2)
    want = [
        (e.index, bytes(e.payload[:HEADER_SIZE])) for e in log.appended if e.type == EntryType.DATA
    ]
    assert [(i, bytes(h)) for i, h in store.data_headers()] == want


# -- segments, rolling, reopening -----------------------------------------------------------


def test_reads_across_segments(open_store: OpenStore, backend: LogBackend, tmp_path: Path) -> None:
    store = open_store(SMALL_SEGMENTS)
    log = LogWriter(store)
    for n in range(40):
        log.data(count=2, value_size=100)
        if n % 5 == 0:
            log.noop()
    if backend == "segment":
        assert len(list((tmp_path / "log").glob("*.log"))) > 3
    assert same_entries(store.entries(1, log.index), log.appended)
    data = [e for e in log.appended if e.type == EntryType.DATA]
    assert payloads(store.read_batches(0, 1 << 30, log.index)) == [e.payload for e in data]
    for entry in data:
        first, last = batch_offsets(entry.payload)
        assert store.index_of_offset(last) == entry.index
        assert bytes(store.read_batches(first, 1, log.index)[0]) == entry.payload
    assert [i for i, _ in store.data_headers()] == [e.index for e in data]


def test_one_append_spanning_several_segments(open_store: OpenStore) -> None:
    store = open_store(SMALL_SEGMENTS)
    log = LogWriter(store)
    log.data(value_size=300, n=30)
    assert same_entries(store.entries(1, 31), log.appended)
    assert len(store.read_batches(0, 1 << 30, 30)) == 30


def test_reopen_keeps_everything(open_store: OpenStore) -> None:
    store = open_store(SMALL_SEGMENTS)
    log = LogWriter(store, term=2)
    for _ in range(30):
        log.data(count=3, value_size=100)
        log.noop()
    store.sync()
    before = (store.first_index(), store.last_index(), store.first_offset(), store.next_offset())
    size = store.size_bytes()
    store.close()
    again = open_store(SMALL_SEGMENTS)
    assert (again.first_index(), again.last_index()) == before[:2]
    assert (again.first_offset(), again.next_offset()) == before[2:]
    assert again.size_bytes() == size
    assert same_entries(again.entries(1, log.index), log.appended)
    assert again.term_at(again.last_index()) == 2
    assert again.index_of_offset(45) == store_index_of(log.appended, 45)
    LogWriter(again, term=3).data()
    assert again.last_index() == before[1] + 1


def store_index_of(entries: list[Entry], offset: int) -> int:
    for entry in entries:
        if entry.type == EntryType.DATA:
            first, last = batch_offsets(entry.payload)
            if first <= offset <= last:
                return entry.index
    raise AssertionError(f"offset {offset} not written")


def test_reopen_empty_store(open_store: OpenStore) -> None:
    open_store().close()
    store = open_store()
    assert (store.first_index(), store.last_index(), store.next_offset()) == (1, 0, 0)
    store.append([data_entry(1, 0)])
    assert store.last_index() == 1


def test_closed_store_refuses_work(store: LogStore) -> None:
    store.append([data_entry(1, 0)])
    store.close()
    with pytest.raises(StorageError):
        store.append([data_entry(2, 1)])
    with pytest.raises(StorageError):
        store.entries(1, 2)


# -- truncation -------------------------------------------------------------------------------


def test_truncate_suffix_then_append(open_store: OpenStore) -> None:
    store = open_store(SMALL_SEGMENTS)
    log = LogWriter(store, term=1)
    for _ in range(30):
        log.data(count=2, value_size=100)
    store.truncate_suffix(11)  # several segments back
    assert store.last_index() == 10
    assert store.next_offset() == 20
    assert store.index_of_offset(20) is None
    assert store.read_batches(20, 1 << 20, 100) == []
    assert same_entries(store.entries(1, 100), log.appended[:10])
    with pytest.raises(StorageError):
        store.term_at(11)

    newer = LogWriter(store, term=2)
    assert (newer.index, newer.offset) == (11, 20)
    for _ in range(5):
        newer.data(count=1, value_size=50)
    assert store.last_index() == 15
    assert store.term_at(11) == 2
    assert same_entries(store.entries(1, 100), log.appended[:10] + newer.appended)
    assert payloads(store.read_batches(20, 1 << 20, 15)) == [e.payload for e in newer.appended]
    store.close()
    again = open_store(SMALL_SEGMENTS)
    assert same_entries(again.entries(1, 100), log.appended[:10] + newer.appended)
    assert again.next_offset() == 25


def test_truncate_suffix_edges(store: LogStore) -> None:
    log = LogWriter(store)
    log.data(count=2, n=3)
    log.noop()
    store.truncate_suffix(10)  # beyond the end: nothing to do
    assert store.last_index() == 4
    store.truncate_suffix(4)  # only the NOOP
    assert (store.last_index(), store.next_offset()) == (3, 6)
    store.truncate_suffix(1)  # everything
    assert (store.first_index(), store.last_index()) == (1, 0)
    assert (store.first_offset(), store.next_offset()) == (0, 0)
    assert store.entries(1, 10) == []
    assert store.size_bytes() == 0
    store.append([data_entry(1, 0, term=5)])
    assert store.term_at(1) == 5


def test_truncated_entries_do_not_come_back(open_store: OpenStore) -> None:
    store = open_store(SMALL_SEGMENTS)
    log = LogWriter(store)
    log.data(value_size=200, n=20)
    store.sync()
    store.truncate_suffix(5)
    store.sync()
    store.close()
    again = open_store(SMALL_SEGMENTS)
    assert again.last_index() == 4
    assert again.next_offset() == 4


# -- retention ---------------------------------------------------------------------------------


def test_retention_by_bytes(open_store: OpenStore) -> None:
    options = LogStoreOptions(
        segment_bytes=2_000, cache_bytes=1_000, retention=LogRetention(max_bytes=6_000)
    )
    store = open_store(options)
    log = LogWriter(store)
    for _ in range(60):
        log.data(count=2, value_size=150)
    full = store.size_bytes()
    assert full > 12_000
    removed = store.apply_retention(NOW_MS)
    assert removed > 0
    assert store.first_index() == 1 + removed
    assert store.size_bytes() < full
    assert store.size_bytes() <= 6_000 + 2 * options.segment_bytes
    assert store.last_index() == 60
    first = store.first_offset()
    assert first == 2 * removed  # two records per batch, all DATA
    assert store.next_offset() == 120
    assert same_entries(store.entries(store.first_index(), 61), log.appended[removed:])
    assert bytes(store.read_batches(first, 1, 60)[0]) == log.appended[removed].payload
    assert store.index_of_offset(first) == store.first_index()
    with pytest.raises(StorageError):
        store.entries(1, 3)
    assert next(i for i, _ in store.data_headers()) == store.first_index()
    assert store.apply_retention(NOW_MS) == 0  # already within the limit

    store.close()
    again = open_store(options)
    assert (again.first_index(), again.first_offset()) == (1 + removed, first)
    assert again.next_offset() == 120


def test_retention_by_age(open_store: OpenStore) -> None:
    options = LogStoreOptions(
        segment_bytes=2_000, cache_bytes=1_000, retention=LogRetention(max_age_ms=60_000)
    )
    store = open_store(options)
    log = LogWriter(store)
    for _ in range(20):
        log.data(count=2, value_size=150, timestamp_ms=NOW_MS - 3_600_000)
    for _ in range(20):
        log.data(count=2, value_size=150, timestamp_ms=NOW_MS - 1_000)
    removed = store.apply_retention(NOW_MS)
    assert 0 < removed <= 20
    assert store.first_offset() == 2 * removed
    assert store.last_index() == 40
    # Everything recent is still there.
    recent = log.appended[20:]
    assert same_entries(store.entries(21, 41), recent)
    # Later, everything but the active segment has aged out.
    assert store.apply_retention(NOW_MS + 3_600_000) > 0
    assert store.last_index() == 40
    assert store.first_index() > 21


def test_retention_never_removes_the_last_entries(open_store: OpenStore) -> None:
    options = LogStoreOptions(
        segment_bytes=2_000, retention=LogRetention(max_bytes=1, max_age_ms=1)
    )
    store = open_store(options)
    log = LogWriter(store)
    for _ in range(30):
        log.data(value_size=150, timestamp_ms=0)
    store.apply_retention(NOW_MS)
    assert store.last_index() == 30
    assert store.first_index() <= 30
    assert same_entries(store.entries(30, 31), log.appended[-1:])
    assert store.next_offset() == 30
    log.data()
    assert store.last_index() == 31


def test_no_retention_configured(open_store: OpenStore) -> None:
    store = open_store(SMALL_SEGMENTS)
    LogWriter(store).data(value_size=300, n=20)
    assert store.apply_retention(NOW_MS) == 0
    assert store.first_index() == 1


def test_retention_keeps_offsets_when_no_data_is_left(open_store: OpenStore) -> None:
    options = LogStoreOptions(segment_bytes=500, retention=LogRetention(max_bytes=1))
    store = open_store(options)
    log = LogWriter(store)
    log.data(count=5, value_size=400, n=2)
    for _ in range(3):
        log.noop()
    store.apply_retention(NOW_MS)
    assert store.next_offset() == 10
    assert store.first_offset() <= 10
    log.data(count=1)
    assert store.next_offset() == 11
    assert store.index_of_offset(10) == store.last_index()


# -- snapshots --------------------------------------------------------------------------------

RETAINED = LogStoreOptions(
    segment_bytes=2_000, cache_bytes=1_000, retention=LogRetention(max_bytes=6_000)
)


def snapshot_source(open_store: OpenStore) -> LogStore:
    """A leader's log whose start retention has removed, in several segments."""
    source = open_store(RETAINED, name="leader")
    log = LogWriter(source, term=4)
    for n in range(60):
        log.data(count=2, value_size=100)
        if n % 7 == 0:
            log.noop()
    source.sync()
    assert source.apply_retention(NOW_MS) > 0
    assert source.first_index() > 1
    return source


def test_install_snapshot_replaces_the_whole_log(open_store: OpenStore) -> None:
    source = snapshot_source(open_store)
    first, upto = source.first_index(), source.last_index() - 3
    follower = open_store(SMALL_SEGMENTS, name="follower")
    LogWriter(follower, term=1).data(n=5)  # an old log, to be replaced
    staging = follower.stage_snapshot()
    copy_log(source, staging, upto)
    assert follower.last_index() == 5  # nothing changes before the install
    follower.install_snapshot(staging)
    follower.sync()
    want = source.entries(first, upto + 1)
    assert (follower.first_index(), follower.last_index()) == (first, upto)
    assert same_entries(follower.entries(first, upto + 1), want)
    assert follower.term_at(upto) == 4
    assert follower.first_offset() == source.first_offset()
    data = [e for e in want if e.type == EntryType.DATA]
    next_offset = batch_offsets(data[-1].payload)[1] + 1
    assert follower.next_offset() == next_offset
    assert payloads(follower.read_batches(follower.first_offset(), 1 << 30, upto)) == [
        bytes(e.payload) for e in data
    ]
    # The log goes on from there, and survives a restart.
    after = LogWriter(follower, term=5)
    assert (after.index, after.offset) == (upto + 1, next_offset)
    after.data(count=3, n=4)
    follower.sync()
    follower.close()
    again = open_store(SMALL_SEGMENTS, name="follower")
    assert (again.first_index(), again.last_index()) == (first, upto + 4)
    assert same_entries(again.entries(first, upto + 5), want + after.appended)
    assert again.next_offset() == next_offset + 12


def test_a_snapshot_that_does_not_add_up_is_refused(open_store: OpenStore) -> None:
    source = snapshot_source(open_store)
    follower = open_store(SMALL_SEGMENTS, name="follower")
    old = LogWriter(follower).data(n=5)
    upto = source.last_index()
    staging = follower.stage_snapshot()
    with pytest.raises(StorageError, match="term"):
        staging.start(source.first_index(), source.first_offset())
        staging.add_entries(source.entries(source.first_index(), upto + 1))
        staging.finish(upto, 3)  # the leader's entry there has term 4
    staging.discard()
    gap = follower.stage_snapshot()
    gap.start(source.first_index(), source.first_offset())
    with pytest.raises(StorageError):
        gap.add_entries(source.entries(source.first_index() + 1, upto + 1))
    gap.discard()
    short = follower.stage_snapshot()
    short.start(source.first_index(), source.first_offset())
    short.add_entries(source.entries(source.first_index(), upto))
    with pytest.raises(StorageError):
        short.finish(upto, 4)
    with pytest.raises(StorageError):
        follower.install_snapshot(short)  # not finished
    short.discard()
    assert same_entries(follower.entries(1, 6), old)


def test_closed_segments_are_files_or_nothing(
    open_store: OpenStore, backend: LogBackend, tmp_path: Path
) -> None:
    source = snapshot_source(open_store)
    held = source.closed_segments(source.last_index())
    if backend == "segment":
        assert held.files[0].first_index == source.first_index()
        for file in held.files:
            assert file.path.parent == tmp_path / "leader"
            assert file.path.stat().st_size == file.size
    else:
        assert held.files == ()
    held.release()
