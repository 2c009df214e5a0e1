"""The transactions of one partition, as its readers need them (KIP-98).

Per partition the stream keeps, from the batches in its log:

- the open transaction of each producer: the offset of its first transactional batch since
  its last marker;
- the transactions whose marker is written but not yet committed (below the high
  watermark): they still hold the last stable offset back, as Kafka's brokers do, so a
  read_committed consumer never reads a transaction's data before its outcome is final;
- the aborted-transaction index: (producer id, first offset, offset of the abort marker),
  which Fetch returns so that read_committed consumers drop those records (the Kafka
  protocol guide, Fetch v4+ `aborted_transactions`).

The last stable offset (LSO) is the first offset of the earliest transaction still
undecided, else the high watermark. All of it is rebuilt from the log on open (like the
producer table) and trimmed with the log start.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vdl.log.batch_header import BatchInfo


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the abort marker


def aborted_batch(info: BatchInfo, aborted: Sequence[AbortedTxn]) -> bool:
    """Whether the data batch `info` belongs to one of the `aborted` transactions: it is
    transactional, and of a producer whose aborted transaction spans its offset (a producer
    has one transaction open at a time, from its first batch to its marker)."""
    if not info.is_transactional or info.is_control:
        return False
    return any(
        a.producer_id == info.producer_id and a.first_offset <= info.base_offset < a.last_offset
        for a in aborted
    )


class PartitionTxns:
    def __init__(self) -> None:
        self._open: dict[int, int] = {}  # producer id -> first offset of its transaction
        # (first offset, marker offset) of transactions decided but whose marker is not
        # committed yet, in log order (so by marker offset).
        self._completing: deque[tuple[int, int]] = deque()
        # In log order, so by marker offset.
        self._aborted: list[AbortedTxn] = []

    def on_data(self, producer_id: int, base_offset: int) -> None:
        """A transactional data batch of `producer_id` at `base_offset`."""
        if producer_id not in self._open:
            self._open[producer_id] = base_offset

    def on_marker(self, producer_id: int, commit: bool, offset: int) -> None:
        """`producer_id`'s commit or abort marker at `offset`; without an open transaction
        it changes nothing (a marker written again, or for a partition never written to)."""
        first = self._open.pop(producer_id, None)
        if first is None:
            return
        self._completing.append((first, offset))
        if not commit:
            self._aborted.append(AbortedTxn(producer_id, first, offset))

    def open_transaction(self, producer_id: int) -> int | None:
        """The first offset of `producer_id`'s open transaction, if it has one."""
        return self._open.get(producer_id)

    def open_producers(self) -> frozenset[int]:
        return frozenset(self._open)

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each open transaction."""
        return dict(self._open)

    def release(self, high_watermark: int) -> None:
        """The high watermark moved: a marker below it is committed, its transaction final."""
        completing = self._completing
        while completing and completing[0][1] < high_watermark:
            completing.popleft()

    def last_stable_offset(self, high_watermark: int) -> int:
        """The first offset of the earliest undecided transaction, else the high watermark."""
        self.release(high_watermark)
        lso = high_watermark
        for first in self._open.values():
            lso = min(lso, first)
        for first, _marker in self._completing:
            lso = min(lso, first)
        return lso

    def aborted(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions that may have records in offsets [start, end): their
        marker lies at or after `start` and their first offset before `end`."""
        at = bisect.bisect_left(self._aborted, start, key=lambda a: a.last_offset)
        return [a for a in self._aborted[at:] if a.first_offset < end]

    def aborted_index(self) -> Iterable[AbortedTxn]:
        return iter(self._aborted)

    def drop_before(self, log_start: int) -> None:
        """Forget aborted transactions wholly below the log start."""
        at = bisect.bisect_left(self._aborted, log_start, key=lambda a: a.last_offset)
        if at:
            del self._aborted[:at]
