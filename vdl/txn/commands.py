"""Transaction records replicated through the metadata group (group 0).

The transaction coordinator (the node leading group 0) proposes every change of a
transactional id's `TxnRecord` as one command; every node applies it into its own
MetaStore, so the node that leads group 0 after a failover holds every transaction as it
last stood and finishes it (`vdl.txn.coordinator`).

    {"op": "store_txn", "record": {TxnRecord document}, "commit_offsets": true}

With "commit_offsets" (the record is PrepareCommit), the offsets the transaction holds
become the groups' committed offsets in the same step (`offset_commands.apply_within`,
under its replay rule): the commit decision and the offsets are one command, so no
coordinator ever sees one without the other (KIP-447). Only the newest record of an id
matters and replay passes through older ones first, so storing needs no replay rule.

On one node there is no group 0: `LocalTxnLog` writes the record (and the offsets) in one
synced batch instead.

A node's applied records may trail the coordinator's by the commands group 0 has committed
but this node not yet applied; `wait_applied` lets a reader wait (bounded) for a record it
expects, such as a partition leader verifying a transactional produce (KIP-890).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import trio

from vdl.backends.api import MetaStore
from vdl.cluster.commands import Command
from vdl.cluster.metadata import MetadataState, Outcome
from vdl.cluster.metadata_group import MetadataGroup
from vdl.cluster.offset_commands import ReplicatedOffsets
from vdl.consensus.errors import ConsensusError, NotLeader
from vdl.groups.offsets import encode_value, offset_key
from vdl.log.error_codes import ErrorCode
from vdl.txn.pending_offsets import note_stored
from vdl.txn.state import (
    TxnRecord,
    TxnState,
    encode_record,
    record_from_doc,
    record_key,
    record_to_doc,
)

log = logging.getLogger(__name__)

STORE_TXN = "store_txn"


def store_txn_command(record: TxnRecord) -> Command:
    return {
        "op": STORE_TXN,
        "record": record_to_doc(record),
        "commit_offsets": record.state is TxnState.PREPARE_COMMIT and bool(record.offsets),
    }


class TxnLog(Protocol):
    """Where the coordinator writes a record: NONE once every later reader of the store
    sees it, else a retriable error (the record may still land; the store tells)."""

    async def store(self, record: TxnRecord) -> ErrorCode: ...

    async def wait_applied(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Whether `predicate` (on the store) holds, waiting at most `timeout_s` for this
        node to apply more records."""
        ...


class ReplicatedTxns:
    """Proposes records on the coordinator and applies them on every node."""

    def __init__(
        self,
        metadata: MetadataGroup,
        meta: MetaStore,
        offsets: ReplicatedOffsets,
        timeout_s: float = 10.0,
    ) -> None:
        self._metadata = metadata
        self._meta = meta
        self._offsets = offsets
        self._timeout_s = timeout_s

    def register(self, state: MetadataState) -> None:
        """Before group 0 starts applying its log: its commands must find their handler."""
        state.handlers[STORE_TXN] = self._apply

    def _apply(self, command: Command) -> Outcome:
        record = record_from_doc(command["record"])
        if command.get("commit_offsets"):
            self._offsets.apply_within(record.offsets)
        # Unsynced, as applied offsets are (offset_commands.py): the log replays it.
        self._meta.write_batch(
            {record_key(record.transactional_id): encode_record(record)}, sync=False
        )
        note_stored(self._meta, record)
        return Outcome()

    async def store(self, record: TxnRecord) -> ErrorCode:
        try:
            outcome = await self._metadata.propose(store_txn_command(record), self._timeout_s)
        except NotLeader:
            return ErrorCode.NOT_COORDINATOR
        except ConsensusError as exc:
            log.info(
                "transactional id %r: %s not stored (%s)",
                record.transactional_id,
                record.state.value,
                type(exc).__name__,
            )
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return outcome.error

    async def wait_applied(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        with trio.move_on_after(timeout_s):
            await self._metadata.wait_applied(predicate)
        return predicate()


class LocalTxnLog:
    """One node: the record, with the offsets a commit decision makes committed, in one
    synced batch."""

    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta

    async def store(self, record: TxnRecord) -> ErrorCode:
        puts = {record_key(record.transactional_id): encode_record(record)}
        if record.state is TxnState.PREPARE_COMMIT:
            for group, offsets in record.offsets.items():
                for (topic, partition), committed in offsets.items():
                    puts[offset_key(group, topic, partition)] = encode_value(committed)
        self._meta.write_batch(puts)
        note_stored(self._meta, record)
        return ErrorCode.NONE

    async def wait_applied(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        # Every record is written here, synchronously: nothing is on its way.
        return predicate()
