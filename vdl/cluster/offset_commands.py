"""Committed offsets replicated through the metadata group (group 0).

The group coordinator (the node leading group 0) proposes every offset commit as one
command; every node applies it into its own `OffsetStore`, so whichever node leads group 0
after a failover already holds every acknowledged commit. The store is the same one YDB
consumers use (keyed by consumer name, topic, partition), so both protocols see them.

    {"op": "commit_offsets", "group": "g",
     "offsets": [[topic, partition, offset, metadata, leader_epoch, commit_time_ms], ...]}

The replay rule: the offset store remembers the raft index of the last commit command it
applied (in the same atomic batch as the offsets), and a command at or below that index is
skipped. Group 0's log is replayed from the start on every restart, so without the rule
the store would pass through every older commit again, and a reader of the store during
replay (or a store holding a commit whose command is further along) would see a newer
commit moved backwards. Ordering is by log position, not by offset value: a later command
that commits a *lower* offset (a Kafka client seeking back) still applies, as in Kafka.
The index and the offsets share one data directory with group 0's log, so they restart
together.

Offset retention (`vdl.groups.retention`) removes expired offsets, and perhaps the group's
record, with one command per group, proposed by the coordinator's sweep. Kafka's
DeleteGroups (the group with all its offsets) and OffsetDelete (KIP-496: some of its
offsets, the record kept) are the same command, decided at the request instead:

    {"op": "expire_group", "group": "g", "offsets": [[topic, partition, commit_time_ms], ...],
     "drop_record": true, "generation": 4}

An offset is deleted only if its stored commit time is still at most the one the sweep saw:
a commit that reached the log between the decision and this command is kept. The offsets
part follows the replay rule above (and advances the index), so a replay never deletes a
commit made after the command, even one stamped earlier by another node's clock. The record
part does not: `store_group` commands (group_commands.py) are replayed without a rule, so
replay puts back the record this command dropped, and the drop must be replayed too; it
deletes the record only if it is still of the generation the sweep saw or an older one
(DeleteGroups names the coordinator's newest generation, whose record may still be on its
way), which replay reproduces exactly.

Deleting a topic (the metadata group's `delete_topic`) deletes every group's committed
offsets on it in the same step on every node, under the replay rule above (and advancing
the index): a topic created again under the name starts with none, and a replay never
deletes a commit made on the new topic. Kafka likewise removes a deleted topic's offsets
when it is deleted; YDB drops a topic's consumers with it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import trio

from vdl.backends.api import MetaStore
from vdl.broker.topics import Topic
from vdl.cluster.commands import Command
from vdl.cluster.metadata import MetadataState, Outcome, Placement
from vdl.cluster.metadata_group import MetadataGroup
from vdl.consensus.errors import ConsensusError, NotLeader
from vdl.groups.offsets import (
    CommittedOffset,
    OffsetStore,
    TopicPartition,
    encode_value,
    offset_key,
)
from vdl.groups.retention import Expiry, droppable_record, stale_offset_keys
from vdl.log.error_codes import ErrorCode

COMMIT_OFFSETS = "commit_offsets"
EXPIRE_GROUP = "expire_group"
# The raft index (of group 0) of the last commit_offsets command written into the store.
APPLIED_INDEX_KEY = b"cluster/offsets-applied-index"


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


def expire_command(expiry: Expiry) -> Command:
    return {
        "op": EXPIRE_GROUP,
        "group": expiry.group_id,
        "offsets": [[topic, partition, at] for topic, partition, at in expiry.offsets],
        "drop_record": expiry.drop_group,
        "generation": expiry.record_generation,
    }


def decode_expiry(command: Command) -> Expiry:
    """The expiry of an expire_group command; ValueError/TypeError/KeyError if malformed."""
    group = command["group"]
    if not isinstance(group, str):
        raise TypeError("group must be a string")
    generation = command["generation"]
    return Expiry(
        group_id=group,
        offsets=tuple(
            (str(topic), int(partition), int(at)) for topic, partition, at in command["offsets"]
        ),
        drop_group=bool(command["drop_record"]),
        record_generation=None if generation is None else int(generation),
    )


OffsetsAck = Callable[[], Awaitable[ErrorCode]]


class ReplicatedOffsets:
    """Proposes commits on the coordinator and applies them on every node."""

    def __init__(self, metadata: MetadataGroup, meta: MetaStore, timeout_s: float = 10.0) -> None:
        self._metadata = metadata
        self._meta = meta
        self.store = OffsetStore(meta)
        self._timeout_s = timeout_s
        raw = meta.get(APPLIED_INDEX_KEY)
        self._applied_index = int(raw) if raw is not None else 0
        self._state: MetadataState | None = None
        # The last commit of each group still on its way: the next one waits for it, so
        # pipelined commits of one group apply in the order they were received.
        self._tails: dict[str, trio.Event] = {}

    def register(self, state: MetadataState) -> None:
        """Before group 0 starts applying its log: its commands must find their handler."""
        self._state = state
        state.handlers[COMMIT_OFFSETS] = self._apply
        state.handlers[EXPIRE_GROUP] = self._apply_expiry
        state.on_deleted.append(self._topic_deleted)

    def _apply(self, command: Command) -> Outcome:
        assert self._state is not None
        group, offsets = decode_offsets(command)
        index = self._state.applying_index
        if index <= self._applied_index:
            return Outcome()  # replayed: the store already holds this commit or a later one
        puts = {
            offset_key(group, topic, partition): encode_value(committed)
            for (topic, partition), committed in offsets.items()
        }
        puts[APPLIED_INDEX_KEY] = str(index).encode()
        # Unsynced: group 0's log is durable and replayed from its start on restart, and
        # the applied index travels in the same batch, so a batch lost with the machine is
        # simply applied again; an fdatasync per commit on every node would be the cost.
        self._meta.write_batch(puts, sync=False)
        self._applied_index = index
        return Outcome()

    def apply_within(self, offsets: Mapping[str, Mapping[TopicPartition, CommittedOffset]]) -> None:
        """Commit offsets of several groups as part of another group-0 command being
        applied (a transaction's commit decision, `vdl.txn.commands`), under the replay
        rule above."""
        assert self._state is not None
        index = self._state.applying_index
        if index <= self._applied_index:
            return
        puts = {
            offset_key(group, topic, partition): encode_value(committed)
            for group, committed_offsets in offsets.items()
            for (topic, partition), committed in committed_offsets.items()
        }
        puts[APPLIED_INDEX_KEY] = str(index).encode()
        # Unsynced, like a commit: the log replays it.
        self._meta.write_batch(puts, sync=False)
        self._applied_index = index

    def _apply_expiry(self, command: Command) -> Outcome:
        assert self._state is not None
        expiry = decode_expiry(command)
        index = self._state.applying_index
        puts: dict[bytes, bytes] = {}
        deletes: list[bytes] = []
        if index > self._applied_index:
            deletes.extend(stale_offset_keys(expiry, self._meta.get))
            puts[APPLIED_INDEX_KEY] = str(index).encode()
        record = droppable_record(expiry, self._meta.get)
        if record is not None:
            deletes.append(record)
        if puts or deletes:
            # Unsynced, like a commit: the log replays it.
            self._meta.write_batch(puts, deletes, sync=False)
        self._applied_index = max(self._applied_index, index)
        return Outcome()

    def _topic_deleted(self, topic: Topic, placement: Placement) -> None:
        assert self._state is not None
        index = self._state.applying_index
        if index <= self._applied_index:
            return  # replayed: the store already went past this deletion
        deletes = self.store.keys_of_topic(topic.name)
        # Unsynced, like a commit: the log replays it.
        self._meta.write_batch({APPLIED_INDEX_KEY: str(index).encode()}, deletes, sync=False)
        self._applied_index = index

    async def expire(self, expiry: Expiry) -> ErrorCode:
        """Propose an expiry; NONE once applied, else a retriable error (the next sweep
        decides again)."""
        try:
            outcome = await self._metadata.propose(expire_command(expiry), self._timeout_s)
        except NotLeader:
            return ErrorCode.NOT_COORDINATOR
        except ConsensusError:
            return ErrorCode.REQUEST_TIMED_OUT
        return outcome.error

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
