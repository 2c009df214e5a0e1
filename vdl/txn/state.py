"""The state of one transactional id, as the transaction coordinator keeps it (KIP-98).

One `TxnRecord` per transactional id: the producer id and epoch it holds, its transaction
timeout, where its current transaction stands, the partitions written in it, and the
consumer offsets committed in it (TxnOffsetCommit), held here per group until the commit
decision makes them the group's committed offsets (KIP-447). The record is a plain value
with a JSON document form: it travels as a metadata-group command (`vdl.txn.commands`) and
is kept under one MetaStore key per id, so every node holds the newest one.

The states are Kafka's (the names `kafka-transactions describe` and ListTransactions show):

    Empty/Complete* --AddPartitions/AddOffsets--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers--> CompleteCommit
    Ongoing --EndTxn(abort), timeout, fencing--> PrepareAbort --markers--> CompleteAbort

A transaction in Prepare* has its decision taken (the command is committed) and only its
markers remain to be written; the coordinator finishes it, also after a failover.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from vdl.backends.api import MetaStore
from vdl.groups.offsets import CommittedOffset, TopicPartition

_PREFIX = b"txn/"
# A producer epoch is an int16; Kafka moves to a new producer id before it would overflow.
MAX_PRODUCER_EPOCH = 32767
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class TxnState(enum.StrEnum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def open(self) -> bool:
        """A transaction is under way: Ongoing or waiting for its markers."""
        return self is TxnState.ONGOING or self.preparing


PendingOffsets = Mapping[str, Mapping[TopicPartition, CommittedOffset]]


@dataclass(frozen=True, slots=True)
class TxnRecord:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    # The partitions written in the transaction, in the order they were added.
    partitions: tuple[TopicPartition, ...] = ()
    # The groups added with AddOffsetsToTxn, and the offsets committed for them so far.
    groups: tuple[str, ...] = ()
    offsets: PendingOffsets = field(default_factory=dict)
    # Wall-clock ms: when the current transaction began (-1: none), and the last change.
    start_ms: int = -1
    updated_ms: int = 0
    # The epoch of a producer that asked for its own bump (KIP-360) while its transaction
    # was open: its retry after the abort is still its own, not a zombie's (-1: none).
    last_epoch: int = -1
    # How many decisions (Prepare*) the id has had. Its markers carry it as their
    # coordinator epoch, so a partition tells a late copy of an earlier decision's marker
    # from the current one (`LogStream.append_marker`). An int32 there: 2^31 decisions of
    # one producer id (years at ten a second) before the number wraps.
    decisions: int = 0

    def with_partitions(self, added: list[TopicPartition], now_ms: int) -> TxnRecord:
        """Ongoing, with `added` among its partitions (the clock starts with the first)."""
        have = list(self.partitions)
        have.extend(tp for tp in added if tp not in self.partitions)
        return replace(
            self,
            state=TxnState.ONGOING,
            partitions=tuple(dict.fromkeys(have)),
            start_ms=self.start_ms if self.state is TxnState.ONGOING else now_ms,
            updated_ms=now_ms,
        )

    def with_group(self, group: str, now_ms: int) -> TxnRecord:
        groups = self.groups if group in self.groups else (*self.groups, group)
        return replace(
            self,
            state=TxnState.ONGOING,
            groups=groups,
            start_ms=self.start_ms if self.state is TxnState.ONGOING else now_ms,
            updated_ms=now_ms,
        )

    def with_offsets(
        self, group: str, offsets: Mapping[TopicPartition, CommittedOffset], now_ms: int
    ) -> TxnRecord:
        merged = {g: dict(o) for g, o in self.offsets.items()}
        merged.setdefault(group, {}).update(offsets)
        return replace(self, offsets=merged, updated_ms=now_ms)

    def prepared(self, commit: bool, now_ms: int, epoch: int | None = None) -> TxnRecord:
        """The decision: PrepareCommit or PrepareAbort (with a bumped `epoch` when the
        coordinator aborts on its own, which fences the producer)."""
        return replace(
            self,
            state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            producer_epoch=self.producer_epoch if epoch is None else epoch,
            updated_ms=now_ms,
            decisions=self.decisions + 1,
        )

    def completed(self, now_ms: int) -> TxnRecord:
        """After the markers: CompleteCommit or CompleteAbort, with nothing left open."""
        commit = self.state is TxnState.PREPARE_COMMIT
        return replace(
            self,
            state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
            partitions=(),
            groups=(),
            offsets={},
            start_ms=-1,
            updated_ms=now_ms,
        )

    def expired(self, now_ms: int) -> bool:
        return self.state is TxnState.ONGOING and now_ms - self.start_ms > self.timeout_ms


def record_to_doc(record: TxnRecord) -> dict[str, Any]:
    return {
        "id": record.transactional_id,
        "pid": record.producer_id,
        "epoch": record.producer_epoch,
        "timeout_ms": record.timeout_ms,
        "state": record.state.value,
        "partitions": [[t, p] for t, p in record.partitions],
        "groups": list(record.groups),
        "offsets": {
            group: [
                [t, p, c.offset, c.metadata, c.leader_epoch, c.commit_time_ms]
                for (t, p), c in offsets.items()
            ]
            for group, offsets in record.offsets.items()
        },
        "start_ms": record.start_ms,
        "updated_ms": record.updated_ms,
        "last_epoch": record.last_epoch,
        "decisions": record.decisions,
    }


def record_from_doc(doc: Mapping[str, Any]) -> TxnRecord:
    """The record of a document; ValueError/TypeError/KeyError if malformed."""
    transactional_id = doc["id"]
    if not isinstance(transactional_id, str):
        raise TypeError("a transactional id is a string")
    return TxnRecord(
        transactional_id=transactional_id,
        producer_id=int(doc["pid"]),
        producer_epoch=int(doc["epoch"]),
        timeout_ms=int(doc["timeout_ms"]),
        state=TxnState(doc["state"]),
        partitions=tuple((str(t), int(p)) for t, p in doc["partitions"]),
        groups=tuple(str(g) for g in doc["groups"]),
        offsets={
            str(group): {
                (str(t), int(p)): CommittedOffset(int(o), str(m), int(e), int(at))
                for t, p, o, m, e, at in rows
            }
            for group, rows in doc["offsets"].items()
        },
        start_ms=int(doc["start_ms"]),
        updated_ms=int(doc["updated_ms"]),
        last_epoch=int(doc.get("last_epoch", -1)),
        decisions=int(doc.get("decisions", 0)),
    )


def record_key(transactional_id: str) -> bytes:
    return _PREFIX + transactional_id.encode()


def encode_record(record: TxnRecord) -> bytes:
    return json.dumps(record_to_doc(record), separators=(",", ":")).encode()


class TxnStore:
    """Transaction records in a MetaStore, one key per transactional id."""

    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta

    def get(self, transactional_id: str) -> TxnRecord | None:
        raw = self._meta.get(record_key(transactional_id))
        return None if raw is None else record_from_doc(json.loads(raw))

    def records(self) -> Iterator[TxnRecord]:
        for _, raw in self._meta.scan(_PREFIX):
            yield record_from_doc(json.loads(raw))
