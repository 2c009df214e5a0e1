"""Raft hard state (term, vote, commit hint) of each group, kept in the node's MetaStore.

One key per group, so the many groups of a node share the store's synced WAL instead of
each syncing a file of its own. MetaStore writes are synced before they return, which is
what lets the driver answer a vote or an append right after the write completes.
"""

from __future__ import annotations

import struct

from vdl.backends.api import MetaStore
from vdl.consensus.state import HardState

_VALUE = struct.Struct(">QQQ")


def hard_state_key(group_id: int) -> bytes:
    return b"raft/%d/hard-state" % group_id


def load_hard_state(meta: MetaStore, group_id: int) -> HardState:
    raw = meta.get(hard_state_key(group_id))
    if raw is None:
        return HardState()
    if len(raw) != _VALUE.size:
        raise ValueError(f"hard state of group {group_id} has {len(raw)} bytes")
    term, vote, commit = _VALUE.unpack(raw)
    return HardState(term, vote, commit)


def save_hard_state(meta: MetaStore, group_id: int, hs: HardState) -> None:
    meta.put(hard_state_key(group_id), _VALUE.pack(hs.term, hs.vote, hs.commit))


def delete_hard_state(meta: MetaStore, group_id: int) -> None:
    meta.delete(hard_state_key(group_id))
