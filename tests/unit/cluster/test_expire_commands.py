"""The replicated expiry of offsets and group records (expire_group): applied on every node,
keeping what was committed or stored after the decision, and safe to replay from the start
of group 0's log."""

from __future__ import annotations

from typing import Any

from vdl.cluster.commands import decode_command, encode_command
from vdl.cluster.group_commands import ReplicatedGroups, store_group_command
from vdl.cluster.memory_meta import MemoryMetaStore
from vdl.cluster.metadata import MetadataState
from vdl.cluster.metadata_group import MetadataGroup
from vdl.cluster.offset_commands import (
    ReplicatedOffsets,
    decode_expiry,
    expire_command,
    offsets_command,
)
from vdl.groups.group_record import GroupRecord, GroupRecordStore, MemberRecord
from vdl.groups.offsets import CommittedOffset, OffsetStore
from vdl.groups.retention import Expiry
from vdl.log.error_codes import ErrorCode

TP = ("t", 0)


def node(meta: MemoryMetaStore) -> MetadataState:
    """A node's metadata state with the offset and group handlers, over its store."""
    state = MetadataState()
    ReplicatedOffsets(MetadataGroup(state), meta).register(state)
    ReplicatedGroups(MetadataGroup(state), meta).register(state)
    return state


def replay(meta: MemoryMetaStore, log: list[dict[str, Any]]) -> MetadataState:
    state = node(meta)
    for index, command in enumerate(log, start=1):
        state.applying_index = index
        assert state.apply(command).error == ErrorCode.NONE
    return state


def commit(offset: int, at: int) -> dict[str, Any]:
    return offsets_command("g", {TP: CommittedOffset(offset, commit_time_ms=at)})


def empty_record(generation: int, since: int) -> dict[str, Any]:
    return store_group_command(
        GroupRecord("g", generation, "consumer", None, None, (), empty_since_ms=since)
    )


def stable_record(generation: int) -> dict[str, Any]:
    member = MemberRecord("m", None, "c", "", 6000, 6000, "consumer", (("range", b""),), b"a")
    return store_group_command(GroupRecord("g", generation, "consumer", "range", "m", (member,)))


def expire(at: int, generation: int | None) -> dict[str, Any]:
    return expire_command(Expiry("g", (("t", 0, at),), True, generation))


def offset(meta: MemoryMetaStore) -> CommittedOffset | None:
    return OffsetStore(meta).fetch("g", [TP])[TP]


def test_command_round_trip_through_the_metadata_log_format() -> None:
    expiry = Expiry("g", (("t", 0, 100), ("u", 3, 200)), True, 7)
    assert decode_expiry(decode_command(encode_command(expire_command(expiry), 9))) == expiry
    bare = Expiry("g", (("t", 0, 100),), False, None)
    assert decode_expiry(decode_command(encode_command(expire_command(bare), 9))) == bare


def test_expiry_removes_the_offsets_and_the_record() -> None:
    meta = MemoryMetaStore()
    replay(meta, [commit(5, 100), empty_record(3, 150), expire(100, 3)])
    assert offset(meta) is None
    assert GroupRecordStore(meta).get("g") is None


def test_a_commit_that_reached_the_log_after_the_decision_is_kept() -> None:
    meta = MemoryMetaStore()
    # The sweep saw the commit of time 100; a newer one was applied before its command.
    replay(meta, [commit(5, 100), empty_record(3, 150), commit(9, 500), expire(100, 3)])
    assert offset(meta) == CommittedOffset(9, commit_time_ms=500)
    # Still dropped: the record is the one decided on. The next sweep sees the offset
    # without a group (a standalone committer) and counts from its commit.
    assert GroupRecordStore(meta).get("g") is None


def test_a_newer_record_is_kept() -> None:
    meta = MemoryMetaStore()
    replay(meta, [commit(5, 100), empty_record(3, 150), stable_record(5), expire(100, 3)])
    record = GroupRecordStore(meta).get("g")
    assert record is not None and record.generation == 5


def test_replay_neither_resurrects_nor_wrongly_deletes() -> None:
    meta = MemoryMetaStore()
    log = [
        commit(5, 100),
        empty_record(3, 150),
        expire(100, 3),
        # A later commit, stamped earlier by another coordinator's clock.
        commit(6, 90),
        empty_record(4, 95),
    ]
    replay(meta, log)
    assert offset(meta) == CommittedOffset(6, commit_time_ms=90)
    assert GroupRecordStore(meta).get("g") is not None
    # A restart replays the whole log into the same store.
    replay(meta, log)
    assert offset(meta) == CommittedOffset(6, commit_time_ms=90)
    record = GroupRecordStore(meta).get("g")
    assert record is not None and record.generation == 4
    # A replay that stops after the expiry (the rest not yet applied) has no record back.
    partial = MemoryMetaStore()
    replay(partial, log[:3])
    replay(partial, log[:3])
    assert offset(partial) is None and GroupRecordStore(partial).get("g") is None


def test_the_dropped_record_stays_dropped_after_replay() -> None:
    meta = MemoryMetaStore()
    log = [commit(5, 100), empty_record(3, 150), expire(100, 3)]
    replay(meta, log)
    # Replay puts the record back with store_group, then drops it again with the expiry.
    state = node(meta)
    state.applying_index = 2
    state.apply(log[1])
    assert GroupRecordStore(meta).get("g") is not None
    state.applying_index = 3
    state.apply(log[2])
    assert GroupRecordStore(meta).get("g") is None
    assert offset(meta) is None
