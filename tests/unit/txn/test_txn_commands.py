"""Transaction records as metadata-group commands (vdl.txn.commands): encoded through the
metadata log format, applied on every node into its store, and a commit decision's offsets
committed in the same step, under the offsets' replay rule."""

from __future__ import annotations

from typing import Any

from vdl.cluster.commands import decode_command, encode_command
from vdl.cluster.memory_meta import MemoryMetaStore
from vdl.cluster.metadata import MetadataState
from vdl.cluster.metadata_group import MetadataGroup
from vdl.cluster.offset_commands import ReplicatedOffsets, offsets_command
from vdl.groups.offsets import CommittedOffset, OffsetStore
from vdl.log.error_codes import ErrorCode
from vdl.txn.commands import ReplicatedTxns, store_txn_command
from vdl.txn.state import TxnRecord, TxnState, TxnStore

OFFSETS = {"g": {("in", 0): CommittedOffset(42, "m", 3, 1_000)}}


def _node(meta: MemoryMetaStore) -> MetadataState:
    state = MetadataState()
    group = MetadataGroup(state)
    offsets = ReplicatedOffsets(group, meta)
    offsets.register(state)
    ReplicatedTxns(group, meta, offsets).register(state)
    return state


def _apply_at(state: MetadataState, index: int, command: dict[str, Any]) -> None:
    # Through the log's encoding, as group 0 applies the entry at `index`.
    state.applying_index = index
    assert state.apply(decode_command(encode_command(command, index))).error == ErrorCode.NONE


def _record(state: TxnState) -> TxnRecord:
    return TxnRecord(
        "tx",
        1000,
        2,
        60_000,
        state,
        partitions=(("out", 0), ("out", 1)),
        groups=("g",),
        offsets=OFFSETS,
        start_ms=5,
        updated_ms=6,
    )


def test_the_commit_decision_commits_the_offsets_with_it() -> None:
    meta = MemoryMetaStore()
    state = _node(meta)
    ongoing = _record(TxnState.ONGOING)
    _apply_at(state, 1, store_txn_command(ongoing))
    assert TxnStore(meta).get("tx") == ongoing
    assert OffsetStore(meta).fetch("g", [("in", 0)]) == {("in", 0): None}
    _apply_at(state, 2, store_txn_command(_record(TxnState.PREPARE_COMMIT)))
    assert OffsetStore(meta).fetch("g", [("in", 0)]) == {("in", 0): OFFSETS["g"][("in", 0)]}


def test_an_abort_decision_commits_nothing() -> None:
    meta = MemoryMetaStore()
    state = _node(meta)
    _apply_at(state, 1, store_txn_command(_record(TxnState.PREPARE_ABORT)))
    assert OffsetStore(meta).fetch("g", [("in", 0)]) == {("in", 0): None}
    stored = TxnStore(meta).get("tx")
    assert stored is not None and stored.state is TxnState.PREPARE_ABORT


def test_replay_never_moves_a_later_commit_back() -> None:
    meta = MemoryMetaStore()
    state = _node(meta)
    decided = store_txn_command(_record(TxnState.PREPARE_COMMIT))
    later = offsets_command("g", {("in", 0): CommittedOffset(77)})
    _apply_at(state, 1, decided)
    _apply_at(state, 2, later)
    # A restart replays group 0's log from its start into the same store.
    state = _node(meta)
    _apply_at(state, 1, decided)
    assert OffsetStore(meta).fetch("g", [("in", 0)]) == {("in", 0): CommittedOffset(77)}
    _apply_at(state, 2, later)
    assert OffsetStore(meta).fetch("g", [("in", 0)]) == {("in", 0): CommittedOffset(77)}
