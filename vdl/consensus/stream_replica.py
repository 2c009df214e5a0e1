"""A log stream served by a Raft group: the seam between `LogStream` and `GroupDriver`.

`StreamReplica` plays two parts:
- the stream's `LogStore`: reads go to the real store; `append` proposes the batch to the
  group (leader only) instead of writing it, and `next_offset`/`last_index` include the
  proposals still in flight, so the stream assigns the next batch its offsets and raft
  index at once, exactly as on one node;
- the driver's `StateMachine`: entries a leader sent are announced to the stream (offsets,
  producer state), truncations reset the offset counter and fail the waiters of the lost
  entries, and applied entries move the stream's high watermark (the commit point).

The driver writes the store and decides durability; the flusher still calls the stream's
`on_durable`, which ignores it once the stream is replicated.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from vdl.backends.api import (
    Buffer,
    ClosedSegments,
    Entry,
    EntryType,
    LogStore,
    MetaStore,
    SnapshotStaging,
    StorageError,
    batch_offsets,
)
from vdl.consensus.errors import NotLeader, ProposalDropped
from vdl.consensus.hard_state_store import load_hard_state
from vdl.consensus.snapshot_transfer import load_snapshot_meta
from vdl.log.error_codes import ErrorCode
from vdl.log.stream import LogStream, StreamError
from vdl.metrics.stages import STAGES, IndexTimer

_PROPOSE_TO_COMMIT = STAGES.histogram("raft_propose_to_commit_seconds")


class StreamReplica:
    def __init__(self, stream: LogStream, group_id: int) -> None:
        self.stream = stream
        self.group_id = group_id
        self._real = stream.store
        self._next_offset = self._real.next_offset()
        self._driver: _Proposer | None = None
        self.leader_id = 0
        self.term = 0
        self._proposed = IndexTimer(_PROPOSE_TO_COMMIT)

    def start(self, driver: _Proposer, commit_index: int) -> None:
        """Hand the stream over to `driver` (built with applied=commit_index)."""
        self._driver = driver
        self.stream.attach_replication(self, commit_index)

    # ---- StateMachine ----------------------------------------------------------------

    def on_written(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if entry.type == EntryType.DATA:
                self._next_offset = batch_offsets(entry.payload)[1] + 1
                self.stream.on_replicated(entry.index, entry.payload)

    def on_truncated(self, from_index: int) -> None:
        self._proposed.drop_from(from_index)
        self._next_offset = self.stream.on_truncated(from_index)

    def apply(self, entries: Sequence[Entry]) -> None:
        self.apply_to(entries[-1].index)

    def apply_to(self, index: int) -> None:
        # The stream knows its entries already: the driver need not read them back.
        self._proposed.stop_upto(index)
        self.stream.on_commit(index)

    def on_role_change(self, leader_id: int, term: int, is_leader: bool) -> None:
        self.leader_id = leader_id
        self.term = term

    def on_persisted(self, index: int) -> None:
        self.stream.on_local_durable(index)

    def on_restored(self, index: int) -> None:
        self._next_offset = self._real.next_offset()
        self.stream.on_restored(index)

    # ---- LogStore, as the stream sees it -----------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        driver = self._driver
        if driver is None:
            raise StreamError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "replica not started")
        if len(entries) != 1 or entries[0].type != EntryType.DATA:
            raise StorageError("a replicated stream appends one data entry at a time")
        entry = entries[0]
        try:
            first, _ = driver.propose([entry.payload])
        except NotLeader as exc:
            raise StreamError(ErrorCode.NOT_LEADER_OR_FOLLOWER, str(exc)) from None
        except ProposalDropped as exc:
            raise StreamError(ErrorCode.NOT_ENOUGH_REPLICAS, str(exc)) from None
        if first != entry.index:
            raise StorageError(f"proposal got index {first}, stream expected {entry.index}")
        self._proposed.start(first)
        self._next_offset = batch_offsets(entry.payload)[1] + 1

    def last_index(self) -> int:
        driver = self._driver
        return self._real.last_index() if driver is None else driver.next_index() - 1

    def next_offset(self) -> int:
        return self._next_offset

    def first_index(self) -> int:
        return self._real.first_index()

    def term_at(self, index: int) -> int:
        return self._real.term_at(index)

    def truncate_suffix(self, from_index: int) -> None:
        raise StorageError("the group driver truncates a replicated stream")

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        return self._real.entries(lo, hi, max_bytes)

    def first_offset(self) -> int:
        return self._real.first_offset()

    def index_of_offset(self, offset: int) -> int | None:
        return self._real.index_of_offset(offset)

    def read_batches(self, offset: int, max_bytes: int, max_index: int) -> list[Buffer]:
        # Never past what is stored: proposals in flight are not in the store yet.
        return self._real.read_batches(offset, max_bytes, min(max_index, self._real.last_index()))

    def data_headers(self) -> Iterator[tuple[int, bytes]]:
        return self._real.data_headers()

    def sync(self) -> None:
        """Durability is the driver's (it registers itself with the flusher)."""

    def apply_retention(self, now_ms: int, keep_from: int | None = None) -> int:
        # The driver keeps what is not applied, and a follower that needs what is gone
        # gets a snapshot.
        driver = self._driver
        return 0 if driver is None else driver.compact(now_ms)

    def reset(self, first_index: int, first_offset: int) -> None:
        raise StorageError("the group driver installs snapshots of a replicated stream")

    def closed_segments(self, upto: int) -> ClosedSegments:
        return self._real.closed_segments(upto)

    def stage_snapshot(self) -> SnapshotStaging:
        raise StorageError("the group driver installs snapshots of a replicated stream")

    def install_snapshot(self, staging: SnapshotStaging) -> None:
        raise StorageError("the group driver installs snapshots of a replicated stream")

    def size_bytes(self) -> int:
        return self._real.size_bytes()

    def segment_count(self) -> int:
        return self._real.segment_count()

    def bytes_after(self, index: int) -> int | None:
        return self._real.bytes_after(index)

    def close(self) -> None:
        self._real.close()


class _Proposer(Protocol):
    """What the replica needs from its driver (a GroupDriver)."""

    def propose(self, payloads: Sequence[Buffer]) -> tuple[int, int]: ...

    def next_index(self) -> int: ...

    def compact(self, now_ms: int) -> int: ...


def restart_commit_index(meta: MetaStore, group_id: int, store: LogStore) -> int:
    """Where a restarted replica may assume the commit point is: the saved hint, clamped
    to its log (a hint may lag, never lead, so what it covers is committed), or the start
    of its log recorded by a snapshot or retention if that is further."""
    commit = min(load_hard_state(meta, group_id).commit, store.last_index())
    snapshot = load_snapshot_meta(meta, group_id)
    if snapshot is not None and store.first_index() - 1 <= snapshot.index <= store.last_index():
        commit = max(commit, snapshot.index)
    return commit
