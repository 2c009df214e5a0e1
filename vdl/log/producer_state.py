"""Idempotent-producer sequence checks for one log stream, as Kafka's brokers do them.

Per producer id the stream keeps its epoch and the last five batches' sequence ranges with
the offsets they were written at: a retried batch is recognised and answered with its
original offset instead of being written twice; a gap is refused. The table is rebuilt from
the batch headers in the log on open, so it needs no storage of its own.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from vdl.log.error_codes import ErrorCode

RETAINED_BATCHES = 5  # what librdkafka and kafka-python keep in flight per connection
# Kafka's producer.id.expiration.ms default (the node's --producer-id-expiration-ms): a
# producer silent this long is forgotten, which only means its next batch is accepted
# whatever its sequence (see ProducerStateTable.check).
PRODUCER_ID_EXPIRATION_MS = 24 * 3600 * 1000
_SEQUENCE_WRAP = 1 << 31


@dataclass(frozen=True, slots=True)
class BatchSequence:
    first_seq: int
    last_seq: int
    base_offset: int
    timestamp_ms: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchSequence] = field(default_factory=lambda: deque(maxlen=RETAINED_BATCHES))
    last_seen_ms: int = 0
    # The coordinator epoch of its last transaction marker (KIP-98), -1 before any.
    coordinator_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Accept:
    """Write the batch."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """Already written: acknowledge with the original offset, write nothing."""

    base_offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class Refuse:
    error: ErrorCode
    message: str


Verdict = Accept | Duplicate | Refuse


def _last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    return (base_sequence + last_offset_delta) % _SEQUENCE_WRAP


class ProducerStateTable:
    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def items(self) -> list[tuple[int, ProducerEntry]]:
        return list(self._producers.items())

    def check(
        self, producer_id: int, epoch: int, base_sequence: int, last_offset_delta: int
    ) -> Verdict:
        if producer_id < 0:
            return Accept()
        entry = self._producers.get(producer_id)
        if entry is None:
            # New, expired or truncated state: any sequence is accepted (modern Kafka rule).
            return Accept()
        last_seq = _last_sequence(base_sequence, last_offset_delta)
        if epoch == entry.epoch:
            for batch in entry.batches:
                if batch.first_seq == base_sequence and batch.last_seq == last_seq:
                    return Duplicate(batch.base_offset, batch.timestamp_ms)
        if epoch < entry.epoch:
            return Refuse(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} epoch {epoch} is older than {entry.epoch}",
            )
        if epoch > entry.epoch:
            if base_sequence != 0:
                return Refuse(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id} new epoch {epoch} must start at sequence 0",
                )
            return Accept()
        if not entry.batches:
            return Accept()
        expected = (entry.batches[-1].last_seq + 1) % _SEQUENCE_WRAP
        if base_sequence != expected:
            return Refuse(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {producer_id} sent sequence {base_sequence}, expected {expected}",
            )
        return Accept()

    def record(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        last_offset_delta: int,
        base_offset: int,
        timestamp_ms: int,
        now_ms: int,
    ) -> None:
        if producer_id < 0:
            return
        entry = self._producers.get(producer_id)
        if entry is None or epoch != entry.epoch:
            coordinator_epoch = -1 if entry is None else entry.coordinator_epoch
            entry = ProducerEntry(epoch, coordinator_epoch=coordinator_epoch)
            self._producers[producer_id] = entry
        entry.batches.append(
            BatchSequence(
                base_sequence,
                _last_sequence(base_sequence, last_offset_delta),
                base_offset,
                timestamp_ms,
            )
        )
        entry.last_seen_ms = now_ms

    def record_marker(
        self, producer_id: int, epoch: int, now_ms: int, coordinator_epoch: int = -1
    ) -> None:
        """A transaction marker of `producer_id` at `epoch` (KIP-98): a newer epoch than the
        producer's replaces it, which fences the older producer's batches; the same epoch
        keeps the sequences going (a producer's sequences run on across transactions)."""
        entry = self._producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = ProducerEntry(epoch)
            self._producers[producer_id] = entry
        entry.last_seen_ms = max(entry.last_seen_ms, now_ms)
        entry.coordinator_epoch = coordinator_epoch

    def expire(self, now_ms: int, idle_ms: int, keep: frozenset[int] = frozenset()) -> int:
        """Forget producers idle for longer than idle_ms; return how many were dropped.

        Forgetting is safe for a long-idle producer: with no state, its next batch is
        accepted whatever its sequence (see check), so it never sees OUT_OF_ORDER. The
        producers in `keep` (those with an open transaction) are kept, as Kafka keeps them.
        """
        stale = [
            pid
            for pid, e in self._producers.items()
            if now_ms - e.last_seen_ms > idle_ms and pid not in keep
        ]
        for pid in stale:
            del self._producers[pid]
        return len(stale)
