"""A compaction pass over a live single-node stream (vdl/log/cleaner.py): appends go on
while a worker thread cleans, the dirty ratio decides whether a pass runs, and
cleanup.policy decides which retention applies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from vdl.backends.api import LogRetention
from vdl.backends.registry import open_meta_store
from vdl.broker.broker import Broker
from vdl.broker.topics import topic_config_specs
from vdl.log.cleaner import clean_stream
from vdl.log.compaction import CompactionSettings
from vdl.log.flusher import Flusher
from vdl.log.record_batch import Record, build_batch, iter_records, validate_produced_batch
from vdl.log.stream import LogStream

NOW_MS = 1_800_000_000_000
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "2000"}


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    meta = open_meta_store(tmp_path / "meta")
    flusher = Flusher()
    specs = topic_config_specs(
        retention_ms=3_600_000,
        retention_bytes=1 << 30,
        segment_bytes=1 << 20,
        max_message_bytes=1 << 20,
    )
    broker = Broker(tmp_path, meta, flusher, lambda: NOW_MS, config_specs=specs)
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        try:
            yield broker
        finally:
            await broker.close()
            flusher.stop()
    meta.close()


async def _append(stream: LogStream, key: bytes, value: bytes | None) -> None:
    batch = build_batch([Record(key, value, NOW_MS - 1_000)])
    appended = stream.append(
        batch, validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
    )
    await stream.wait_committed(appended.last_offset)


def _latest(stream: LogStream) -> dict[int, tuple[bytes | None, bytes | None]]:
    out = {}
    for batch in stream.read(0, 1 << 30):
        for record in iter_records(batch):
            out[record.offset] = (record.key, record.value)
    return out


async def test_a_pass_keeps_the_latest_value_per_key(broker: Broker) -> None:
    broker.create_topic("t", 1, COMPACTED)
    stream = broker.stream("t", 0)
    for n in range(60):
        await _append(stream, b"k%d" % (n % 4), b"v%02d" % n + b"." * 100)
    before = _latest(stream)
    settings = CompactionSettings(min_cleanable_dirty_ratio=0.01)
    assert await clean_stream(stream, settings, NOW_MS) > 0
    after = _latest(stream)
    assert set(after.items()) < set(before.items())
    keys = [key for key, _ in after.values()]
    # Every key is still there, and records went (the superseded ones).
    assert set(keys) == {b"k0", b"k1", b"k2", b"k3"}
    assert after[59] == before[59]  # the last record of all is kept
    # Nothing new: the next pass finds nothing dirty and does not run.
    assert await clean_stream(stream, settings, NOW_MS) == 0
    # Appends go on as before, at the next offset.
    await _append(stream, b"k9", b"x")
    assert max(_latest(stream)) == 60


async def test_the_dirty_ratio_and_the_lag_hold_a_pass_back(broker: Broker) -> None:
    broker.create_topic("t", 1, COMPACTED)
    stream = broker.stream("t", 0)
    for n in range(60):
        await _append(stream, b"k%d" % (n % 4), b"v%02d" % n + b"." * 100)
    # Records written a second ago are younger than a minute's lag: nothing is cleanable.
    lagging = CompactionSettings(min_cleanable_dirty_ratio=0.01, min_compaction_lag_ms=60_000)
    assert await clean_stream(stream, lagging, NOW_MS) == 0
    assert await clean_stream(stream, CompactionSettings(), NOW_MS) > 0
    # One more segment's worth is far less than half of what was cleaned: no pass.
    for n in range(15):
        await _append(stream, b"k%d" % (n % 4), b"w%02d" % n + b"." * 100)
    assert (
        await clean_stream(stream, CompactionSettings(min_cleanable_dirty_ratio=0.9), NOW_MS) == 0
    )


async def test_cleanup_policy_picks_the_retention(broker: Broker) -> None:
    broker.create_topic("c", 1, {"cleanup.policy": "compact"})
    broker.create_topic("cd", 1, {"cleanup.policy": "compact,delete", "retention.ms": "5000"})
    assert broker.stream("c", 0).store.apply_retention(NOW_MS) == 0
    compact = broker.catalog.get("c")
    both = broker.catalog.get("cd")
    assert compact is not None and both is not None
    assert broker._retention(compact) == LogRetention()
    assert broker._retention(both) == LogRetention(max_bytes=1 << 30, max_age_ms=5000)
