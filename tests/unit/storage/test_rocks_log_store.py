"""RocksLogStore specifics: offsets, truncation, recovery, retention without segments."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from vdl.backends.api import (
    Entry,
    EntryType,
    LogRetention,
    LogStoreOptions,
    StorageError,
    batch_offsets,
)
from vdl.backends.rocks.log_store import RocksLogStore
from vdl.log.batch_header import HEADER, HEADER_SIZE, LOG_OVERHEAD


def record_batch(base: int, count: int, max_ts: int = 0, body: bytes = b"") -> bytes:
    """A RecordBatch v2 with only the header fields a log store reads filled in."""
    length = HEADER_SIZE - LOG_OVERHEAD + len(body)
    return (
        HEADER.pack(base, length, 0, 2, 0, 0, count - 1, max_ts, max_ts, -1, -1, -1, count) + body
    )


def data(
    term: int, index: int, base: int, count: int = 1, max_ts: int = 0, body: bytes = b""
) -> Entry:
    return Entry(term, index, EntryType.DATA, record_batch(base, count, max_ts, body))


def noop(term: int, index: int) -> Entry:
    return Entry(term, index, EntryType.NOOP, b"")


def open_store(path: Path, **kw: object) -> RocksLogStore:
    return RocksLogStore.open(path, LogStoreOptions(**kw))  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RocksLogStore]:
    s = open_store(tmp_path / "log")
    yield s
    s.close()


def test_helper_builds_batches_the_api_can_read() -> None:
    assert batch_offsets(record_batch(10, 5)) == (10, 14)
    assert len(record_batch(0, 1)) == 61


def test_new_store_is_empty(store: RocksLogStore) -> None:
    assert (store.first_index(), store.last_index()) == (1, 0)
    assert (store.first_offset(), store.next_offset()) == (0, 0)
    assert store.size_bytes() == 0
    assert store.index_of_offset(0) is None
    assert store.read_batches(0, 1 << 20, 100) == []
    assert store.entries(1, 10) == []
    with pytest.raises(StorageError):
        store.term_at(0)


def test_append_and_read_by_index_and_offset(store: RocksLogStore) -> None:
    entries = [noop(1, 1), data(1, 2, 0, 3), data(2, 3, 3, 2), Entry(2, 4, EntryType.CONFIG, b"c")]
    store.append(entries)
    assert store.last_index() == 4
    assert [store.term_at(i) for i in range(1, 5)] == [1, 1, 2, 2]
    assert store.entries(1, 5) == entries
    assert store.entries(2, 4) == entries[1:3]
    assert (store.first_offset(), store.next_offset()) == (0, 5)
    assert [store.index_of_offset(o) for o in range(6)] == [2, 2, 2, 3, 3, None]
    assert store.read_batches(1, 1 << 20, 4) == [entries[1].payload, entries[2].payload]
    assert store.read_batches(3, 1 << 20, 4) == [entries[2].payload]
    assert store.read_batches(0, 1 << 20, 2) == [entries[1].payload]  # commit point
    assert store.read_batches(0, 1, 4) == [entries[1].payload]  # first one whatever its size
    assert list(store.data_headers()) == [(2, entries[1].payload), (3, entries[2].payload)]
    assert store.size_bytes() > 0


def test_append_rejects_index_gaps_and_offsets_going_back(store: RocksLogStore) -> None:
    store.append([data(1, 1, 0, 2)])
    with pytest.raises(StorageError):
        store.append([data(1, 3, 2)])
    with pytest.raises(StorageError):
        store.append([data(1, 2, 1)])
    with pytest.raises(StorageError):
        store.append([Entry(1, 2, EntryType.DATA, b"short")])
    assert (store.last_index(), store.next_offset()) == (1, 2)


def test_entries_respects_max_bytes_but_returns_at_least_one(store: RocksLogStore) -> None:
    store.append([data(1, i, i - 1) for i in range(1, 6)])
    assert len(store.entries(1, 6, max_bytes=1)) == 1
    assert len(store.entries(1, 6, max_bytes=61 * 3)) == 3


def test_offset_in_a_gap_finds_next_batch(store: RocksLogStore) -> None:
    store.append([data(1, 1, 0, 2), data(1, 2, 10, 2)])
    assert store.index_of_offset(5) == 2
    assert store.read_batches(5, 1 << 20, 2) == [record_batch(10, 2)]


def test_truncate_suffix_rewinds_offsets_and_terms(store: RocksLogStore) -> None:
    store.append([data(1, 1, 0, 2), noop(2, 2), data(2, 3, 2, 2), data(2, 4, 4)])
    size_before = store.size_bytes()
    store.truncate_suffix(3)
    assert (store.last_index(), store.term_at(2), store.next_offset()) == (2, 2, 2)
    assert store.index_of_offset(2) is None
    assert store.size_bytes() < size_before
    store.append([data(3, 3, 2, 5)])
    assert store.index_of_offset(6) == 3
    assert store.term_at(3) == 3
    store.truncate_suffix(1)
    assert (store.first_index(), store.last_index(), store.next_offset()) == (1, 0, 0)
    assert store.size_bytes() == 0


def test_state_survives_reopen(tmp_path: Path) -> None:
    store = open_store(tmp_path / "log")
    store.append([noop(1, 1), data(1, 2, 0, 4), data(2, 3, 4, 1)])
    store.truncate_suffix(3)
    store.append([data(3, 3, 4, 2), noop(3, 4)])
    store.sync()
    expected = store.entries(1, 100)
    size = store.size_bytes()
    store.close()
    store = open_store(tmp_path / "log")
    try:
        assert store.entries(1, 100) == expected
        assert (store.first_index(), store.last_index(), store.term_at(4)) == (1, 4, 3)
        assert (store.first_offset(), store.next_offset(), store.size_bytes()) == (0, 6, size)
    finally:
        store.close()


def test_retention_by_size_keeps_the_newest_segment_worth(tmp_path: Path) -> None:
    body = b"x" * 939  # 1000-byte batches
    store = open_store(tmp_path / "log", segment_bytes=3000, retention=LogRetention(max_bytes=5000))
    try:
        store.append([data(1, i, i - 1, body=body) for i in range(1, 21)])
        removed = store.apply_retention(now_ms=0)
        assert removed > 0
        assert store.size_bytes() <= 5000
        assert store.first_index() == 1 + removed
        assert store.first_offset() == removed
        assert store.index_of_offset(0) == store.first_index()  # before the start: first batch
        with pytest.raises(StorageError):
            store.term_at(1)
        assert store.apply_retention(now_ms=0) == 0
        store.close()
        store = open_store(tmp_path / "log", segment_bytes=3000)
        assert store.first_index() == 1 + removed
        assert (store.first_offset(), store.next_offset()) == (removed, 20)
        assert store.last_index() == 20
    finally:
        store.close()


def test_retention_by_age_stops_at_first_recent_batch(tmp_path: Path) -> None:
    retention = LogRetention(max_age_ms=1000)
    store = open_store(tmp_path / "log", segment_bytes=100, retention=retention)
    try:
        store.append([noop(1, 1)] + [data(1, i, i - 2, max_ts=i * 100) for i in range(2, 12)])
        # Deadline 500: batches with maxTimestamp 200..400 (indexes 2..4) are expired,
        # and the NOOP before them goes with them.
        assert store.apply_retention(now_ms=1500) == 4
        assert (store.first_index(), store.first_offset()) == (5, 3)
    finally:
        store.close()


def test_retention_never_removes_the_last_entry(tmp_path: Path) -> None:
    store = open_store(tmp_path / "log", segment_bytes=1, retention=LogRetention(max_bytes=0))
    try:
        store.append([data(1, i, i - 1) for i in range(1, 6)])
        assert store.apply_retention(now_ms=0) == 4
        assert (store.first_index(), store.last_index(), store.first_offset()) == (5, 5, 4)
        store.truncate_suffix(5)
        assert (store.first_index(), store.last_index()) == (5, 4)
        assert (store.first_offset(), store.next_offset()) == (4, 4)
        store.append([data(2, 5, 4)])
        assert store.index_of_offset(4) == 5
    finally:
        store.close()


def test_sync_runs_concurrently_with_appends(store: RocksLogStore) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                store.sync()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for i in range(1, 501):
            store.append([data(1, i, i - 1)])
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert store.next_offset() == 500


def test_close_is_idempotent_and_use_after_close_fails(tmp_path: Path) -> None:
    store = open_store(tmp_path / "log")
    store.close()
    store.close()
    with pytest.raises(StorageError):
        store.sync()
    with pytest.raises(StorageError):
        store.append([data(1, 1, 0)])


def test_unclean_exit_recovers_everything_written_from_the_wal(tmp_path: Path) -> None:
    # The child dies without close(), so nothing but the WAL holds its writes.
    child = textwrap.dedent(
        f"""
        import os, sys
        from pathlib import Path
        sys.path[:0] = {sys.path!r}
        from tests.unit.storage.test_rocks_log_store import data, open_store, noop
        store = open_store(Path({str(tmp_path / "log")!r}))
        store.append([data(1, 1, 0, 3), noop(2, 2)])
        store.sync()
        store.append([data(2, 3, 3, 2)])
        store.truncate_suffix(3)
        store.append([data(3, 3, 3, 4)])
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", child], check=True, timeout=60)
    store = open_store(tmp_path / "log")
    try:
        assert [e.term for e in store.entries(1, 10)] == [1, 2, 3]
        assert store.next_offset() == 7
        assert store.index_of_offset(5) == 3
    finally:
        store.close()
