"""SegmentLogStore with preallocated segments: zeros past the last entry are free space,
torn or corrupt entries before them are still cut, and files end at their data when closed
or recovered."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.storage.log_helpers import LogWriter, same_entries
from vdl.backends.api import Entry, LogStoreOptions
from vdl.backends.segment.entry_codec import HEADER_SIZE
from vdl.backends.segment.preallocate import SPARE_SUFFIX
from vdl.backends.segment.store import SegmentLogStore

SEGMENT = 16 * 1024
OPTIONS = LogStoreOptions(segment_bytes=SEGMENT, cache_bytes=0, preallocate=True)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "log"


@pytest.fixture
def opened() -> Iterator[list[SegmentLogStore]]:
    stores: list[SegmentLogStore] = []
    yield stores
    for store in stores:
        store.close()


def open_store(directory: Path, opened: list[SegmentLogStore]) -> SegmentLogStore:
    store = SegmentLogStore.open(directory, OPTIONS)
    opened.append(store)
    return store


def wait_for_spare(store: SegmentLogStore) -> None:
    spare = store._spare
    assert spare is not None
    deadline = time.monotonic() + 10
    while not spare.ready():
        assert time.monotonic() < deadline, "spare never got ready"
        time.sleep(0.001)


def preallocated_log(directory: Path, opened: list[SegmentLogStore]) -> list[Entry]:
    """A closed store whose active segment is a preallocated file with entries in it."""
    store = open_store(directory, opened)
    wait_for_spare(store)
    log = LogWriter(store)
    log.data(count=2, value_size=300, n=5)
    active = store._segments.active
    assert active.preallocated and len(store._segments) == 1  # the empty file was swapped
    assert active.path.stat().st_size == SEGMENT
    assert store.size_bytes() == sum(HEADER_SIZE + len(e.payload) for e in log.appended)
    store.close()
    return log.appended


def only_log(directory: Path) -> Path:
    (path,) = directory.glob("*.log")
    return path


def end_of(entries: list[Entry]) -> int:
    return sum(HEADER_SIZE + len(e.payload) for e in entries)


def test_zero_tail_after_entries_is_free_space(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    want = preallocated_log(directory, opened)
    path = only_log(directory)
    assert path.stat().st_size == SEGMENT  # closing keeps the zeros: nothing to repair
    store = open_store(directory, opened)
    assert same_entries(store.entries(1, 100), want)
    # Recovery writes on at the end of the data (and drops the zeros, see recovery.py).
    assert path.stat().st_size == end_of(want) == store.size_bytes()


@pytest.mark.parametrize("damage", ["torn", "corrupt"])
def test_bad_last_entry_before_zeros_is_cut(
    directory: Path, opened: list[SegmentLogStore], damage: str
) -> None:
    want = preallocated_log(directory, opened)
    path = only_log(directory)
    last_at = end_of(want[:-1])
    with path.open("r+b") as f:
        if damage == "torn":  # its second half never reached the disk
            half = last_at + (HEADER_SIZE + len(want[-1].payload)) // 2
            f.seek(half)
            f.write(bytes(end_of(want) - half))
        else:
            f.seek(last_at + HEADER_SIZE + 40)
            f.write(b"\xaa")
    store = open_store(directory, opened)
    assert same_entries(store.entries(1, 100), want[:-1])
    assert path.stat().st_size == last_at
    LogWriter(store).data()
    assert store.last_index() == want[-1].index


def test_crash_right_after_preallocation(directory: Path, opened: list[SegmentLogStore]) -> None:
    """A segment file of nothing but zeros (created from a spare, no entry synced yet), and
    a half-written spare."""
    directory.mkdir()
    path = directory / "00000000000000000001-00000000000000000000.log"
    path.write_bytes(bytes(SEGMENT))
    (directory / ("next" + SPARE_SUFFIX)).write_bytes(bytes(100))
    store = open_store(directory, opened)
    assert (store.first_index(), store.last_index(), store.size_bytes()) == (1, 0, 0)
    assert path.stat().st_size == 0
    log = LogWriter(store)
    log.data(n=3)
    store.close()
    assert same_entries(open_store(directory, opened).entries(1, 10), log.appended)


def test_reopen_and_append_rolls_into_a_spare(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    want = preallocated_log(directory, opened)
    store = open_store(directory, opened)
    log = LogWriter(store)
    log.data(count=2, value_size=300)  # onto the recovered, cut segment
    wait_for_spare(store)
    log.data(count=2, value_size=300, n=3)  # rolls early into the spare
    assert len(store._segments) == 2 and store._segments.active.preallocated
    store.sync()
    store.close()
    again = open_store(directory, opened)
    assert same_entries(again.entries(1, 100), want + log.appended)


def test_closed_segments_end_at_their_data(directory: Path, opened: list[SegmentLogStore]) -> None:
    store = open_store(directory, opened)
    log = LogWriter(store)
    for _ in range(6):
        wait_for_spare(store)
        log.data(count=4, value_size=1000, n=6)  # rolls once the segment is full
    assert len(store._segments) > 3
    closed = store._segments.snapshot()[:-1]
    assert sum(s.preallocated for s in closed) == 0
    store.close()
    for segment in closed:
        assert segment.path.stat().st_size == segment.size
    again = open_store(directory, opened)
    assert same_entries(again.entries(1, 1000), log.appended)
    assert again.size_bytes() == end_of(log.appended)


def test_truncation_drops_the_zeros_and_old_entries(
    directory: Path, opened: list[SegmentLogStore]
) -> None:
    store = open_store(directory, opened)
    wait_for_spare(store)
    log = LogWriter(store)
    log.data(count=2, value_size=300, n=6)
    store.sync()
    store.truncate_suffix(4)
    newer = LogWriter(store, term=2)
    newer.data(count=2, value_size=300, n=2)
    store.sync()
    store.close()
    path = only_log(directory)
    assert path.stat().st_size == end_of(log.appended[:3] + newer.appended)
    again = open_store(directory, opened)
    assert same_entries(again.entries(1, 100), log.appended[:3] + newer.appended)


def test_no_spare_is_left_behind(directory: Path, opened: list[SegmentLogStore]) -> None:
    store = open_store(directory, opened)
    wait_for_spare(store)
    store.close()
    assert not list(directory.glob("*" + SPARE_SUFFIX))
    assert os.listdir(directory)  # the (empty) segment and its indexes stay
