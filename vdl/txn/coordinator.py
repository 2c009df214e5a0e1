"""The Kafka transaction coordinator (KIP-98, KIP-447): one per cluster, group 0's leader.

Why group 0, and not a partitioned coordinator state as Kafka's `__transaction_state`:
the group coordinator already lives there and committed offsets are applied through group
0 (`vdl.cluster.offset_commands`). With the transactions' records in the same replicated
place, a transaction's commit decision and the consumer offsets it commits are *one*
command (`vdl.txn.commands`): no coordinator, old or new, ever sees the one without the
other, and TxnOffsetCommit lands on the very node that holds the group. One Raft group
also makes the state survive a coordinator killed -9: the next leader of group 0 has every
record applied before it serves (`coordinator_role.py`: NOT_COORDINATOR elsewhere,
COORDINATOR_LOAD_IN_PROGRESS until then), finishes every PrepareCommit/PrepareAbort by
writing its markers again (a repeated marker changes nothing), and goes on timing out
Ongoing transactions.

The records in the store are the truth: each request reads its id's record, decides, and
writes the next one through `TxnLog` under a per-id lock; a write that fails may still
land, which the next reader sees. EndTxn answers once the decision (Prepare*) is stored;
a task then writes the markers to every partition of the transaction through each
partition's Raft group (`MarkerSink`), retrying until each answers NONE (or
UNKNOWN_TOPIC_OR_PARTITION: deleted; INVALID_PRODUCER_EPOCH: past it), and stores
Complete*. Meanwhile requests for the id get CONCURRENT_TRANSACTIONS, which clients retry.

Fencing: InitProducerId bumps the epoch (a new producer id once it would overflow), so an
older producer with the id is refused everywhere (PRODUCER_FENCED here; the handlers say
INVALID_PRODUCER_EPOCH to clients too old for it, as Kafka does). An Ongoing transaction
of the id is aborted first, with a bumped epoch in its markers, which fences the older
producer's Produce on the partitions. A transaction Ongoing longer than its timeout is
aborted the same way (Kafka's transaction.abort.timed.out.transaction.cleanup). The sweep
reads no stored record but those past their deadline: the coordinator keeps the deadlines
of Ongoing transactions in a heap, noted as it writes records and rebuilt when it takes
over; each one due is checked against the store, which stays the truth.

A partition leader asks `verify_partition` before the first transactional batch of a
transaction on a partition (KIP-890 part 1): the id's record, as this node has applied
it, must be Ongoing with that producer id and epoch and the partition added.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Protocol

import trio

from vdl.groups.offsets import CommittedOffset, TopicPartition
from vdl.log.error_codes import ErrorCode
from vdl.txn.commands import TxnLog
from vdl.txn.state import MAX_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnRecord, TxnState, TxnStore

log = logging.getLogger(__name__)

# Kafka's transaction.max.timeout.ms default (the node's --transaction-max-timeout-ms).
TRANSACTION_MAX_TIMEOUT_MS = 900_000
# How often Ongoing transactions are checked against their timeout, and leadership against
# what was loaded (Kafka's cleanup interval is 10 s; the records are few and in memory).
SWEEP_S = 0.5
# One marker round's bound, and the pause before a partition that failed is tried again.
MARKER_TIMEOUT_S = 10.0
MARKER_RETRY_S = 0.2
# A partition's answer that ends its marker: written, its topic deleted, or the partition
# past the transaction (a newer epoch of the producer).
_MARKED = (
    ErrorCode.NONE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.INVALID_PRODUCER_EPOCH,
)
# How long a partition leader waits for its copy of a transaction's record to show the
# partition added before refusing the producer's first batch there (KIP-890).
VERIFY_WAIT_S = 2.0
# A marker's coordinator epoch is an int32.
COORDINATOR_EPOCH_WRAP = 1 << 31
# A retried marker round is logged once per this many rounds.
_LOG_EVERY = 25


class MarkerSink(Protocol):
    """Writes a transaction's commit or abort marker to partitions (`vdl.txn.markers`)."""

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[tuple[str, int]],
        timeout_s: float,
    ) -> dict[tuple[str, int], ErrorCode]: ...


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1


