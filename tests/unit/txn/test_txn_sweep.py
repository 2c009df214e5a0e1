"""The coordinator's sweep of Ongoing transactions (vdl.txn.coordinator): it reads only the
records past their deadline, from an index kept as records are written and rebuilt when
the coordinator takes over; timed-out transactions are still aborted.

The store, the one-node log and the coordinator are the product's; the markers go to the
recording writer of test_coordinator.py; Trio's autojump clock drives the sweeps.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import trio
import trio.testing

from tests.unit.txn.test_coordinator import RecordingMarkers
from vdl.cluster.memory_meta import MemoryMetaStore
from vdl.log.error_codes import ErrorCode
from vdl.txn.commands import LocalTxnLog
from vdl.txn.coordinator import SWEEP_S, TxnCoordinator
from vdl.txn.state import TxnRecord, TxnState, TxnStore

TIMEOUT_MS = 5_000


class CountingStore(TxnStore):
    """The real store, counting how often it is read."""

    def __init__(self, meta: MemoryMetaStore) -> None:
        super().__init__(meta)
        self.scans = 0
        self.gets: list[str] = []

    def get(self, transactional_id: str) -> TxnRecord | None:
        self.gets.append(transactional_id)
        return super().get(transactional_id)

    def records(self) -> Iterator[TxnRecord]:
        self.scans += 1
        return super().records()


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


def _coordinator(
    store: TxnStore,
    meta: MemoryMetaStore,
    *,
    role: list[ErrorCode] | None = None,
    epoch: list[int] | None = None,
) -> TxnCoordinator:
    ids = itertools.count(1000)
    return TxnCoordinator(
        store,
        LocalTxnLog(meta),
        RecordingMarkers(),
        lambda: next(ids),
        _now_ms,
        max_timeout_ms=60_000,
        role=None if role is None else (lambda: role[0]),
        coordinator_epoch=(lambda: 0) if epoch is None else (lambda: epoch[0]),
    )


async def _settle(store: TxnStore, transactional_id: str, state: TxnState) -> TxnRecord:
    with trio.fail_after(60):
        while True:
            record = store.get(transactional_id)
            if record is not None and record.state is state:
                return record
            await trio.sleep(0.05)


async def _ongoing(c: TxnCoordinator, transactional_id: str, timeout_ms: int) -> int:
    init = await c.init_producer_id(transactional_id, timeout_ms)
    assert init.error == ErrorCode.NONE
    added = await c.add_partitions(
        transactional_id, init.producer_id, init.producer_epoch, [("t", 0)]
    )
    assert added == ErrorCode.NONE
    return init.producer_id


async def test_the_index_follows_the_records_written(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    meta = MemoryMetaStore()
    store = TxnStore(meta)
    c = _coordinator(store, meta)
    await nursery.start(c.run)
    pid = await _ongoing(c, "a", TIMEOUT_MS)
    record = store.get("a")
    assert record is not None
    assert c.ongoing_deadlines() == {"a": record.start_ms + TIMEOUT_MS}
    # Adding more partitions keeps the transaction's start, so its deadline.
    assert await c.add_partitions("a", pid, 0, [("t", 1)]) == ErrorCode.NONE
    assert c.ongoing_deadlines() == {"a": record.start_ms + TIMEOUT_MS}
    assert await c.end_txn("a", pid, 0, commit=True) == ErrorCode.NONE
    assert c.ongoing_deadlines() == {}
    await _settle(store, "a", TxnState.COMPLETE_COMMIT)
    assert c.ongoing_deadlines() == {}


async def test_a_sweep_reads_only_the_expired_records(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    meta = MemoryMetaStore()
    store = CountingStore(meta)
    log = LocalTxnLog(meta)
    # Many finished transactions, which the old sweep decoded every time.
    for n in range(500):
        done = TxnRecord(f"done-{n}", n, 0, TIMEOUT_MS, TxnState.COMPLETE_COMMIT)
        assert await log.store(done) == ErrorCode.NONE
    c = _coordinator(store, meta)
    await nursery.start(c.run)
    short = await _ongoing(c, "short", TIMEOUT_MS)
    await _ongoing(c, "long", 60_000)
    scans = store.scans
    store.gets.clear()
    # Many sweeps, across the short transaction's deadline.
    await trio.sleep(TIMEOUT_MS / 1000 + 20 * SWEEP_S)
    aborted = await _settle(store, "short", TxnState.COMPLETE_ABORT)
    # Aborted with the epoch bumped (the producer is fenced).
    assert (aborted.producer_id, aborted.producer_epoch) == (short, 1)
    assert store.scans == scans, "a sweep scanned the store"
    assert set(store.gets) == {"short"}, "a sweep read records not yet due"
    long = store.get("long")
    assert long is not None and long.state is TxnState.ONGOING
    assert set(c.ongoing_deadlines()) == {"long"}


async def test_the_index_is_rebuilt_when_the_coordinator_takes_over(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    meta = MemoryMetaStore()
    store = TxnStore(meta)
    role, epoch = [ErrorCode.NOT_COORDINATOR], [1]
    c = _coordinator(store, meta, role=role, epoch=epoch)
    await nursery.start(c.run)
    # Another coordinator's Ongoing transaction, applied here while this node follows.
    now = _now_ms()
    theirs = TxnRecord("theirs", 7, 3, TIMEOUT_MS, TxnState.ONGOING, (("t", 0),), start_ms=now)
    assert await LocalTxnLog(meta).store(theirs) == ErrorCode.NONE
    await trio.sleep(TIMEOUT_MS / 1000 + 4 * SWEEP_S)
    # Not coordinating: nothing indexed, nothing aborted.
    assert c.ongoing_deadlines() == {}
    assert store.get("theirs") == theirs
    # Taking over loads the index from the store, and the sweep aborts the expired one.
    role[0], epoch[0] = ErrorCode.NONE, 2
    aborted = await _settle(store, "theirs", TxnState.COMPLETE_ABORT)
    assert (aborted.producer_id, aborted.producer_epoch) == (7, 4)
    assert c.ongoing_deadlines() == {}
    # And the coordinator goes on serving: a new producer of the id gets its epoch.
    init = await c.init_producer_id("theirs", TIMEOUT_MS)
    assert (init.error, init.producer_id, init.producer_epoch) == (ErrorCode.NONE, 7, 5)
