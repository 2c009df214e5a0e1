"""The transaction coordinator's state machine (vdl.txn.coordinator) on one node's store.

The markers go to a recording writer here (the partitions' side has its own tests and the
integration tests run both together); everything else is the product's: the store, the
one-node log, the coordinator and its background task, on Trio's autojump clock.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing

from vdl.cluster.memory_meta import MemoryMetaStore
from vdl.groups.offsets import CommittedOffset, OffsetStore
from vdl.log.error_codes import ErrorCode
from vdl.txn.commands import LocalTxnLog
from vdl.txn.coordinator import TxnCoordinator
from vdl.txn.state import MAX_PRODUCER_EPOCH, TxnRecord, TxnState, TxnStore

TID = "tx"
TIMEOUT_MS = 60_000


@dataclass
class RecordingMarkers:
    """Answers every marker NONE, after `failing` rounds of REQUEST_TIMED_OUT."""

    failing: int = 0
    calls: list[tuple[int, int, bool, tuple[tuple[str, int], ...]]] = field(default_factory=list)

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[tuple[str, int]],
        timeout_s: float,
    ) -> dict[tuple[str, int], ErrorCode]:
        self.calls.append((producer_id, producer_epoch, commit, tuple(partitions)))
        await trio.sleep(0.01)
        if self.failing > 0:
            self.failing -= 1
            return {tp: ErrorCode.REQUEST_TIMED_OUT for tp in partitions}
        return {tp: ErrorCode.NONE for tp in partitions}


@dataclass
class Harness:
    meta: MemoryMetaStore
    markers: RecordingMarkers
    coordinator: TxnCoordinator
    store: TxnStore

    def state(self) -> TxnState:
        record = self.store.get(TID)
        assert record is not None
        return record.state

    async def settled(self, state: TxnState) -> None:
        """Wait (on the autojump clock) until the id's record reaches `state`."""
        with trio.fail_after(60):
            while self.state() is not state:
                await trio.sleep(0.05)


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


def _coordinator(meta: MemoryMetaStore, markers: RecordingMarkers) -> TxnCoordinator:
    ids = itertools.count(1000)
    return TxnCoordinator(
        TxnStore(meta),
        LocalTxnLog(meta),
        markers,
        lambda: next(ids),
        _now_ms,
        max_timeout_ms=120_000,
    )


