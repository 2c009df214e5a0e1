"""SegmentLogStore snapshots: closed segments handed out as files and held against
retention, staging checks, and the swap of a whole log surviving a crash at any point."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.storage.log_helpers import LogWriter, same_entries
from tests.unit.storage.snapshot_copy import copy_log
from vdl.backends.api import CorruptionError, Entry, LogRetention, LogStoreOptions, StorageError
from vdl.backends.segment import log_swap
from vdl.backends.segment.entry_codec import HEADER_SIZE
from vdl.backends.segment.staging import SegmentStaging
from vdl.backends.segment.store import SegmentLogStore

OPTIONS = LogStoreOptions(segment_bytes=2_000, cache_bytes=0)
RETAINED = LogStoreOptions(segment_bytes=2_000, retention=LogRetention(max_bytes=12_000))
NOW_MS = 10_000_000


@pytest.fixture
def opened() -> Iterator[list[SegmentLogStore]]:
    stores: list[SegmentLogStore] = []
    yield stores
    for store in stores:
        store.close()


class Stores:
    def __init__(self, root: Path, opened: list[SegmentLogStore]) -> None:
        self.root = root
        self.opened = opened

    def open(self, name: str, options: LogStoreOptions = OPTIONS) -> SegmentLogStore:
        store = SegmentLogStore.open(self.root / name, options, preallocate=False)
        self.opened.append(store)
        return store

    def leader(self, entries: int = 100) -> SegmentLogStore:
        store = self.open("leader", RETAINED)
        log = LogWriter(store, term=4)
        for _ in range(entries):
            log.data(count=2, value_size=100)
        store.sync()
        store.apply_retention(NOW_MS)
        assert store.first_index() > 1
        return store

    def follower(self) -> tuple[SegmentLogStore, list[Entry]]:
        store = self.open("follower")
        old = LogWriter(store, term=1).data(n=30, value_size=100)
        store.sync()
        return store, old


@pytest.fixture
def stores(tmp_path: Path, opened: list[SegmentLogStore]) -> Stores:
    return Stores(tmp_path, opened)


def _staged(store: SegmentLogStore) -> SegmentStaging:
    staging = store.stage_snapshot()
    assert isinstance(staging, SegmentStaging)
    return staging


def test_closed_segments_cover_the_log_from_its_start(stores: Stores) -> None:
    leader = stores.leader()
    upto = leader.last_index() - 5
    held = leader.closed_segments(upto)
    assert len(held.files) > 1
    assert held.files[0].first_index == leader.first_index()
    for before, after in zip(held.files, held.files[1:], strict=False):
        assert after.first_index == before.last_index + 1
    assert held.files[-1].last_index <= upto
    on_disk = sorted(p.name for p in (stores.root / "leader").glob("*.log"))
    assert [f.name for f in held.files] == on_disk[: len(held.files)]
    assert len(held.files) < len(on_disk)  # never the active segment
    assert all(f.path.stat().st_size == f.size for f in held.files)
    held.release()
    # Segments whose entries are not durable yet are not handed out.
    log = LogWriter(leader, term=4)
    log.data(value_size=300, n=20)
    last_durable = leader.closed_segments(leader.last_index())
    assert last_durable.files[-1].last_index <= upto + 5
    last_durable.release()


def test_held_segments_are_kept_from_retention(stores: Stores) -> None:
    leader = stores.leader()
    LogWriter(leader, term=4).data(value_size=100, n=40)
    leader.sync()
    first = leader.first_index()
    held = leader.closed_segments(leader.last_index())
    assert leader.apply_retention(NOW_MS) == 0
    assert leader.first_index() == first and not held.broken
    held.release()
    assert leader.apply_retention(NOW_MS) > 0
    assert leader.first_index() > first


def test_cutting_or_dropping_a_held_segment_breaks_the_hold(stores: Stores) -> None:
    leader = stores.leader()
    held = leader.closed_segments(leader.last_index())
    other = leader.closed_segments(held.files[0].last_index)
    assert len(other.files) == 1
    leader.truncate_suffix(held.files[-1].last_index)  # cuts the last held one in place
    assert held.broken and not other.broken
    leader.reset(500, 1000)
    assert other.broken


def test_files_arrive_as_they_are_stored(stores: Stores) -> None:
    leader = stores.leader()
    follower, _ = stores.follower()
    upto = leader.last_index() - 2
    staging = _staged(follower)
    assert staging.directory.parent == stores.root / "follower"
    files = copy_log(leader, staging, upto)
    assert files > 1
    follower.install_snapshot(staging)
    assert not staging.directory.exists()
    held = leader.closed_segments(upto)
    for file in held.files:
        assert (stores.root / "follower" / file.name).read_bytes() == file.path.read_bytes()
    held.release()
    assert same_entries(
        follower.entries(leader.first_index(), upto + 1),
        leader.entries(leader.first_index(), upto + 1),
    )


def test_a_corrupt_file_is_refused_and_the_old_log_stays(stores: Stores) -> None:
    leader = stores.leader()
    follower, old = stores.follower()
    file = leader.closed_segments(leader.last_index()).files[0]
    data = bytearray(file.path.read_bytes())
    data[len(data) // 2] ^= 0x40  # inside some entry's payload
    staging = _staged(follower)
    staging.start(leader.first_index(), leader.first_offset())
    staging.begin_file(file.name, file.size)
    staging.write(data)
    with pytest.raises(CorruptionError):
        staging.end_file()
    staging.discard()
    assert not staging.directory.exists()
    assert same_entries(follower.entries(1, 31), old)


def test_a_file_out_of_sequence_is_refused(stores: Stores) -> None:
    leader = stores.leader()
    follower, _ = stores.follower()
    files = leader.closed_segments(leader.last_index()).files
    staging = _staged(follower)
    staging.start(leader.first_index(), leader.first_offset())
    with pytest.raises(StorageError, match="does not follow"):
        staging.begin_file(files[1].name, files[1].size)
    with pytest.raises(StorageError, match="not the name"):
        staging.begin_file("../escape.log", 10)
    staging.begin_file(files[0].name, files[0].size)
    with pytest.raises(StorageError, match="more than"):
        staging.write(bytes(files[0].size + 1))
    staging.discard()


def test_a_crash_before_the_swap_leaves_the_old_log(stores: Stores) -> None:
    leader = stores.leader()
    follower, old = stores.follower()
    staging = _staged(follower)
    copy_log(leader, staging, leader.last_index())  # staged and synced, never installed
    half = _staged(follower)
    half.start(leader.first_index(), leader.first_offset())  # a transfer cut short
    follower.close()
    again = stores.open("follower")
    assert not staging.directory.exists() and not half.directory.exists()
    assert (again.first_index(), again.last_index()) == (1, 30)
    assert same_entries(again.entries(1, 31), old)


@pytest.mark.parametrize("moved", [0, 2, 5, 1000])
def test_a_crash_during_the_swap_finishes_it_on_open(stores: Stores, moved: int) -> None:
    leader = stores.leader()
    follower, _ = stores.follower()
    upto = leader.last_index() - 1
    staging = _staged(follower)
    copy_log(leader, staging, upto)
    follower.close()
    directory = stores.root / "follower"
    # The commit happened, then the crash came after `moved` steps of the roll-forward.
    log_swap.commit(directory, staging.directory)
    ready = directory / log_swap.READY
    for path in sorted(directory.glob("*.log"))[:moved]:
        path.unlink()
    for path in sorted(ready.glob("*.*"))[:moved]:
        os.rename(path, directory / path.name)
    if moved == 1000:
        for path in ready.iterdir():
            if path.name != log_swap.MANIFEST:
                path.unlink()
    again = stores.open("follower")
    assert not ready.exists()
    assert (again.first_index(), again.last_index()) == (leader.first_index(), upto)
    assert same_entries(
        again.entries(leader.first_index(), upto + 1),
        leader.entries(leader.first_index(), upto + 1),
    )


def test_entries_after_an_install_continue_the_log(stores: Stores) -> None:
    leader = stores.leader()
    follower, _ = stores.follower()
    upto = leader.last_index()
    staging = _staged(follower)
    copy_log(leader, staging, upto)
    follower.install_snapshot(staging)
    log = LogWriter(follower, term=6)
    assert (log.index, log.offset) == (upto + 1, leader.next_offset())
    log.data(count=2, value_size=400, n=12)  # rolls a few segments more
    assert follower.index_of_offset(leader.next_offset() + 3) == upto + 2
    follower.sync()
    follower.close()
    again = stores.open("follower")
    assert again.last_index() == upto + 12
    assert same_entries(again.entries(upto + 1, upto + 13), log.appended)
    assert again.next_offset() == leader.next_offset() + 24


def test_a_staging_of_another_store_is_refused(stores: Stores) -> None:
    leader = stores.leader()
    follower, _ = stores.follower()
    staging = _staged(leader)
    copy_log(leader, staging, leader.last_index())
    with pytest.raises(StorageError):
        follower.install_snapshot(staging)
    staging.discard()


def test_entries_alone_are_staged_in_segments_of_the_store_size(stores: Stores) -> None:
    leader = stores.leader()
    follower, _ = stores.follower()
    upto = leader.last_index()
    staging = _staged(follower)
    assert copy_log(leader, staging, upto, files=False) == 0
    follower.install_snapshot(staging)
    logs = sorted((stores.root / "follower").glob("*.log"))
    assert len(logs) > 3
    assert all(p.stat().st_size < OPTIONS.segment_bytes + 500 for p in logs)
    first = leader.first_index()
    assert same_entries(follower.entries(first, upto + 1), leader.entries(first, upto + 1))
    assert follower.next_offset() == leader.next_offset()


def test_bytes_after_an_index_counts_the_entries_a_follower_lacks(stores: Stores) -> None:
    store = stores.open("lag")
    entries = LogWriter(store, term=2).data(n=40, value_size=100)
    assert store.segment_count() > 2  # the sum crosses segments
    on_disk = [HEADER_SIZE + len(e.payload) for e in entries]
    for index in (0, 1, 7, 19, 20, 39):
        assert store.bytes_after(index) == sum(on_disk[index:]), index
    assert store.bytes_after(40) == 0
    assert store.bytes_after(1000) == 0
    assert store.bytes_after(0) == store.size_bytes()
