"""SegmentLogStore's deferred writes: append() only queues, sync() writes and fdatasyncs."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.unit.storage.log_helpers import LogWriter, same_entries
from vdl.backends.api import Buffer, LogRetention, LogStoreOptions, StorageError
from vdl.backends.segment import durability, file_io
from vdl.backends.segment.segment import Segment
from vdl.backends.segment.store import SegmentLogStore

NO_CACHE = LogStoreOptions(segment_bytes=4_000, cache_bytes=0)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "log"


@pytest.fixture
def opened() -> Iterator[list[SegmentLogStore]]:
    stores: list[SegmentLogStore] = []
    yield stores
    for store in stores:
        try:
            store.close()
        except StorageError:
            pass


def open_store(
    directory: Path, opened: list[SegmentLogStore], options: LogStoreOptions = NO_CACHE
) -> SegmentLogStore:
    # Files that end at their data, as these tests expect (preallocated segments are
    # covered in test_segment_preallocation.py).
    store = SegmentLogStore.open(directory, options, preallocate=False)
    opened.append(store)
    return store


def log_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def test_append_writes_nothing_and_queued_entries_are_readable(
    directory: Path, opened: list[SegmentLogStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(directory, opened)  # a zero cache budget still holds unwritten entries
    log = LogWriter(store)
    log.data(count=2, value_size=300, n=25)  # several rolls
    assert log_bytes(directory) == 0

    def no_disk(self: Segment, position: int, n: int) -> bytes:
        raise AssertionError("read the disk")

    monkeypatch.setattr(Segment, "read", no_disk)
    assert same_entries(store.entries(1, 26), log.appended)
    got = store.read_batches(0, 1 << 30, 25)
    assert [bytes(b) for b in got] == [bytes(e.payload) for e in log.appended]
    assert len(list(store.data_headers())) == 25
    monkeypatch.undo()

    store.sync()
    assert log_bytes(directory) == store.size_bytes()
    log.data(value_size=10)  # the next append lets the written entries go
    assert store._cache.first_index == 26
    assert same_entries(store.entries(1, 27), log.appended)  # now from the files


def test_unsynced_entries_are_not_in_the_files_after_close_without_sync(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    store = open_store(directory, opened)
    log = LogWriter(store)
    log.data(n=3)
    store.sync()
    log.data(n=2)
    # A crash now: simulate by dropping the queue the way a dying process would.
    store._tracker._queue.clear()
    store._tracker._appended = 3
    store.close()
    again = open_store(directory, opened)
    assert again.last_index() == 3
    assert same_entries(again.entries(1, 4), log.appended[:3])


def test_truncation_waits_for_a_sync_that_is_writing(
    directory: Path, opened: list[SegmentLogStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries a sync is writing are cut after their write lands, never overwritten by it."""
    store = open_store(directory, opened)
    log = LogWriter(store)
    log.data(count=1, value_size=100, n=6)
    entered, release = threading.Event(), threading.Event()
    real = file_io.pwritev_all

    def slow_pwritev(fd: int, buffers: Sequence[Buffer], at: int) -> int:
        entered.set()
        release.wait(5)
        return real(fd, buffers, at)

    monkeypatch.setattr(durability, "pwritev_all", slow_pwritev)
    worker = threading.Thread(target=store.sync)
    worker.start()
    truncated = threading.Event()

    def truncate() -> None:
        store.truncate_suffix(4)
        truncated.set()

    owner = threading.Thread(target=truncate)
    try:
        assert entered.wait(5)
        owner.start()
        assert not truncated.wait(0.2)  # held back by the write in progress
    finally:
        release.set()
        worker.join()
        owner.join()
    monkeypatch.undo()
    assert truncated.is_set()
    newer = LogWriter(store, term=2)
    newer.data(count=1, value_size=50, n=2)
    store.sync()
    want = log.appended[:3] + newer.appended
    assert same_entries(store.entries(1, 10), want)
    store.close()
    again = open_store(directory, opened)
    assert same_entries(again.entries(1, 10), want)
    assert again.term_at(again.last_index()) == 2


def test_truncation_drops_queued_entries(directory: Path, opened: list[SegmentLogStore]) -> None:
    store = open_store(directory, opened)
    log = LogWriter(store)
    log.data(value_size=300, n=3)
    store.sync()
    log.data(value_size=300, n=20)  # queued, over several segments
    store.truncate_suffix(10)
    newer = LogWriter(store, term=3)
    newer.data(value_size=20, n=2)
    store.sync()
    store.close()
    again = open_store(directory, opened)
    assert same_entries(again.entries(1, 100), log.appended[:9] + newer.appended)
    for path in directory.iterdir():
        assert path.with_suffix(".log").exists(), f"stray {path.name}"


def test_retention_of_a_segment_with_queued_entries(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    options = LogStoreOptions(segment_bytes=1_000, cache_bytes=0, retention=LogRetention(1))
    store = open_store(directory, opened, options)
    log = LogWriter(store)
    log.data(value_size=300, n=10)  # all still queued
    removed = store.apply_retention(0)
    assert removed > 0
    store.sync()  # must not write to the deleted segments' (closed) fds
    assert same_entries(store.entries(store.first_index(), 11), log.appended[removed:])
    store.close()
    again = open_store(directory, opened, options)
    assert (again.first_index(), again.last_index()) == (removed + 1, 10)


def test_a_failed_write_fails_the_store(
    directory: Path, opened: list[SegmentLogStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(directory, opened)
    LogWriter(store).data(n=2)

    def no_space(fd: int, buffers: Sequence[Buffer], at: int) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(durability, "pwritev_all", no_space)
    with pytest.raises(StorageError):
        store.sync()
    monkeypatch.undo()
    with pytest.raises(StorageError):
        store.sync()  # no retry can pretend the lost writes happened
    with pytest.raises(StorageError):
        LogWriter(store).data()


def test_sync_gathers_adjacent_entries_into_one_write(
    directory: Path, opened: list[SegmentLogStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(directory, opened, LogStoreOptions())
    LogWriter(store).data(value_size=100, n=50)
    calls: list[int] = []
    real = os.pwritev

    def counting(fd: int, buffers: Sequence[Buffer], at: int) -> int:
        calls.append(len(buffers))
        return real(fd, buffers, at)

    monkeypatch.setattr(os, "pwritev", counting)
    store.sync()
    assert calls == [100]  # header and payload of each entry, one call


def test_short_gathered_writes_are_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pwritev

    def at_most_7(fd: int, buffers: Sequence[Buffer], at: int) -> int:
        first = memoryview(buffers[0])[:7]
        return real(fd, [first], at)

    monkeypatch.setattr(os, "pwritev", at_most_7)
    parts: list[Buffer] = [
        b"header",
        bytearray(b"x" * 20),
        memoryview(b"0123456789")[2:],
        b"",
        b"end",
    ]
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert file_io.pwritev_all(fd, parts, 3) == 37
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"\0\0\0" + b"".join(bytes(p) for p in parts)