@pytest.fixture
async def harness(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> AsyncIterator[Harness]:
    meta = MemoryMetaStore()
    markers = RecordingMarkers()
    coordinator = _coordinator(meta, markers)
    await nursery.start(coordinator.run)
    yield Harness(meta, markers, coordinator, TxnStore(meta))


async def test_init_gives_a_new_id_then_bumps_its_epoch(harness: Harness) -> None:
    first = await harness.coordinator.init_producer_id(TID, TIMEOUT_MS)
    assert (first.error, first.producer_epoch) == (ErrorCode.NONE, 0)
    again = await harness.coordinator.init_producer_id(TID, TIMEOUT_MS)
    assert (again.error, again.producer_id, again.producer_epoch) == (
        ErrorCode.NONE,
        first.producer_id,
        1,
    )
    # The older producer is fenced.
    fenced = await harness.coordinator.add_partitions(TID, first.producer_id, 0, [("t", 0)])
    assert fenced == ErrorCode.PRODUCER_FENCED
    # KIP-360: only the holder of the current id and epoch may bump it.
    stale = await harness.coordinator.init_producer_id(TID, TIMEOUT_MS, first.producer_id, 0)
    assert stale.error == ErrorCode.PRODUCER_FENCED
    held = await harness.coordinator.init_producer_id(TID, TIMEOUT_MS, first.producer_id, 1)
    assert (held.error, held.producer_epoch) == (ErrorCode.NONE, 2)


@pytest.mark.parametrize("timeout_ms", [0, -5, 120_001])
async def test_a_timeout_out_of_range_is_refused(harness: Harness, timeout_ms: int) -> None:
    result = await harness.coordinator.init_producer_id(TID, timeout_ms)
    assert result.error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert harness.store.get(TID) is None
    # The next, legitimate producer is served.
    assert (await harness.coordinator.init_producer_id(TID, 120_000)).error == ErrorCode.NONE


async def test_commit_writes_markers_and_makes_the_offsets_committed(harness: Harness) -> None:
    c = harness.coordinator
    init = await c.init_producer_id(TID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await c.add_partitions(TID, pid, epoch, [("t", 0), ("t", 1)]) == ErrorCode.NONE
    assert harness.state() is TxnState.ONGOING
    # Offsets need the group added first.
    offsets = {("in", 0): CommittedOffset(42, "m", -1, 1)}
    assert await c.commit_offsets(TID, pid, epoch, "g", offsets) == ErrorCode.INVALID_TXN_STATE
    assert await c.add_offsets(TID, pid, epoch, "g") == ErrorCode.NONE
    assert await c.commit_offsets(TID, pid, epoch, "g", offsets) == ErrorCode.NONE
    committed = OffsetStore(harness.meta)
    # Held in the transaction: not yet the group's.
    assert committed.fetch("g", [("in", 0)]) == {("in", 0): None}
    error, described = c.describe(TID)
    assert error == ErrorCode.NONE and described is not None
    assert described.partitions == (("t", 0), ("t", 1))
    assert described.start_ms >= 0

    assert await c.end_txn(TID, pid, epoch, commit=True) == ErrorCode.NONE
    # The decision carries the offsets.
    assert committed.fetch("g", [("in", 0)])[("in", 0)] == offsets[("in", 0)]
    await harness.settled(TxnState.COMPLETE_COMMIT)
    assert harness.markers.calls == [(pid, epoch, True, (("t", 0), ("t", 1)))]
    # A retried EndTxn is answered NONE; an abort now is in the wrong state.
    assert await c.end_txn(TID, pid, epoch, commit=True) == ErrorCode.NONE
    assert await c.end_txn(TID, pid, epoch, commit=False) == ErrorCode.INVALID_TXN_STATE
    record = harness.store.get(TID)
    assert record is not None and (record.partitions, record.offsets) == ((), {})


async def test_abort_drops_the_offsets(harness: Harness) -> None:
    c = harness.coordinator
    init = await c.init_producer_id(TID, TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await c.add_offsets(TID, pid, epoch, "g") == ErrorCode.NONE
    offsets = {("in", 0): CommittedOffset(7)}
    assert await c.commit_offsets(TID, pid, epoch, "g", offsets) == ErrorCode.NONE
    assert await c.end_txn(TID, pid, epoch, commit=False) == ErrorCode.NONE
    await harness.settled(TxnState.COMPLETE_ABORT)
    assert OffsetStore(harness.meta).fetch("g", [("in", 0)]) == {("in", 0): None}
    # No partitions: no markers to write.
    assert harness.markers.calls == []


async def test_a_new_producer_aborts_the_open_transaction_and_fences(harness: Harness) -> None:
    c = harness.coordinator
    old = await c.init_producer_id(TID, TIMEOUT_MS)
    pid = old.producer_id
    assert await c.add_partitions(TID, pid, 0, [("t", 0)]) == ErrorCode.NONE
    # The new producer waits while the old transaction is aborted...
    first = await c.init_producer_id(TID, TIMEOUT_MS)
    assert first.error == ErrorCode.CONCURRENT_TRANSACTIONS
    await harness.settled(TxnState.COMPLETE_ABORT)
    # ... with markers of a bumped epoch, which fence the old producer on the partition.
    assert harness.markers.calls == [(pid, 1, False, (("t", 0),))]
    retried = await c.init_producer_id(TID, TIMEOUT_MS)
    assert (retried.error, retried.producer_epoch) == (ErrorCode.NONE, 2)
    assert await c.end_txn(TID, pid, 0, commit=True) == ErrorCode.PRODUCER_FENCED
    assert await c.add_partitions(TID, pid + 1, 2, [("t", 0)]) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )


async def test_a_producer_that_bumps_its_own_epoch_may_retry(harness: Harness) -> None:
    # KIP-360: a producer recovering from an abortable error asks, with its id and epoch,
    # for a bump while its transaction is open; its retry after the abort is still its own.
    c = harness.coordinator
    init = await c.init_producer_id(TID, TIMEOUT_MS)
    pid = init.producer_id
    assert await c.add_partitions(TID, pid, 0, [("t", 0)]) == ErrorCode.NONE
    first = await c.init_producer_id(TID, TIMEOUT_MS, pid, 0)
    assert first.error == ErrorCode.CONCURRENT_TRANSACTIONS
    await harness.settled(TxnState.COMPLETE_ABORT)
    retried = await c.init_producer_id(TID, TIMEOUT_MS, pid, 0)
    assert (retried.error, retried.producer_id, retried.producer_epoch) == (
        ErrorCode.NONE,
        pid,
        2,
    )
    # Once answered, the old epoch is a zombie's again.
    stale = await c.init_producer_id(TID, TIMEOUT_MS, pid, 0)
    assert stale.error == ErrorCode.PRODUCER_FENCED


async def test_an_expired_transaction_is_aborted_with_an_epoch_bump(harness: Harness) -> None:
    c = harness.coordinator
    init = await c.init_producer_id(TID, 1_000)
    pid = init.producer_id
    assert await c.add_partitions(TID, pid, 0, [("t", 3)]) == ErrorCode.NONE
    await trio.sleep(0.5)
    assert harness.state() is TxnState.ONGOING
    await harness.settled(TxnState.COMPLETE_ABORT)
    assert harness.markers.calls == [(pid, 1, False, (("t", 3),))]
    assert await c.end_txn(TID, pid, 0, commit=True) == ErrorCode.PRODUCER_FENCED
    # A producer that starts again gets the id back, past the coordinator's bump.
    again = await c.init_producer_id(TID, 1_000)
    assert (again.error, again.producer_epoch) == (ErrorCode.NONE, 2)


async def test_markers_are_retried_and_the_id_waits(harness: Harness) -> None:
    c = harness.coordinator
    harness.markers.failing = 3
    init = await c.init_producer_id(TID, TIMEOUT_MS)
    pid = init.producer_id
    assert await c.add_partitions(TID, pid, 0, [("t", 0)]) == ErrorCode.NONE
    assert await c.end_txn(TID, pid, 0, commit=True) == ErrorCode.NONE
    assert await c.add_partitions(TID, pid, 0, [("t", 1)]) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert await c.end_txn(TID, pid, 0, commit=True) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert await c.end_txn(TID, pid, 0, commit=False) == ErrorCode.INVALID_TXN_STATE
    await harness.settled(TxnState.COMPLETE_COMMIT)
    assert len(harness.markers.calls) == 4
    # The next transaction goes ahead.
    assert await c.add_partitions(TID, pid, 0, [("t", 1)]) == ErrorCode.NONE


async def test_a_new_coordinator_finishes_a_decided_transaction(
    autojump_clock: trio.testing.MockClock,
) -> None:
    meta = MemoryMetaStore()
    decided = TxnRecord(
        TID,
        1000,
        4,
        TIMEOUT_MS,
        TxnState.PREPARE_ABORT,
        partitions=(("t", 0),),
        start_ms=0,
    )
    await LocalTxnLog(meta).store(decided)
    markers = RecordingMarkers()
    coordinator = _coordinator(meta, markers)
    async with trio.open_nursery() as nursery:
        await nursery.start(coordinator.run)
        harness = Harness(meta, markers, coordinator, TxnStore(meta))
        await harness.settled(TxnState.COMPLETE_ABORT)
        nursery.cancel_scope.cancel()
    assert markers.calls == [(1000, 4, False, (("t", 0),))]


async def test_an_exhausted_epoch_moves_to_a_new_producer_id(harness: Harness) -> None:
    await LocalTxnLog(harness.meta).store(TxnRecord(TID, 7, MAX_PRODUCER_EPOCH - 1, TIMEOUT_MS))
    result = await harness.coordinator.init_producer_id(TID, TIMEOUT_MS)
    assert result.error == ErrorCode.NONE
    assert (result.producer_id != 7, result.producer_epoch) == (True, 0)


async def test_list_and_describe(harness: Harness) -> None:
    c = harness.coordinator
    assert c.describe("nobody") == (ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None)
    await c.init_producer_id("a", TIMEOUT_MS)
    await c.init_producer_id("b", TIMEOUT_MS)
    error, records = c.list()
    assert error == ErrorCode.NONE
    assert sorted((r.transactional_id, r.state) for r in records) == [
        ("a", TxnState.EMPTY),
        ("b", TxnState.EMPTY),
    ]
