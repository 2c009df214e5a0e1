"""The partition leader's check of a transactional Produce (KIP-890 part 1).

A producer that writes a transactional batch to a partition it never added with
AddPartitionsToTxn would hold that partition's last stable offset back until its
transaction times out, or for ever if the coordinator never learns of the partition (no
marker would ever come). So before the first transactional batch of a producer's
transaction on a partition, the leader verifies it: the transactional id's record (every
node applies group 0's transaction records) must be Ongoing, with the batch's producer id
and epoch, and this partition added. Later batches of the same transaction pass: the
partition's open transaction (`partition_txns.py`) shows it was verified.

The client produces only after AddPartitionsToTxn was answered, so the command is
committed, but this node may not have applied it yet: such a batch waits, bounded, for
the record (`TxnCoordinator.verify_partition`) and is refused with INVALID_TXN_STATE if it
never shows. A producer whose epoch is older than the id's (fenced by a newer instance) is
answered INVALID_PRODUCER_EPOCH, as the partition answers a fenced producer. Batches of
the same producer on the same partition that arrive meanwhile queue behind it, so they are
appended in the order they came (their sequence numbers expect it). The wait is bounded
from the batch's arrival, not from its turn, and a batch queued behind one that was not
appended is refused too: a batch can never wait into the producer's next transaction
(whose id, epoch and partitions may be the same) and be verified by it.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

import trio

from vdl.log.batch_header import BatchInfo
from vdl.log.error_codes import ErrorCode
from vdl.log.stream import LogStream
from vdl.txn.coordinator import VERIFY_WAIT_S, TxnCoordinator

log = logging.getLogger(__name__)

# Per (stream, producer id): the batches waiting for their turn, first the one verifying.
_queues: dict[tuple[LogStream, int], deque[PendingBatch]] = {}


@dataclass(eq=False, slots=True)
class PendingBatch:
    """A transactional batch to append once verified, after those queued before it."""

    coordinator: TxnCoordinator
    stream: LogStream
    topic: str
    partition: int
    transactional_id: str
    info: BatchInfo
    # trio.current_time() after which the batch no longer waits (set on arrival).
    deadline: float = 0.0
    _turn: trio.Event = field(default_factory=trio.Event)
    # Set when a batch queued before this one was not appended.
    _after_refusal: bool = False

    @property
    def _key(self) -> tuple[LogStream, int]:
        return self.stream, self.info.producer_id

    async def verified(self) -> ErrorCode:
        """Wait for this batch's turn, then NONE if it may be appended, else the error to
        answer. Call `done` after (appended or not), in a finally."""
        await self._turn.wait()
        if self.stream.txns.open_transaction(self.info.producer_id) is not None:
            return ErrorCode.NONE  # a batch queued before it opened (verified) the transaction
        if self._after_refusal:
            error = ErrorCode.INVALID_TXN_STATE
        else:
            error = await self.coordinator.verify_partition(
                self.transactional_id,
                self.info.producer_id,
                self.info.producer_epoch,
                (self.topic, self.partition),
                max(self.deadline - trio.current_time(), 0.0),
            )
        if error != ErrorCode.NONE:
            refused(self.topic, self.partition, self.transactional_id, self.info, error)
        return error

    def done(self) -> None:
        """Leave the queue; the next batch's turn comes."""
        queue = _queues.get(self._key)
        if queue is None or self not in queue:
            return
        was_head = queue[0] is self
        queue.remove(self)
        if queue:
            if was_head and self.stream.txns.open_transaction(self.info.producer_id) is None:
                queue[0]._after_refusal = True
            queue[0]._turn.set()
        else:
            del _queues[self._key]


def check_batch(
    coordinator: TxnCoordinator | None,
    stream: LogStream,
    topic: str,
    partition: int,
    transactional_id: str,
    info: BatchInfo,
) -> PendingBatch | None:
    """None if the transactional batch `info` may be appended now; else the batch queued,
    to be appended once `PendingBatch.verified` says so. Without a coordinator in this
    process there is nothing to verify against, and the batch goes as before."""
    if coordinator is None:
        return None
    key = (stream, info.producer_id)
    queue = _queues.get(key)
    if queue is None and (
        stream.txns.open_transaction(info.producer_id) is not None
        or coordinator.check_partition(
            transactional_id, info.producer_id, info.producer_epoch, (topic, partition)
        )
        == ErrorCode.NONE
    ):
        return None
    pending = PendingBatch(
        coordinator,
        stream,
        topic,
        partition,
        transactional_id,
        info,
        deadline=trio.current_time() + VERIFY_WAIT_S,
    )
    if queue is None:
        queue = _queues[key] = deque()
        pending._turn.set()
    queue.append(pending)
    return pending


def refused(
    topic: str, partition: int, transactional_id: str, info: BatchInfo, error: ErrorCode
) -> None:
    why = (
        "is fenced by a newer epoch"
        if error == ErrorCode.INVALID_PRODUCER_EPOCH
        else "has no transaction with this partition added"
    )
    log.warning(
        "Produce to %s-%d refused: producer %d epoch %d of transactional id %r %s (%s)",
        topic,
        partition,
        info.producer_id,
        info.producer_epoch,
        transactional_id,
        why,
        error.name,
    )
