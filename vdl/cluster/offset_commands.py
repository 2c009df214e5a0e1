"""Committed offsets replicated through the metadata group (group 0).

The group coordinator (the node leading group 0) proposes every offset commit as one
command; every node applies it into its own `OffsetStore`, so whichever node leads group 0
after a failover already holds every acknowledged commit. The store is the same one YDB
consumers use (keyed by consumer name, topic, partition), so both protocols see them.

    {"op": "commit_offsets", "group": "g",
     "offsets": [[topic, partition, offset, metadata, leader_epoch, commit_time_ms], ...]}

Applying is a plain overwrite, so replaying group 0's log at start (as the metadata group
does) ends with the same offsets as before the restart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import trio

from vdl.cluster.commands import Command
from vdl.cluster.metadata import MetadataState, Outcome
from vdl.cluster.metadata_group import MetadataGroup
from vdl.consensus.errors import ConsensusError, NotLeader
from vdl.groups.offsets import CommittedOffset, OffsetStore, TopicPartition
from vdl.log.error_codes import ErrorCode

COMMIT_OFFSETS = "commit_offsets"


def offsets_command(group: str, offsets: Mapping[TopicPartition, CommittedOffset]) -> Command:
    return {
        "op": COMMIT_OFFSETS,
        "group": group,
        "offsets": [
            [topic, partition, c.offset, c.metadata, c.leader_epoch, c.commit_time_ms]
            for (topic, partition), c in offsets.items()
        ],
    }


def decode_offsets(command: Command) -> tuple[str, dict[TopicPartition, CommittedOffset]]:
    """(group, offsets) of a commit_offsets command; ValueError/TypeError if malformed."""
    group = command["group"]
    if not isinstance(group, str):
        raise TypeError("group must be a string")
    offsets: dict[TopicPartition, CommittedOffset] = {}
    for topic, partition, offset, metadata, epoch, at in command["offsets"]:
        offsets[(str(topic), int(partition))] = CommittedOffset(
            int(offset), str(metadata), int(epoch), int(at)
        )
    return group, offsets


OffsetsAck = Callable[[], Awaitable[ErrorCode]]


class ReplicatedOffsets:
    """Proposes commits on the coordinator and applies them on every node."""

    def __init__(
        self, metadata: MetadataGroup, store: OffsetStore, timeout_s: float = 10.0
    ) -> None:
        self._metadata = metadata
        self._store = store
        self._timeout_s = timeout_s
        # The last commit of each group still on its way: the next one waits for it, so
        # pipelined commits of one group apply in the order they were received.
        self._tails: dict[str, trio.Event] = {}

    def register(self, state: MetadataState) -> None:
        """Before group 0 starts applying its log: its commands must find their handler."""
        state.handlers[COMMIT_OFFSETS] = self._apply

    def _apply(self, command: Command) -> Outcome:
        group, offsets = decode_offsets(command)
        self._store.commit(group, offsets)
        return Outcome()

    def submit(self, group: str, offsets: Mapping[TopicPartition, CommittedOffset]) -> OffsetsAck:
        """Queue a commit now (this fixes its order); the returned coroutine function
        proposes it and says how it ended: NONE once applied, else a retriable error."""
        previous = self._tails.get(group)
        done = trio.Event()
        self._tails[group] = done
        command = offsets_command(group, offsets)

        async def run() -> ErrorCode:
            try:
                if previous is not None:
                    # Bounded: a predecessor whose task never ran must not block the group.
                    with trio.move_on_after(self._timeout_s):
                        await previous.wait()
                try:
                    outcome = await self._metadata.propose(command, self._timeout_s)
                except NotLeader:
                    return ErrorCode.NOT_COORDINATOR
                except ConsensusError:
                    # Replaced by a new leader's entries, dropped, or not committed in time.
                    return ErrorCode.REQUEST_TIMED_OUT
                return outcome.error
            finally:
                done.set()
                if self._tails.get(group) is done:
                    del self._tails[group]

        return run
