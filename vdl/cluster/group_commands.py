"""Consumer-group records replicated through the metadata group (group 0).

The coordinator (the node leading group 0) proposes each `GroupRecord` its groups produce
(`vdl.groups.group_record`); every node applies it into its own MetaStore, so the node
that leads group 0 after a failover loads every group as it last settled and the members
carry on there with their ids, generation and assignment.

    {"op": "store_group", "record": {GroupRecord document}}

Only the newest record of a group matters, so records waiting to be proposed are
coalesced per group: a burst of rebalances costs one proposal per group at a time, and the
queue is bounded by the number of groups. A record that cannot be proposed (this node no
longer leads, or the proposal was lost) is dropped: the next coordinator loads the one
before it, and members of a newer generation are told ILLEGAL_GENERATION and rejoin.
Replaying group 0's log on restart passes through older records of a group before its
newest, and the coordinator loads only once its log is applied, so replay needs no rule.
"""

from __future__ import annotations

import logging

import trio

from vdl.backends.api import MetaStore
from vdl.cluster.commands import Command
from vdl.cluster.metadata import MetadataState, Outcome
from vdl.cluster.metadata_group import MetadataGroup
from vdl.consensus.errors import ConsensusError
from vdl.groups.group_record import GroupRecord, GroupRecordStore, record_from_doc, record_to_doc

log = logging.getLogger(__name__)

STORE_GROUP = "store_group"


def store_group_command(record: GroupRecord) -> Command:
    return {"op": STORE_GROUP, "record": record_to_doc(record)}


class ReplicatedGroups:
    """Proposes group records on the coordinator and applies them on every node."""

    def __init__(self, metadata: MetadataGroup, meta: MetaStore, timeout_s: float = 10.0) -> None:
        self._metadata = metadata
        self.store = GroupRecordStore(meta)
        self._timeout_s = timeout_s
        self._waiting: dict[str, GroupRecord] = {}
        self._wake = trio.Event()

    def register(self, state: MetadataState) -> None:
        """Before group 0 starts applying its log: its commands must find their handler."""
        state.handlers[STORE_GROUP] = self._apply

    def _apply(self, command: Command) -> Outcome:
        # Unsynced, as applied offsets are (offset_commands.py): the log replays it.
        self.store.put(record_from_doc(command["record"]), sync=False)
        return Outcome()

    def submit(self, record: GroupRecord) -> None:
        """Queue a record for proposing (replacing any older one of its group)."""
        self._waiting[record.group_id] = record
        self._wake.set()

    async def run(self) -> None:
        """Propose queued records, one at a time, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._waiting:
                group_id = next(iter(self._waiting))
                record = self._waiting.pop(group_id)
                try:
                    await self._metadata.propose(store_group_command(record), self._timeout_s)
                except ConsensusError as exc:
                    log.info(
                        "group %r: record of generation %d not stored (%s); members of a "
                        "later coordinator rejoin",
                        group_id,
                        record.generation,
                        type(exc).__name__,
                    )
