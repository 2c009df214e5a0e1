"""The leader-epoch table: on its own, and kept by a LogStream over both real backends
(built from the stored batch headers at open, extended on append, rebuilt after a
truncation, cut at a DeleteRecords log start)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trio

from vdl.backends.api import Entry, EntryType, LogStore, LogStoreOptions
from vdl.backends.registry import LOG_BACKENDS, open_log_store
from vdl.log.appender import SINGLE_NODE_TERM, LocalAppender
from vdl.log.flusher import Flusher
from vdl.log.leader_epochs import LeaderEpochs
from vdl.log.record_batch import Record, build_batch, validate_produced_batch
from vdl.log.stream import LogStream

UNDEFINED = (-1, -1)


def _table(*entries: tuple[int, int]) -> LeaderEpochs:
    table = LeaderEpochs()
    for epoch, start in entries:
        table.assign(epoch, start)
    return table


def test_assign_keeps_the_first_offset_of_each_newer_epoch() -> None:
    table = _table((1, 0), (1, 5), (3, 10), (2, 12), (3, 14), (-1, 20), (4, 20))
    assert table.entries() == [(1, 0), (3, 10), (4, 20)]
    assert table.latest == 4
    assert LeaderEpochs().latest == -1


def test_end_offsets_as_kafkas_leader_epoch_cache_gives_them() -> None:
    table = _table((2, 0), (4, 10), (7, 25))
    # The largest epoch at or below the one asked for, and where the next one begins.
    assert table.end_offset_for(2, 40, 7) == (2, 10)
    assert table.end_offset_for(3, 40, 7) == (2, 10)
    assert table.end_offset_for(4, 40, 7) == (4, 25)
    assert table.end_offset_for(6, 40, 7) == (4, 25)
    # The latest epoch ends at the log end.
    assert table.end_offset_for(7, 40, 7) == (7, 40)
    # Below the earliest, above the current, or negative: undefined.
    assert table.end_offset_for(1, 40, 7) == UNDEFINED
    assert table.end_offset_for(8, 40, 7) == UNDEFINED
    assert table.end_offset_for(-1, 40, 7) == UNDEFINED


def test_a_current_epoch_without_batches_begins_at_the_log_end() -> None:
    table = _table((2, 0), (4, 10))
    assert table.end_offset_for(4, 30, 9) == (4, 30)
    assert table.end_offset_for(6, 30, 9) == (4, 30)
    assert table.end_offset_for(9, 30, 9) == (9, 30)
    assert table.end_offset_for(10, 30, 9) == UNDEFINED
    assert LeaderEpochs().end_offset_for(3, 0, 3) == (3, 0)
    assert LeaderEpochs().end_offset_for(2, 0, 3) == UNDEFINED


def test_truncation_removes_the_epochs_that_began_after_the_new_end() -> None:
    table = _table((1, 0), (3, 10), (5, 20))
    table.truncate_from(20)
    assert table.entries() == [(1, 0), (3, 10)]
    table.truncate_from(11)
    assert table.entries() == [(1, 0), (3, 10)]
    table.truncate_from(0)
    assert table.entries() == []


def test_a_new_log_start_keeps_the_epoch_that_holds_it() -> None:
    table = _table((1, 0), (3, 10), (5, 20))
    table.drop_before(5)
    assert table.entries() == [(1, 5), (3, 10), (5, 20)]
    table.drop_before(15)
    assert table.entries() == [(3, 15), (5, 20)]
    table.drop_before(20)
    assert table.entries() == [(5, 20)]
    assert table.end_offset_for(3, 30, 5) == UNDEFINED  # now below the earliest


# -- kept by a stream --------------------------------------------------------------------


def _stored(store: LogStore, *terms_and_counts: tuple[int, int]) -> None:
    """Write batches stamped with the given (term, records) into the store, as a Raft
    leader of each term would have."""
    offset = store.next_offset()
    index = store.last_index() + 1
    for term, count in terms_and_counts:
        records = [Record(None, b"v", 1_000, []) for _ in range(count)]
        batch = build_batch(records, base_offset=offset, partition_leader_epoch=term)
        store.append([Entry(term, index, EntryType.DATA, batch)])
        offset += count
        index += 1
    store.sync()


Opener = Callable[[], LogStream]


@pytest.fixture(params=LOG_BACKENDS)
async def env(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Opener, Callable[[], LogStore]]]:
    flusher = Flusher()
    streams: list[LogStream] = []
    directory = tmp_path / "stream"

    def open_store() -> LogStore:
        return open_log_store(request.param, directory, LogStoreOptions())

    def open_stream() -> LogStream:
        stream = LogStream("t-0", open_store(), LocalAppender.factory(flusher), lambda: 5_000)
        streams.append(stream)
        return stream

    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        yield open_stream, open_store
        for stream in streams:
            await stream.close()
        flusher.stop()


async def test_the_table_is_rebuilt_from_the_log_at_open(
    env: tuple[Opener, Callable[[], LogStore]],
) -> None:
    open_stream, open_store = env
    store = open_store()
    _stored(store, (1, 3), (1, 2), (4, 5), (6, 1))
    store.close()
    stream = open_stream()
    assert stream.epochs.entries() == [(1, 0), (4, 5), (6, 10)]
    assert stream.end_offset_for_epoch(1) == (1, 5)
    assert stream.end_offset_for_epoch(5) == (4, 10)
    assert stream.end_offset_for_epoch(0) == UNDEFINED


async def test_appends_add_their_epoch_and_truncation_removes_it(
    env: tuple[Opener, Callable[[], LogStore]],
) -> None:
    open_stream, open_store = env
    store = open_store()
    _stored(store, (0, 2))  # an epoch below the single replica's
    store.close()
    stream = open_stream()
    batch = build_batch([Record(None, b"x", 1_000, [])])
    info = validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
    appended = stream.append(memoryview(bytearray(batch)), info)
    assert appended.base_offset == 2
    assert stream.epochs.entries() == [(0, 0), (SINGLE_NODE_TERM, 2)]
    await stream.wait_committed(appended.last_offset)
    assert stream.end_offset_for_epoch(0) == (0, 2)
    assert stream.end_offset_for_epoch(SINGLE_NODE_TERM) == (SINGLE_NODE_TERM, 3)
    # A new leader replaced the entry (raft index 2): its epoch goes with it.
    stream.store.truncate_suffix(2)
    stream.on_truncated(2)
    assert stream.epochs.entries() == [(0, 0)]


async def test_a_log_start_inside_the_log_cuts_the_table(
    env: tuple[Opener, Callable[[], LogStore]],
) -> None:
    open_stream, open_store = env
    store = open_store()
    _stored(store, (1, 4), (2, 4), (3, 4))
    store.close()
    stream = open_stream()
    assert stream.advance_log_start(6) == 6
    assert stream.log_start_offset == 6
    assert stream.advance_log_start(2) == 6  # never backwards
    assert stream.epochs.entries() == [(2, 6), (3, 8)]
    assert stream.end_offset_for_epoch(1) == UNDEFINED
    assert stream.end_offset_for_epoch(2) == (2, 8)


async def test_retention_deletes_the_whole_segments_below_the_log_start(tmp_path: Path) -> None:
    store = open_log_store("segment", tmp_path / "s", LogStoreOptions(segment_bytes=200))
    _stored(store, *[(1, 2)] * 30)  # 60 records, in many segments
    flusher = Flusher()
    stream = LogStream("t-0", store, LocalAppender.factory(flusher), lambda: 5_000)
    try:
        assert store.first_offset() == 0
        assert stream.apply_retention() == 0  # no limits, no log start: nothing goes
        stream.advance_log_start(31)
        assert stream.apply_retention() > 0
        # What is left starts at or below the log start, in the segment holding it.
        assert 0 < store.first_offset() <= 31
        assert stream.log_start_offset == 31
        assert stream.read(31, 1 << 20)
        assert stream.apply_retention() == 0
    finally:
        await stream.close()
