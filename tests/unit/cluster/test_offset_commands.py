"""Offset commits as metadata-group commands: encoded, applied into the offset store by
the metadata state's handler, and replayable (applying twice gives the same store)."""

from __future__ import annotations

from vdl.cluster.commands import decode_command, encode_command
from vdl.cluster.memory_meta import MemoryMetaStore
from vdl.cluster.metadata import MetadataState
from vdl.cluster.metadata_group import MetadataGroup
from vdl.cluster.offset_commands import ReplicatedOffsets, decode_offsets, offsets_command
from vdl.groups.offsets import CommittedOffset, OffsetStore
from vdl.log.error_codes import ErrorCode


def test_command_round_trip_through_the_metadata_log_format() -> None:
    offsets = {("t", 0): CommittedOffset(42, "meta", 3, 1_000), ("t", 1): CommittedOffset(7)}
    command = decode_command(encode_command(offsets_command("g", offsets), 5))
    assert decode_offsets(command) == ("g", offsets)


def _apply_at(state: MetadataState, index: int, command: dict[str, object]) -> None:
    # What MetadataGroup.apply does for the entry at `index`.
    state.applying_index = index
    assert state.apply(command).error == ErrorCode.NONE


def test_applied_commands_land_in_the_store_and_replay_is_harmless() -> None:
    meta = MemoryMetaStore()
    state = MetadataState()
    ReplicatedOffsets(MetadataGroup(state), meta).register(state)
    first = offsets_command("g", {("t", 0): CommittedOffset(10)})
    second = offsets_command("g", {("t", 0): CommittedOffset(20)})
    _apply_at(state, 1, first)
    _apply_at(state, 2, second)
    # A restart replays the log from the start into the same (persistent) store.
    state = MetadataState()
    ReplicatedOffsets(MetadataGroup(state), meta).register(state)
    _apply_at(state, 1, first)
    # Mid-replay the newer commit is still there: the older command was skipped.
    assert OffsetStore(meta).fetch("g", [("t", 0)]) == {("t", 0): CommittedOffset(20)}
    _apply_at(state, 2, second)
    assert OffsetStore(meta).fetch("g", [("t", 0)]) == {("t", 0): CommittedOffset(20)}


def test_a_later_command_may_commit_a_lower_offset() -> None:
    # Order is by log position, not offset value: seeking back and committing is allowed.
    meta = MemoryMetaStore()
    state = MetadataState()
    ReplicatedOffsets(MetadataGroup(state), meta).register(state)
    _apply_at(state, 5, offsets_command("g", {("t", 0): CommittedOffset(100)}))
    _apply_at(state, 9, offsets_command("g", {("t", 0): CommittedOffset(40)}))
    assert OffsetStore(meta).fetch("g", [("t", 0)]) == {("t", 0): CommittedOffset(40)}
