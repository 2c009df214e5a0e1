"""MarkerWriter on a one-node Broker: markers committed per partition, each partition's
error, a retry that writes nothing twice, and the checks on a forwarded request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from vdl.backends.registry import open_meta_store
from vdl.broker.broker import Broker
from vdl.broker.topics import topic_config_specs
from vdl.log.error_codes import ErrorCode
from vdl.log.flusher import Flusher
from vdl.log.record_batch import (
    CONTROL_ABORT,
    Record,
    build_batch,
    control_record,
    validate_produced_batch,
)
from vdl.txn.markers import MarkerWriter, _parse_request

NOW_MS = 1_800_000_000_000


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


def _produce(broker: Broker, partition: int, producer_id: int, epoch: int, seq: int) -> None:
    batch = build_batch(
        [Record(None, b"v", NOW_MS)],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    info = validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
    broker.stream("t", partition).append(batch, info)


async def test_markers_are_committed_on_each_partition(broker: Broker) -> None:
    broker.create_topic("t", 2, {})
    for partition in (0, 1):
        _produce(broker, partition, 1000, 0, 0)
    writer = MarkerWriter(broker)
    wanted = [("t", 0), ("t", 1), ("t", 5), ("gone", 0)]
    results = await writer.write(1000, 0, False, 3, wanted, timeout_s=10)
    assert results == {
        ("t", 0): ErrorCode.NONE,
        ("t", 1): ErrorCode.NONE,
        ("t", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    for partition in (0, 1):
        stream = broker.stream("t", partition)
        # Committed: the LSO is past the marker, the transaction in the aborted index.
        assert stream.high_watermark == stream.last_stable_offset == 2
        (marker,) = stream.read(1, 1 << 20)
        assert control_record(marker) == (CONTROL_ABORT, 3)
        assert [a.first_offset for a in stream.txns.aborted_index()] == [0]
    # Again (a coordinator retrying): answered NONE, nothing written twice.
    again = await writer.write(1000, 0, False, 3, [("t", 0)], timeout_s=10)
    assert again == {("t", 0): ErrorCode.NONE}
    assert broker.stream("t", 0).log_end_offset == 2
    # A newer epoch is written (it fences the producer's older epoch) ...
    bumped = await writer.write(1000, 1, False, 4, [("t", 1)], timeout_s=10)
    assert bumped == {("t", 1): ErrorCode.NONE}
    assert broker.stream("t", 1).log_end_offset == 3
    # ... and a marker older than the partition's epoch is refused.
    older = await writer.write(1000, 0, True, 4, [("t", 1)], timeout_s=10)
    assert older == {("t", 1): ErrorCode.INVALID_PRODUCER_EPOCH}


def _request(**changes: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "op": "txn_marker",
        "request_id": "abc",
        "reply_to": 2,
        "topic": "t",
        "partition": 0,
        "producer_id": 1000,
        "producer_epoch": 1,
        "commit": True,
        "coordinator_epoch": 7,
    }
    request.update(changes)
    return request


def test_a_forwarded_request_is_checked_before_it_is_served() -> None:
    assert _parse_request(_request()) == (2, "t", 0, (1000, 1, True, 7))
    for bad in (
        {"producer_epoch": 1 << 15},  # does not fit the batch header's int16
        {"coordinator_epoch": -1},
        {"partition": "0"},
        {"commit": 1},
        {"topic": None},
        {"request_id": 5},
        {"producer_id": True},
    ):
        assert _parse_request(_request(**bad)) is None, bad
