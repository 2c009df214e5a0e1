"""The partition leader's check of a transaction's first batch (vdl.txn.produce_check,
KIP-890 part 1), on a real LogStream and a real coordinator over one node's store: batches
of one producer queued behind an unverified first one are appended in arrival order, an
unverified one is refused, a fenced epoch is told so, and the queue empties.

The coordinator's markers go to the recording writer of test_coordinator.py.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.unit.txn.test_coordinator import RecordingMarkers
from vdl.backends.api import LogStoreOptions
from vdl.backends.registry import open_log_store
from vdl.cluster.memory_meta import MemoryMetaStore
from vdl.log.appender import LocalAppender
from vdl.log.batch_header import BatchInfo
from vdl.log.error_codes import ErrorCode
from vdl.log.flusher import Flusher
from vdl.log.record_batch import Record, build_batch, validate_produced_batch
from vdl.log.stream import LogStream
from vdl.txn import produce_check
from vdl.txn.commands import LocalTxnLog
from vdl.txn.coordinator import TxnCoordinator
from vdl.txn.produce_check import PendingBatch, check_batch
from vdl.txn.state import TxnStore

TID, TOPIC = "tx", "t"


def _batch(value: bytes, pid: int, epoch: int, seq: int) -> tuple[bytes, BatchInfo]:
    batch = build_batch(
        [Record(None, value, 1_000)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    return batch, validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)


@pytest.fixture
async def stream(tmp_path: Path) -> AsyncIterator[LogStream]:
    flusher = Flusher()
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        store = open_log_store("segment", tmp_path / "stream", LogStoreOptions())
        opened = LogStream(f"{TOPIC}-0", store, LocalAppender.factory(flusher), lambda: 5_000)
        yield opened
        await opened.close()
        flusher.stop()


@pytest.fixture
async def coordinator(nursery: trio.Nursery) -> TxnCoordinator:
    meta = MemoryMetaStore()
    ids = itertools.count(1000)
    c = TxnCoordinator(
        TxnStore(meta),
        LocalTxnLog(meta),
        RecordingMarkers(),
        lambda: next(ids),
        lambda: int(trio.current_time() * 1000),
    )
    await nursery.start(c.run)
    return c


async def _append_when_verified(
    pending: PendingBatch,
    batch: bytes,
    appended: list[bytes],
    errors: list[ErrorCode],
    offsets: list[int] | None = None,
) -> None:
    offsets = [] if offsets is None else offsets
    try:
        error = await pending.verified()
        errors.append(error)
        if error == ErrorCode.NONE:
            at = pending.stream.append(batch, pending.info)
            appended.append(batch)
            offsets.append(at.base_offset)
    finally:
        pending.done()


async def test_batches_queued_behind_the_first_keep_their_order(
    stream: LogStream, coordinator: TxnCoordinator
) -> None:
    init = await coordinator.init_producer_id(TID, 60_000)
    pid, epoch = init.producer_id, init.producer_epoch
    first, first_info = _batch(b"first", pid, epoch, 0)
    second, second_info = _batch(b"second", pid, epoch, 1)
    # The partition is not added yet: the first batch waits for its verification...
    pending_first = check_batch(coordinator, stream, TOPIC, 0, TID, first_info)
    assert pending_first is not None
    # ... and the producer's next batch queues behind it, though by now it is added.
    added = await coordinator.add_partitions(TID, pid, epoch, [(TOPIC, 0)])
    assert added == ErrorCode.NONE
    pending_second = check_batch(coordinator, stream, TOPIC, 0, TID, second_info)
    assert pending_second is not None
    appended: list[bytes] = []
    errors: list[ErrorCode] = []
    offsets: list[int] = []
    async with trio.open_nursery() as nursery:
        # The second is started first: it still waits for the first's turn.
        nursery.start_soon(_append_when_verified, pending_second, second, appended, errors, offsets)
        await trio.testing.wait_all_tasks_blocked()
        assert appended == []
        nursery.start_soon(_append_when_verified, pending_first, first, appended, errors, offsets)
    assert errors == [ErrorCode.NONE, ErrorCode.NONE]
    # In the log in arrival order, and nothing is left queued.
    assert (appended, offsets) == ([first, second], [0, 1])
    assert stream.txns.open_transaction(pid) == 0
    assert produce_check._queues == {}
    # With the transaction open here, later batches go straight through.
    _, third_info = _batch(b"third", pid, epoch, 2)
    assert check_batch(coordinator, stream, TOPIC, 0, TID, third_info) is None


async def test_unverified_and_fenced_batches_are_refused(
    stream: LogStream, coordinator: TxnCoordinator
) -> None:
    init = await coordinator.init_producer_id(TID, 60_000)
    pid, epoch = init.producer_id, init.producer_epoch
    appended: list[bytes] = []
    errors: list[ErrorCode] = []
    # Never added: refused once the (one-node, so immediate) verification fails.
    batch, info = _batch(b"unadded", pid, epoch, 0)
    pending = check_batch(coordinator, stream, TOPIC, 0, TID, info)
    assert pending is not None
    await _append_when_verified(pending, batch, appended, errors)
    # A newer producer of the id fences this epoch.
    assert (await coordinator.init_producer_id(TID, 60_000)).producer_epoch == epoch + 1
    stale, stale_info = _batch(b"stale", pid, epoch, 0)
    pending = check_batch(coordinator, stream, TOPIC, 0, TID, stale_info)
    assert pending is not None
    await _append_when_verified(pending, stale, appended, errors)
    assert errors == [ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_EPOCH]
    assert appended == [] and stream.txns.open_transaction(pid) is None
    assert produce_check._queues == {}
    # The current producer, with its partition added, is served at once.
    assert await coordinator.add_partitions(TID, pid, epoch + 1, [(TOPIC, 0)]) == ErrorCode.NONE
    _, good_info = _batch(b"good", pid, epoch + 1, 0)
    assert check_batch(coordinator, stream, TOPIC, 0, TID, good_info) is None


async def test_a_batch_behind_a_refused_one_is_refused(
    stream: LogStream, coordinator: TxnCoordinator
) -> None:
    # The producer's first batch is refused; the next one, queued behind it, must not be
    # verified by a transaction begun since (it belongs to the one the first failed in).
    init = await coordinator.init_producer_id(TID, 60_000)
    pid, epoch = init.producer_id, init.producer_epoch
    first, first_info = _batch(b"first", pid, epoch, 0)
    second, second_info = _batch(b"second", pid, epoch, 1)
    pending_first = check_batch(coordinator, stream, TOPIC, 0, TID, first_info)
    pending_second = check_batch(coordinator, stream, TOPIC, 0, TID, second_info)
    assert pending_first is not None and pending_second is not None
    appended: list[bytes] = []
    errors: list[ErrorCode] = []
    await _append_when_verified(pending_first, first, appended, errors)
    assert await coordinator.add_partitions(TID, pid, epoch, [(TOPIC, 0)]) == ErrorCode.NONE
    await _append_when_verified(pending_second, second, appended, errors)
    assert errors == [ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_TXN_STATE]
    assert appended == [] and produce_check._queues == {}
    # The producer's retry of its batches, arriving now, is served.
    assert check_batch(coordinator, stream, TOPIC, 0, TID, first_info) is None
