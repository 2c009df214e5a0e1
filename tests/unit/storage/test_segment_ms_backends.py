"""segment.ms at run time through the LogStore interface, whatever the backend: the broker
hands an altered segment.ms to every open store; the segment store rolls by it from the
next append, the RocksDB store (which has no segments) takes it and goes on serving."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from vdl.backends.registry import LogBackend, open_meta_store
from vdl.broker.broker import Broker
from vdl.broker.topics import topic_config_specs
from vdl.log.flusher import Flusher
from vdl.log.record_batch import Record, build_batch, iter_records, validate_produced_batch
from vdl.log.stream import LogStream

NOW_MS = 1_800_000_000_000
SPECS = topic_config_specs(
    retention_ms=-1, retention_bytes=-1, segment_bytes=1 << 20, max_message_bytes=1 << 20
)


@pytest.fixture(params=["segment", "rocks"])
async def broker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Broker]:
    backend: LogBackend = request.param
    meta = open_meta_store(tmp_path / "meta")
    flusher = Flusher()
    broker = Broker(
        tmp_path, meta, flusher, lambda: NOW_MS, log_backend=backend, config_specs=SPECS
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        try:
            yield broker
        finally:
            await broker.close()
            flusher.stop()
    meta.close()


async def _append(stream: LogStream, value: bytes, stamp: int) -> None:
    batch = build_batch([Record(None, value, stamp)])
    appended = stream.append(
        batch, validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
    )
    await stream.wait_committed(appended.last_offset)


async def test_an_altered_segment_ms_reaches_every_backend(broker: Broker) -> None:
    broker.create_topic("t", 1, {"segment.ms": "3600000"})
    stream = broker.stream("t", 0)
    await _append(stream, b"a", NOW_MS - 10_000)
    segments = stream.store.segment_count()
    topic = broker.catalog.get("t")
    assert topic is not None
    broker.update_topic(dataclasses.replace(topic, configs={"segment.ms": "100"}))
    await _append(stream, b"b", NOW_MS - 9_000)
    rocks = broker._log_backend == "rocks"
    # A segment store rolls before the batch 1 s past its segment's first; RocksDB has none.
    assert stream.store.segment_count() == (0 if rocks else segments + 1)
    values = [r.value for batch in stream.read(0, 1 << 20) for r in iter_records(batch)]
    assert values == [b"a", b"b"]
