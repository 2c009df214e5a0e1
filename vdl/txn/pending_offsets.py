"""Which consumer offsets an open transaction is about to commit, by group (KIP-447).

TxnOffsetCommit holds a transaction's offsets in its `TxnRecord` until the commit decision
makes them the group's (`vdl.txn.commands`: the PrepareCommit command writes them). Until
then a partition with offsets in an Ongoing transaction is *unstable*: OffsetFetch with
`require_stable` (v7+) answers it UNSTABLE_OFFSET_COMMIT, so a read_committed consumer
waits instead of starting from an offset the transaction is about to move.

The index is kept per MetaStore as transaction records are stored in it (`note_stored`,
called wherever a record is written or applied) and built from the stored records the
first time a store is asked about, so OffsetFetch looks up its group instead of scanning
every transaction.
"""

from __future__ import annotations

import weakref
from collections.abc import Set

from vdl.backends.api import MetaStore
from vdl.groups.offsets import TopicPartition
from vdl.txn.state import TxnRecord, TxnState, TxnStore

_Pending = frozenset[tuple[str, TopicPartition]]


class PendingOffsets:
    """The (group, partition) pairs with offsets in an Ongoing transaction."""

    def __init__(self) -> None:
        # transactional id -> its pending (group, partition) pairs
        self._by_id: dict[str, _Pending] = {}
        # group -> partition -> the transactional ids holding offsets for it
        self._by_group: dict[str, dict[TopicPartition, set[str]]] = {}

    def apply(self, record: TxnRecord) -> None:
        """Take the newest record of its transactional id."""
        tid = record.transactional_id
        now: _Pending = frozenset()
        if record.state is TxnState.ONGOING:
            now = frozenset(
                (group, tp) for group, offsets in record.offsets.items() for tp in offsets
            )
        before = self._by_id.pop(tid, frozenset())
        for group, tp in before - now:
            partitions = self._by_group[group]
            holders = partitions[tp]
            holders.discard(tid)
            if not holders:
                del partitions[tp]
                if not partitions:
                    del self._by_group[group]
        for group, tp in now - before:
            self._by_group.setdefault(group, {}).setdefault(tp, set()).add(tid)
        if now:
            self._by_id[tid] = now

    def pending(self, group: str) -> Set[TopicPartition]:
        """The group's partitions whose offsets an Ongoing transaction holds."""
        return self._by_group.get(group, {}).keys()


_INDEXES: weakref.WeakKeyDictionary[MetaStore, PendingOffsets] = weakref.WeakKeyDictionary()


def pending_offsets(meta: MetaStore) -> PendingOffsets:
    """The index of the transaction records in `meta` (built from them on first use)."""
    index = _INDEXES.get(meta)
    if index is None:
        index = PendingOffsets()
        for record in TxnStore(meta).records():
            index.apply(record)
        _INDEXES[meta] = index
    return index


def note_stored(meta: MetaStore, record: TxnRecord) -> None:
    """`record` was just written to `meta`: keep its index (if one was built) up to date."""
    index = _INDEXES.get(meta)
    if index is not None:
        index.apply(record)
