"""SegmentLogStore specifics: crash recovery of files, index rebuilds, the cache, sync."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.storage.log_helpers import LogWriter, same_entries
from vdl.backends.api import (
    CorruptionError,
    Entry,
    EntryType,
    LogRetention,
    LogStoreOptions,
    batch_offsets,
)
from vdl.backends.segment.entry_codec import HEADER_SIZE
from vdl.backends.segment.segment import Segment
from vdl.backends.segment.store import SegmentLogStore

OPTIONS = LogStoreOptions(segment_bytes=4_000, cache_bytes=0)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "log"


@pytest.fixture
def opened(directory: Path) -> Iterator[list[SegmentLogStore]]:
    stores: list[SegmentLogStore] = []
    yield stores
    for store in stores:
        store.close()


def open_store(
    directory: Path, opened: list[SegmentLogStore], options: LogStoreOptions = OPTIONS
) -> SegmentLogStore:
    # Files that end at their data, as these tests expect (preallocated segments are
    # covered in test_segment_preallocation.py).
    store = SegmentLogStore.open(directory, options, preallocate=False)
    opened.append(store)
    return store


def write_log(directory: Path, opened: list[SegmentLogStore], batches: int = 30) -> list[Entry]:
    """A closed store of `batches` DATA entries (plus a NOOP every 7th) over several segments."""
    store = open_store(directory, opened)
    log = LogWriter(store)
    for n in range(batches):
        log.data(count=2, value_size=300)
        if n % 7 == 6:
            log.noop()
    store.close()
    return log.appended


def segment_files(directory: Path, suffix: str = ".log") -> list[Path]:
    return sorted(directory.glob("*" + suffix))


def check_store(store: SegmentLogStore, want: list[Entry]) -> None:
    """Every read path agrees with `want`."""
    assert store.last_index() == (want[-1].index if want else 0)
    assert same_entries(store.entries(1, store.last_index() + 1), want)
    data = [e for e in want if e.type == EntryType.DATA]
    got = store.read_batches(0, 1 << 30, store.last_index())
    assert [bytes(b) for b in got] == [e.payload for e in data]
    for entry in data:
        first, last = batch_offsets(entry.payload)
        assert store.index_of_offset(first) == entry.index
        assert store.index_of_offset(last) == entry.index
    assert store.next_offset() == (batch_offsets(data[-1].payload)[1] + 1 if data else 0)
    assert [i for i, _ in store.data_headers()] == [e.index for e in data]


def last_entry_position(path: Path, want: list[Entry]) -> int:
    """Byte position of the last entry of `want` inside segment file `path`."""
    return path.stat().st_size - HEADER_SIZE - len(want[-1].payload)


# -- torn and corrupt tails --------------------------------------------------------------------


def test_clean_reopen_needs_no_repair(directory: Path, opened: list[SegmentLogStore]) -> None:
    want = write_log(directory, opened)
    assert len(segment_files(directory)) > 2
    sizes = {p.name: p.stat().st_size for p in directory.iterdir()}
    check_store(open_store(directory, opened), want)
    assert {p.name: p.stat().st_size for p in directory.iterdir()} == sizes


def test_flipped_byte_in_last_entry_is_cut(directory: Path, opened: list[SegmentLogStore]) -> None:
    want = write_log(directory, opened)
    last = segment_files(directory)[-1]
    cut = last_entry_position(last, want)
    at = cut + HEADER_SIZE + 40  # inside the payload
    with last.open("r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x01]))
    store = open_store(directory, opened)
    check_store(store, want[:-1])
    assert last.stat().st_size == cut
    LogWriter(store).data()  # and the log goes on from there
    assert store.last_index() == want[-1].index


def test_flipped_byte_in_last_header_is_cut(directory: Path, opened: list[SegmentLogStore]) -> None:
    want = write_log(directory, opened)
    last = segment_files(directory)[-1]
    at = last_entry_position(last, want) + 10  # inside the term
    with last.open("r+b") as f:
        f.seek(at)
        f.write(b"\x7f")
    check_store(open_store(directory, opened), want[:-1])


def test_torn_tail_is_cut(directory: Path, opened: list[SegmentLogStore]) -> None:
    want = write_log(directory, opened)
    last = segment_files(directory)[-1]
    os.truncate(last, last_entry_position(last, want) + HEADER_SIZE + 7)
    check_store(open_store(directory, opened), want[:-1])


def test_torn_header_is_cut(directory: Path, opened: list[SegmentLogStore]) -> None:
    want = write_log(directory, opened)
    last = segment_files(directory)[-1]
    os.truncate(last, last_entry_position(last, want) + 3)
    check_store(open_store(directory, opened), want[:-1])


@pytest.mark.parametrize("garbage", [b"\x00" * 4096, b"\xff" * 100, os.urandom(1000)])
def test_garbage_after_last_entry_is_cut(
    directory: Path, opened: list[SegmentLogStore], garbage: bytes
) -> None:
    want = write_log(directory, opened)
    last = segment_files(directory)[-1]
    size = last.stat().st_size
    with last.open("ab") as f:
        f.write(garbage)
    check_store(open_store(directory, opened), want)
    assert last.stat().st_size == size


def test_corruption_inside_a_closed_segment_is_reported(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    want = write_log(directory, opened)
    first = segment_files(directory)[0]
    with first.open("r+b") as f:
        f.seek(HEADER_SIZE + 70)  # payload of entry 1
        f.write(b"\xaa\xbb")
    store = open_store(directory, opened)
    assert store.last_index() == want[-1].index  # nothing cut: this is not the tail
    with pytest.raises(CorruptionError):
        store.entries(1, 2)
    with pytest.raises(CorruptionError):
        store.read_batches(0, 1 << 20, 10)
    assert same_entries(store.entries(2, 3), want[1:2])


def test_torn_closed_segment_rolled_just_before_a_crash(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    """A crash right after a roll: the closed segment was never synced, so neither its
    indexes nor its tail made it; its torn entry ends the log and later segments go."""
    want = write_log(directory, opened)
    logs = segment_files(directory)
    victim = logs[-2]
    for path in segment_files(directory, ".raft_index") + segment_files(directory, ".log_index"):
        if path.stem == victim.stem:
            path.unlink()
    first_index = int(victim.stem.split("-")[0])
    os.truncate(victim, victim.stat().st_size - 5)
    store = open_store(directory, opened)
    kept = [e for e in want if e.index < int(logs[-1].stem.split("-")[0]) - 1]
    assert kept[-1].index >= first_index
    check_store(store, kept)
    assert segment_files(directory) == logs[:-1]


# -- index files -------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["first", "last", "all"])
def test_missing_index_files_are_rebuilt(
    directory: Path, opened: list[SegmentLogStore], which: str
) -> None:
    want = write_log(directory, opened)
    indexes = segment_files(directory, ".raft_index") + segment_files(directory, ".log_index")
    sizes = {p.name: p.stat().st_size for p in indexes}
    chosen = {"first": indexes[:1], "last": indexes[-1:], "all": indexes}[which]
    for path in chosen:
        path.unlink()
    check_store(open_store(directory, opened), want)
    assert {p.name: p.stat().st_size for p in indexes} == sizes


@pytest.mark.parametrize("suffix", [".raft_index", ".log_index"])
def test_lagging_index_of_the_last_segment_is_rebuilt(
    directory: Path, opened: list[SegmentLogStore], suffix: str
) -> None:
    want = write_log(directory, opened)
    index = segment_files(directory, suffix)[-1]
    size = index.stat().st_size
    os.truncate(index, size // 2 + 3)  # fewer records, and a torn one
    check_store(open_store(directory, opened), want)
    assert index.stat().st_size == size


def test_lagging_index_of_a_closed_segment_is_rebuilt(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    want = write_log(directory, opened)
    index = segment_files(directory, ".raft_index")[0]
    size = index.stat().st_size
    os.truncate(index, 16)
    check_store(open_store(directory, opened), want)
    assert index.stat().st_size == size


def test_index_ahead_of_a_cut_log_is_rebuilt(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    """The log lost its last entries but its indexes were written further."""
    want = write_log(directory, opened)
    last = segment_files(directory)[-1]
    os.truncate(last, last_entry_position(last, want))
    check_store(open_store(directory, opened), want[:-1])


def test_garbage_index_records_are_not_trusted(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    want = write_log(directory, opened)
    for path in segment_files(directory, ".raft_index")[-2:]:
        with path.open("r+b") as f:
            f.seek(-16, os.SEEK_END)
            f.write(b"\x00" * 16)
    check_store(open_store(directory, opened), want)


def test_index_files_are_complete_after_close(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    want = write_log(directory, opened)
    raft_records = sum(p.stat().st_size for p in segment_files(directory, ".raft_index")) // 16
    assert raft_records == len(want)
    data = sum(1 for e in want if e.type == EntryType.DATA)
    assert sum(p.stat().st_size for p in segment_files(directory, ".log_index")) // 40 == data


# -- cache and concurrency ----------------------------------------------------------------------


def test_tailing_reads_come_from_the_cache(
    directory: Path, opened: list[SegmentLogStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(directory, opened, LogStoreOptions(segment_bytes=4_000))
    log = LogWriter(store)
    log.data(count=2, value_size=300, n=20)

    def no_disk(self: Segment, position: int, n: int) -> bytes:
        raise AssertionError("read the disk")

    monkeypatch.setattr(Segment, "read", no_disk)
    assert same_entries(store.entries(15, 21), log.appended[14:])
    got = store.read_batches(30, 1 << 20, 20)
    assert [bytes(b) for b in got] == [e.payload for e in log.appended[15:]]
    monkeypatch.undo()
    assert same_entries(store.entries(1, 21), log.appended)


def test_a_small_cache_still_reads_everything(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    store = open_store(directory, opened, LogStoreOptions(segment_bytes=4_000, cache_bytes=2_000))
    log = LogWriter(store)
    for _ in range(25):
        log.data(count=2, value_size=300)
        log.noop()
    check_store(store, log.appended)
    store.truncate_suffix(40)
    check_store(store, log.appended[:39])


def test_sync_from_another_thread_while_appending(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    options = LogStoreOptions(segment_bytes=3_000, cache_bytes=10_000)
    store = open_store(directory, opened, options)
    log = LogWriter(store)
    stop = threading.Event()
    errors: list[BaseException] = []
    syncs = 0

    def flusher() -> None:
        nonlocal syncs
        try:
            while not stop.is_set():
                store.sync()
                syncs += 1
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for n in range(300):
            log.data(count=1, value_size=200, n=1 + n % 3)
            if n == 150:
                store.truncate_suffix(store.last_index() - 20)
                log.appended = log.appended[: store.last_index()]
                log.index, log.offset = store.last_index() + 1, store.next_offset()
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert syncs > 0
    store.sync()
    check_store(store, log.appended)
    store.close()
    check_store(open_store(directory, opened, options), log.appended)


def test_truncation_over_unsynced_segments_leaves_no_stray_files(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    store = open_store(directory, opened)
    log = LogWriter(store)
    log.data(count=2, value_size=300, n=40)  # several rolls, never synced
    store.truncate_suffix(3)
    del log.appended[2:]
    log.index, log.offset = 3, 4
    for _ in range(40):  # as far again, in small appends
        log.data(count=1, value_size=10)
        store.sync()
    store.close()
    for path in directory.iterdir():
        assert path.with_suffix(".log").exists(), f"stray {path.name}"
    check_store(open_store(directory, opened), log.appended)


def test_sync_covers_every_segment_written_since_the_last_one(
    directory: Path, opened: list[SegmentLogStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(directory, opened)
    LogWriter(store).data(value_size=300)
    store.sync()
    synced: list[int] = []
    dir_syncs: list[int] = []
    monkeypatch.setattr(os, "fdatasync", synced.append)
    monkeypatch.setattr(os, "fsync", dir_syncs.append)
    LogWriter(store).data(value_size=300, n=30)  # rolls several times
    store.sync()
    inodes = {os.fstat(fd).st_ino for fd in synced}
    written = {p.stat().st_ino for p in segment_files(directory)}
    assert inodes == written
    assert len(dir_syncs) == 1  # new segment files are named durably
    store.sync()
    assert len(synced) == len(inodes) and len(dir_syncs) == 1  # nothing new: nothing to do


def test_a_segment_deleted_during_a_sync_keeps_its_fd_until_the_sync_ends(
    directory: Path, opened: list[SegmentLogStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    options = LogStoreOptions(segment_bytes=1_000, retention=LogRetention(max_bytes=1))
    store = open_store(directory, opened, options)
    LogWriter(store).data(value_size=300, n=10)
    oldest_fd = store._segments.first.fd
    entered, release = threading.Event(), threading.Event()
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        entered.set()
        release.wait(5)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    worker = threading.Thread(target=store.sync)
    worker.start()
    try:
        assert entered.wait(5)
        assert store.apply_retention(0) > 0  # deletes the segment being synced
        os.fstat(oldest_fd)  # still open: the sync holds it
    finally:
        release.set()
        worker.join()
    with pytest.raises(OSError):
        os.fstat(oldest_fd)


def test_batch_headers_of_small_and_large_entries_read_back_exactly(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    # Runs of small entries share a read, entries past the read's reach get their own; a
    # store reopened (nothing cached) and the store that wrote them (some cached) agree.
    options = LogStoreOptions(segment_bytes=8 << 20, cache_bytes=64 * 1024)
    store = open_store(directory, opened, options)
    log = LogWriter(store)
    for n in range(400):
        log.data(count=1, value_size=700 * 1024 if n % 97 == 0 else 100)
    store.sync()
    want = [(e.index, bytes(e.payload[:61])) for e in log.appended if e.type == EntryType.DATA]
    assert list(store.data_headers()) == want
    store.close()
    assert list(open_store(directory, opened, options).data_headers()) == want
