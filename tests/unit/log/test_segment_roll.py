"""segment.ms and max.compaction.lag.ms: the segment store rolls by batch timestamps in the
log (vdl/backends/segment/store.py `time_to_roll`), so the same entries make the same
segment files however they arrive; the broker serves both settings (segment.ms capped by
max.compaction.lag.ms for a compacted topic, KIP-354), and the cleaner runs a pass whose
dirty part is overdue whatever min.cleanable.dirty.ratio says."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio

from vdl.backends.api import Entry, EntryType, LogStoreOptions
from vdl.backends.registry import open_meta_store
from vdl.backends.segment.store import SegmentLogStore, time_to_roll
from vdl.broker.broker import Broker
from vdl.broker.topics import TopicError, topic_config_specs, validate_configs
from vdl.log.cleaner import clean_stream
from vdl.log.compaction import CompactionSettings
from vdl.log.error_codes import ErrorCode
from vdl.log.flusher import Flusher
from vdl.log.record_batch import Record, build_batch, validate_produced_batch
from vdl.log.stream import LogStream

NOW_MS = 1_800_000_000_000
SPECS = topic_config_specs(
    retention_ms=-1, retention_bytes=-1, segment_bytes=1 << 20, max_message_bytes=1 << 20
)


def test_the_roll_rule_compares_batch_timestamps() -> None:
    assert not time_to_roll(1_000, 2_000, 1_000)  # exactly segment.ms apart: not yet
    assert time_to_roll(1_000, 2_001, 1_000)
    assert not time_to_roll(5_000, 2_000, 1_000)  # an older timestamp never rolls
    assert not time_to_roll(-1, 9_999_999, 1_000)  # batches without timestamps
    assert not time_to_roll(1_000, -1, 1_000)


@pytest.fixture
def stores() -> Iterator[list[SegmentLogStore]]:
    opened: list[SegmentLogStore] = []
    yield opened
    for store in opened:
        store.close()


def _open(path: Path, opened: list[SegmentLogStore], segment_ms: int | None) -> SegmentLogStore:
    options = LogStoreOptions(segment_bytes=1 << 20, segment_ms=segment_ms)
    store = SegmentLogStore.open(path, options, preallocate=False)
    opened.append(store)
    return store


def _entries(stamps: list[int | None]) -> list[Entry]:
    """One DATA entry per timestamp (None: a NOOP), from raft index 1 and offset 0."""
    out: list[Entry] = []
    offset = 0
    for index, stamp in enumerate(stamps, start=1):
        if stamp is None:
            out.append(Entry(1, index, EntryType.NOOP, b""))
            continue
        payload = build_batch([Record(b"k%d" % index, b"v", stamp)], base_offset=offset)
        out.append(Entry(1, index, EntryType.DATA, payload))
        offset += 1
    return out


def _files(store: SegmentLogStore) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(store.directory.iterdir())}


def _first_indexes(store: SegmentLogStore) -> list[int]:
    return sorted(int(path.name.split("-")[0]) for path in store.directory.glob("*.log"))


# A NOOP first (as a new leader's), batches 400 ms apart, one late and one early batch.
STAMPS: list[int | None] = [None, 1_000, 1_400, 1_800, 2_000, 2_001, None, 2_500, 1_200, 3_002]


def test_segments_roll_before_the_batch_past_segment_ms(
    tmp_path: Path, stores: list[SegmentLogStore]
) -> None:
    store = _open(tmp_path / "s", stores, segment_ms=1_000)
    store.append(_entries(STAMPS))
    store.sync()
    # Entry 6 (2001) is more than 1000 past entry 2 (1000), the segment's first batch;
    # entry 10 (3002) is more than 1000 past entry 6 (2001). NOOPs and the early batch
    # (1200) never roll.
    assert _first_indexes(store) == [1, 6, 10]
    assert store.segment_count() == 3


def test_the_same_entries_make_the_same_files_however_they_arrive(
    tmp_path: Path, stores: list[SegmentLogStore]
) -> None:
    entries = _entries(STAMPS)
    whole = _open(tmp_path / "whole", stores, segment_ms=1_000)
    whole.append(entries)  # as a leader's one append of many
    one_by_one = _open(tmp_path / "one", stores, segment_ms=1_000)
    for entry in entries:  # as a follower's appends, one entry per message
        one_by_one.append([entry])
        one_by_one.sync()
    whole.sync()
    whole.close()
    one_by_one.close()
    assert _files(whole) == _files(one_by_one)
    assert len([name for name in _files(whole) if name.endswith(".log")]) == 3


def test_the_roll_rule_survives_a_reopen(tmp_path: Path, stores: list[SegmentLogStore]) -> None:
    entries = _entries(STAMPS)
    store = _open(tmp_path / "s", stores, segment_ms=1_000)
    store.append(entries[:7])
    store.sync()
    store.close()
    # Reopened, the active segment's first batch comes from its log index again.
    store = _open(tmp_path / "s", stores, segment_ms=1_000)
    store.append(entries[7:])
    store.sync()
    assert _first_indexes(store) == [1, 6, 10]


def test_segment_ms_changes_from_the_next_append(
    tmp_path: Path, stores: list[SegmentLogStore]
) -> None:
    entries = _entries(STAMPS)
    store = _open(tmp_path / "s", stores, segment_ms=None)
    store.append(entries[:6])  # by size only: no roll at 2001
    store.set_segment_ms(500)
    store.append(entries[6:])
    store.sync()
    # 2500 is more than 500 past 1000 (entry 2, the first batch), 3002 past 2500.
    assert _first_indexes(store) == [1, 8, 10]


def test_the_settings_are_checked_as_kafka_does() -> None:
    validate_configs(
        SPECS, {"segment.ms": "1", "max.compaction.lag.ms": "5", "min.compaction.lag.ms": "5"}
    )
    for configs in [
        {"segment.ms": "0"},
        {"segment.ms": "a week"},
        {"max.compaction.lag.ms": "0"},
        # KIP-354: the minimum lag may not pass the maximum, given or by default.
        {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "9"},
    ]:
        with pytest.raises(TopicError) as refused:
            validate_configs(SPECS, configs)
        assert refused.value.error == ErrorCode.INVALID_CONFIG
    assert SPECS["segment.ms"].default == "604800000"  # Kafka's 7 days
    assert SPECS["max.compaction.lag.ms"].default == str(2**63 - 1)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    meta = open_meta_store(tmp_path / "meta")
    flusher = Flusher()
    broker = Broker(tmp_path, meta, flusher, lambda: NOW_MS, config_specs=SPECS)
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        try:
            yield broker
        finally:
            await broker.close()
            flusher.stop()
    meta.close()


async def _append(stream: LogStream, key: bytes, stamp: int) -> None:
    batch = build_batch([Record(key, b"v" * 100, stamp)])
    appended = stream.append(
        batch, validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
    )
    await stream.wait_committed(appended.last_offset)


async def test_a_compacted_topic_rolls_by_the_smaller_of_the_two(broker: Broker) -> None:
    broker.create_topic("c", 1, {"cleanup.policy": "compact", "max.compaction.lag.ms": "100"})
    broker.create_topic("d", 1, {"max.compaction.lag.ms": "100", "segment.ms": "1000"})
    for name in ("c", "d"):
        stream = broker.stream(name, 0)
        for n in range(4):
            await _append(stream, b"k", NOW_MS - 10_000 + 150 * n)
    # Compacted: every batch is more than 100 ms past the one before. Not compacted:
    # max.compaction.lag.ms does not apply, and 450 ms is within segment.ms.
    assert broker.stream("c", 0).store.segment_count() == 4
    assert broker.stream("d", 0).store.segment_count() == 1
    # An altered segment.ms reaches the open stream at once.
    topic = broker.catalog.get("d")
    assert topic is not None
    broker.update_topic(dataclasses.replace(topic, configs={"segment.ms": "100"}))
    await _append(broker.stream("d", 0), b"k", NOW_MS - 9_000)
    assert broker.stream("d", 0).store.segment_count() == 2


async def test_max_compaction_lag_overrides_the_dirty_ratio(broker: Broker) -> None:
    broker.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": "2000"})
    stream = broker.stream("t", 0)
    for n in range(60):
        await _append(stream, b"k%d" % (n % 4), NOW_MS - 60_000)
    ratio = CompactionSettings(min_cleanable_dirty_ratio=0.9)
    assert await clean_stream(stream, ratio, NOW_MS) > 0  # all dirty: the first pass runs
    # A little more, written 30 s ago: far below the ratio, so no pass...
    for n in range(20):
        await _append(stream, b"k%d" % (n % 4), NOW_MS - 30_000)
    assert await clean_stream(stream, ratio, NOW_MS) == 0
    lag_a_minute = CompactionSettings(min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=60_000)
    assert await clean_stream(stream, lag_a_minute, NOW_MS) == 0
    # ...until its first batch is older than max.compaction.lag.ms.
    lag_20s = CompactionSettings(min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=20_000)
    assert await clean_stream(stream, lag_20s, NOW_MS) > 0
    assert await clean_stream(stream, lag_20s, NOW_MS) == 0  # nothing dirty left
