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


def test_applied_commands_land_in_the_store_and_replay_is_harmless() -> None:
    state = MetadataState()
    store = OffsetStore(MemoryMetaStore())
    ReplicatedOffsets(MetadataGroup(state), store).register(state)
    first = offsets_command("g", {("t", 0): CommittedOffset(10)})
    second = offsets_command("g", {("t", 0): CommittedOffset(20)})
    for command in (first, second, first, second):  # the log, replayed at a restart
        assert state.apply(command).error == ErrorCode.NONE
    assert store.fetch("g", [("t", 0)]) == {("t", 0): CommittedOffset(20)}