def _bumped(record: TxnRecord, allocate: Callable[[], int]) -> tuple[int, int]:
    """The (producer id, epoch) after an epoch bump: a fresh id before the epoch runs out."""
    if record.producer_epoch >= MAX_PRODUCER_EPOCH - 1:
        return allocate(), 0
    return record.producer_id, record.producer_epoch + 1


class TxnCoordinator:
    def __init__(
        self,
        store: TxnStore,
        txn_log: TxnLog,
        markers: MarkerSink,
        allocate_producer_id: Callable[[], int],
        wall_clock_ms: Callable[[], int],
        *,
        max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS,
        role: Callable[[], ErrorCode] | None = None,
        coordinator_epoch: Callable[[], int] = lambda: 0,
    ) -> None:
        self._store = store
        self._log = txn_log
        self._markers = markers
        self._allocate = allocate_producer_id
        self._now_ms = wall_clock_ms
        self.max_timeout_ms = max_timeout_ms
        # NONE while this node coordinates (None: always, on one node).
        self._role = role
        self._epoch = coordinator_epoch
        self._locks: dict[str, trio.Lock] = {}
        # The ids whose markers a task is writing, with the coordinator epoch it writes in.
        self._finishing: dict[str, int] = {}
        self._loaded_epoch: int | None = None
        self._nursery: trio.Nursery | None = None
        # The deadline (wall-clock ms) of each id's Ongoing transaction as last written,
        # and a heap of (deadline, id); an entry whose deadline is no longer the id's is
        # stale and skipped.
        self._deadlines: dict[str, int] = {}
        self._due: list[tuple[int, str]] = []

    def now_ms(self) -> int:
        """The wall clock transactions are stamped with."""
        return self._now_ms()

    # -- serving ---------------------------------------------------------------------------

    def serving_error(self) -> ErrorCode:
        """NONE if this node coordinates transactions now and its tasks run."""
        if self._nursery is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = ErrorCode.NONE if self._role is None else self._role()
        if error == ErrorCode.NONE and self._loaded_epoch != self._epoch():
            # Taken over (or started): finish what the previous coordinator decided.
            self._load()
        return error

    @asynccontextmanager
    async def _lock(self, transactional_id: str) -> AsyncIterator[None]:
        """Hold the id's lock: one request (or task) at a time reads and writes its record.
        A lock nobody holds or waits for is dropped, so ids do not pile up here."""
        lock = self._locks.setdefault(transactional_id, trio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                if self._locks.get(transactional_id) is lock:
                    del self._locks[transactional_id]

    def _load(self) -> None:
        self._loaded_epoch = self._epoch()
        self._deadlines.clear()
        self._due.clear()
        for record in self._store.records():
            if record.state.preparing:
                self._finish_soon(record.transactional_id)
            self._index(record)

    # -- the deadlines of Ongoing transactions -----------------------------------------------

    def _index(self, record: TxnRecord) -> None:
        """Note `record` as the id's newest: its deadline if Ongoing, else none."""
        transactional_id = record.transactional_id
        if record.state is not TxnState.ONGOING:
            self._deadlines.pop(transactional_id, None)
            return
        deadline = record.start_ms + record.timeout_ms
        if self._deadlines.get(transactional_id) != deadline:
            self._deadlines[transactional_id] = deadline
            heapq.heappush(self._due, (deadline, transactional_id))

    def ongoing_deadlines(self) -> dict[str, int]:
        """Each indexed id's deadline (for tests and diagnostics)."""
        return dict(self._deadlines)

    async def _store_record(self, record: TxnRecord) -> ErrorCode:
        """Write `record` and note its deadline. A write that failed may still land: an
        Ongoing record is then indexed all the same (the sweep checks the store), and the
        deadline of the one it would replace is kept."""
        error = await self._log.store(record)
        if error == ErrorCode.NONE or record.state is TxnState.ONGOING:
            self._index(record)
        return error

    def _pop_expired(self, now_ms: int) -> list[str]:
        """The ids whose indexed deadline is past, taken out of the index."""
        due = self._due
        expired: list[str] = []
        while due and due[0][0] < now_ms:
            deadline, transactional_id = heapq.heappop(due)
            if self._deadlines.get(transactional_id) == deadline:
                del self._deadlines[transactional_id]
                expired.append(transactional_id)
        return expired

    def _finish_soon(self, transactional_id: str) -> None:
        epoch = self._epoch()
        if self._finishing.get(transactional_id) == epoch or self._nursery is None:
            return
        # A task of an earlier epoch (leadership lost and won back) stops by itself.
        self._finishing[transactional_id] = epoch
        self._nursery.start_soon(self._finish, transactional_id, epoch)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Finish decided transactions and abort expired ones, until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                while True:
                    if self.serving_error() == ErrorCode.NONE:
                        self._expire()
                    else:
                        self._loaded_epoch = None
                    await trio.sleep(SWEEP_S)
            finally:
                self._nursery = None

    def _expire(self) -> None:
        for transactional_id in self._pop_expired(self._now_ms()):
            assert self._nursery is not None
            self._nursery.start_soon(self._abort_expired, transactional_id)

    async def _abort_expired(self, transactional_id: str) -> None:
        async with self._lock(transactional_id):
            record = self._store.get(transactional_id)
            now = self._now_ms()
            if record is None or not record.expired(now):
                if record is not None:
                    self._index(record)  # a newer transaction, or none: its own deadline
                return
            log.info(
                "transactional id %r: transaction of producer %d epoch %d ran past its "
                "timeout of %d ms; aborting it",
                transactional_id,
                record.producer_id,
                record.producer_epoch,
                record.timeout_ms,
            )
            error = await self._prepare(record.prepared(False, now, self._fence_epoch(record)))
            if error != ErrorCode.NONE:
                # Not stored (or not known to be): the next sweeps try again.
                current = self._store.get(transactional_id)
                if current is not None:
                    self._index(current)

    @staticmethod
    def _fence_epoch(record: TxnRecord) -> int:
        # The coordinator's own abort bumps the epoch (the producer is fenced); at the top
        # the epoch stays, as Kafka leaves an exhausted one.
        return min(record.producer_epoch + 1, MAX_PRODUCER_EPOCH)

    async def _prepare(self, decided: TxnRecord) -> ErrorCode:
        """Store a Prepare* record and finish it in the background."""
        error = await self._store_record(decided)
        if error == ErrorCode.NONE:
            self._finish_soon(decided.transactional_id)
        return error

    async def _finish(self, transactional_id: str, epoch: int) -> None:
        """Write the markers of the id's Prepare* transaction, then store Complete*; stop
        if this node stops coordinating (the next coordinator finishes it)."""
        try:
            rounds = 0
            while self._still(epoch):
                record = self._store.get(transactional_id)
                if record is None or not record.state.preparing:
                    return
                pending = await self._write_markers(record)
                if not pending:
                    async with self._lock(transactional_id):
                        current = self._store.get(transactional_id)
                        if current != record:
                            continue
                        if (
                            await self._store_record(record.completed(self._now_ms()))
                            == ErrorCode.NONE
                        ):
                            return
                rounds += 1
                if rounds % _LOG_EVERY == 1:
                    log.info(
                        "transactional id %r: markers not yet written to %s; retrying",
                        transactional_id,
                        ", ".join(f"{t}-{p}" for t, p in pending) or "(the store)",
                    )
                await trio.sleep(MARKER_RETRY_S)
        finally:
            if self._finishing.get(transactional_id) == epoch:
                del self._finishing[transactional_id]

    def _still(self, epoch: int) -> bool:
        error = ErrorCode.NONE if self._role is None else self._role()
        return error == ErrorCode.NONE and self._epoch() == epoch

    async def _write_markers(self, record: TxnRecord) -> list[TopicPartition]:
        """The partitions still without the marker after one round."""
        if not record.partitions:
            return []
        results = await self._markers.write(
            record.producer_id,
            record.producer_epoch,
            record.state is TxnState.PREPARE_COMMIT,
            # The decision's number fences late copies of earlier markers (state.py).
            record.decisions % COORDINATOR_EPOCH_WRAP,
            record.partitions,
            MARKER_TIMEOUT_S,
        )
        for (topic, partition), error in results.items():
            if error == ErrorCode.INVALID_PRODUCER_EPOCH:
                # The partition holds a newer epoch of the producer: it has moved past this
                # transaction, and writing again would never succeed.
                log.warning(
                    "transactional id %r: %s-%d refused the marker of epoch %d as stale",
                    record.transactional_id,
                    topic,
                    partition,
                    record.producer_epoch,
                )
        return [tp for tp in record.partitions if results.get(tp) not in _MARKED]

    # -- requests --------------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
    ) -> InitResult:
        """A producer id and epoch for the id: new the first time, else the epoch bumped
        (which fences every older producer of the id). With `producer_id` (KIP-360) only
        the producer holding that id and epoch gets it."""
        error = self.serving_error()
        if error != ErrorCode.NONE:
            return InitResult(error)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        async with self._lock(transactional_id):
            record = self._store.get(transactional_id)
            now = self._now_ms()
            if record is None:
                fresh = TxnRecord(transactional_id, self._allocate(), 0, timeout_ms, updated_ms=now)
            else:
                asked = producer_id != NO_PRODUCER_ID
                holder = (producer_id, producer_epoch) == (
                    record.producer_id,
                    record.producer_epoch,
                )
                retry = record.last_epoch >= 0 and (producer_id, producer_epoch) == (
                    record.producer_id,
                    record.last_epoch,
                )
                if asked and not (holder or retry):
                    return InitResult(ErrorCode.PRODUCER_FENCED)
                if record.state.preparing:
                    return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
                if record.state is TxnState.ONGOING:
                    # The open transaction goes first, its markers fencing its producer;
                    # the client retries and gets its epoch once the abort is complete.
                    log.info(
                        "transactional id %r: InitProducerId fences producer %d epoch %d; "
                        "aborting its open transaction",
                        transactional_id,
                        record.producer_id,
                        record.producer_epoch,
                    )
                    fence = record.prepared(False, now, self._fence_epoch(record))
                    if asked and holder:
                        fence = replace(fence, last_epoch=record.producer_epoch)
                    error = await self._prepare(fence)
                    if error == ErrorCode.NONE:
                        error = ErrorCode.CONCURRENT_TRANSACTIONS
                    return InitResult(error)
                new_id, new_epoch = _bumped(record, self._allocate)
                fresh = replace(
                    record,
                    producer_id=new_id,
                    producer_epoch=new_epoch,
                    timeout_ms=timeout_ms,
                    state=TxnState.EMPTY,
                    updated_ms=now,
                    last_epoch=-1,
                )
            error = await self._store_record(fresh)
            if error != ErrorCode.NONE:
                return InitResult(error)
            return InitResult(ErrorCode.NONE, fresh.producer_id, fresh.producer_epoch)

    def _check_producer(
        self, record: TxnRecord | None, producer_id: int, producer_epoch: int
    ) -> ErrorCode:
        if record is None or record.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if record.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if record.state.preparing:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.NONE

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> ErrorCode:
        """Add partitions to the id's transaction (beginning it): one error for all."""
        wanted = list(dict.fromkeys(partitions))

        def add(record: TxnRecord) -> TxnRecord | ErrorCode:
            if record.state is TxnState.ONGOING and set(wanted) <= set(record.partitions):
                return ErrorCode.NONE
            return record.with_partitions(wanted, self._now_ms())

        return await self._change(transactional_id, producer_id, producer_epoch, add)

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group: str
    ) -> ErrorCode:
        """Add a consumer group to the id's transaction (AddOffsetsToTxn)."""

        def add(record: TxnRecord) -> TxnRecord | ErrorCode:
            if record.state is TxnState.ONGOING and group in record.groups:
                return ErrorCode.NONE
            return record.with_group(group, self._now_ms())

        return await self._change(transactional_id, producer_id, producer_epoch, add)

    async def commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group: str,
        offsets: Mapping[TopicPartition, CommittedOffset],
    ) -> ErrorCode:
        """Hold offsets in the id's transaction (TxnOffsetCommit): they become the group's
        committed offsets with the commit decision, and are dropped on abort."""

        def hold(record: TxnRecord) -> TxnRecord | ErrorCode:
            if record.state is not TxnState.ONGOING or group not in record.groups:
                # Kafka's coordinator requires AddOffsetsToTxn for the group first.
                return ErrorCode.INVALID_TXN_STATE
            return record.with_offsets(group, offsets, self._now_ms())

        return await self._change(transactional_id, producer_id, producer_epoch, hold)

    async def _change(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        change: Callable[[TxnRecord], TxnRecord | ErrorCode],
    ) -> ErrorCode:
        """Apply `change` to the id's record on behalf of its current producer, under the
        id's lock: the record it returns is stored, an error code is answered as it is."""
        error = self.serving_error()
        if error != ErrorCode.NONE:
            return error
        async with self._lock(transactional_id):
            record = self._store.get(transactional_id)
            error = self._check_producer(record, producer_id, producer_epoch)
            if error != ErrorCode.NONE:
                return error
            assert record is not None
            changed = change(record)
            if isinstance(changed, ErrorCode):
                return changed
            return await self._store_record(changed)

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        """Commit or abort the id's transaction: NONE once the decision is stored."""
        error = self.serving_error()
        if error != ErrorCode.NONE:
            return error
        async with self._lock(transactional_id):
            record = self._store.get(transactional_id)
            if record is None or record.producer_id != producer_id:
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING
            if record.producer_epoch != producer_epoch:
                return ErrorCode.PRODUCER_FENCED
            state = record.state
            if state is TxnState.ONGOING:
                return await self._prepare(record.prepared(commit, self._now_ms()))
            same = (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
            if not commit:
                same = (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)
            if state is same[0]:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            if state is same[1]:
                return ErrorCode.NONE  # a retry of the EndTxn that completed it
            return ErrorCode.INVALID_TXN_STATE

    # -- verifying a partition's first transactional batch (KIP-890) ------------------------

    def check_partition(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode:
        """NONE if this node's copy of the id's record has the producer's transaction
        Ongoing with `tp` added (any node: the records are applied everywhere);
        INVALID_PRODUCER_EPOCH if a newer epoch of the producer holds the id (fenced, as
        the partition itself would answer); else INVALID_TXN_STATE."""
        record = self._store.get(transactional_id)
        if record is None or record.producer_id != producer_id:
            return ErrorCode.INVALID_TXN_STATE
        if record.producer_epoch > producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if (
            record.state is TxnState.ONGOING
            and record.producer_epoch == producer_epoch
            and tp in record.partitions
        ):
            return ErrorCode.NONE
        return ErrorCode.INVALID_TXN_STATE

    async def verify_partition(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        tp: TopicPartition,
        timeout_s: float = VERIFY_WAIT_S,
    ) -> ErrorCode:
        """`check_partition`, waiting up to `timeout_s` while it is INVALID_TXN_STATE for
        this node to apply the AddPartitionsToTxn the client had answered before it
        produced."""

        def settled() -> bool:
            error = self.check_partition(transactional_id, producer_id, producer_epoch, tp)
            return error != ErrorCode.INVALID_TXN_STATE

        await self._log.wait_applied(settled, timeout_s)
        return self.check_partition(transactional_id, producer_id, producer_epoch, tp)

    # -- describing --------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnRecord | None]:
        error = self.serving_error()
        if error != ErrorCode.NONE:
            return error, None
        record = self._store.get(transactional_id)
        if record is None:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, record

    def list(self) -> tuple[ErrorCode, list[TxnRecord]]:
        """Every id this node coordinates (none, and no error, where it does not)."""
        error = self.serving_error()
        if error == ErrorCode.NOT_COORDINATOR:
            return ErrorCode.NONE, []
        if error != ErrorCode.NONE:
            return error, []
        return ErrorCode.NONE, list(self._store.records())
