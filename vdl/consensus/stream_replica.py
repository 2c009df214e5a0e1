"""A log stream served by a Raft group: the Raft side of the stream's appender seam.

Two small parts, built together by `raft_appender` when the stream is built:
- `StreamMachine`, the group driver's `StateMachine`: entries a leader sent are announced
  to the stream (offsets, producer state), truncations reset the offset counter and fail
  the waiters of the lost entries, durable entries wake Kafka acks=1 writers, and applied
  entries move the stream's high watermark (the commit point). It also keeps the offset the
  next batch starts at, which counts the proposals not yet written.
- `RaftAppender`, the stream's `Appender`: a batch is proposed to the group (leader only),
  stamped with the leader's term as its partitionLeaderEpoch; retention is the driver's
  compaction.

The driver owns the store's writes and syncs; the stream reads the store directly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from vdl.backends.api import Buffer, Entry, EntryType, LogStore, MetaStore, batch_offsets
from vdl.consensus.errors import NotLeader, ProposalDropped
from vdl.consensus.hard_state_store import load_hard_state
from vdl.consensus.snapshot_transfer import load_snapshot_meta
from vdl.log.appender import Appender, AppenderFactory, StreamEvents
from vdl.log.batch_header import MAX_PARTITION_LEADER_EPOCH
from vdl.log.error_codes import ErrorCode
from vdl.log.stream import StreamError
from vdl.metrics.stages import STAGES, IndexTimer

_PROPOSE_TO_COMMIT = STAGES.histogram("raft_propose_to_commit_seconds")


class StreamMachine:
    """The driver's state machine for one stream (a `StateMachine` that `AppliesByIndex`)."""

    def __init__(self, events: StreamEvents, store: LogStore) -> None:
        self._events = events
        self._store = store
        self.next_offset = store.next_offset()
        self._proposed = IndexTimer(_PROPOSE_TO_COMMIT)

    def proposed(self, index: int, next_offset: int) -> None:
        """This node proposed the batch at raft `index`, ending before `next_offset`."""
        self._proposed.start(index)
        self.next_offset = next_offset

    def on_written(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if entry.type == EntryType.DATA:
                self.next_offset = batch_offsets(entry.payload)[1] + 1
                self._events.on_replicated(entry.index, entry.payload)

    def on_truncated(self, from_index: int) -> None:
        self._proposed.drop_from(from_index)
        self.next_offset = self._events.on_truncated(from_index)

    def apply(self, entries: Sequence[Entry]) -> None:
        self.apply_to(entries[-1].index)

    def apply_to(self, index: int) -> None:
        # The stream knows its entries already: the driver need not read them back.
        self._proposed.stop_upto(index)
        self._events.on_commit(index)

    def on_role_change(self, leader_id: int, term: int, is_leader: bool) -> None:
        pass

    def on_persisted(self, index: int) -> None:
        self._events.on_local_durable(index)

    def on_restored(self, index: int) -> None:
        self.next_offset = self._store.next_offset()
        self._events.on_restored(index)


class Proposer(Protocol):
    """What the appender needs from its group's driver (a `GroupDriver`)."""

    def propose(self, payloads: Sequence[Buffer]) -> tuple[int, int]: ...

    @property
    def term(self) -> int: ...

    def compact(self, now_ms: int, drop_before: int | None = None) -> int: ...


class RaftAppender:
    def __init__(self, driver: Proposer, machine: StreamMachine, commit_index: int) -> None:
        self._driver = driver
        self._machine = machine
        self._commit_index = commit_index

    def initial_commit_index(self) -> int:
        return self._commit_index

    def next_offset(self) -> int:
        return self._machine.next_offset

    def term(self) -> int:
        # The entry is proposed at once, in the term the leader is in now (Kafka's
        # partitionLeaderEpoch is the leader's epoch; a Raft term is one). Terms are
        # 64-bit and an epoch an int32: elections add one at a time, so a real group never
        # gets there, but a peer may send any term (a fuzzer did): past the int32 range the
        # epoch stays at its largest value, which still never decreases.
        return min(self._driver.term, MAX_PARTITION_LEADER_EPOCH)

    def append(self, payload: Buffer, next_offset: int) -> int:
        try:
            index, _ = self._driver.propose([payload])
        except NotLeader as exc:
            raise StreamError(ErrorCode.NOT_LEADER_OR_FOLLOWER, str(exc)) from None
        except ProposalDropped as exc:
            raise StreamError(ErrorCode.NOT_ENOUGH_REPLICAS, str(exc)) from None
        self._machine.proposed(index, next_offset)
        return index

    def apply_retention(self, now_ms: int, drop_before: int | None = None) -> int:
        # The driver keeps what is not applied, and a follower that needs what is gone
        # gets a snapshot. Every replica moves its log start by the same metadata command
        # (DeleteRecords), so each drops the segments below it here, on its own pass.
        return self._driver.compact(now_ms, drop_before)

    async def close(self) -> None:
        """The driver is closed by whoever runs it; the flusher knows only the driver."""


def raft_appender(
    build_driver: Callable[[LogStore, StreamMachine, int], Proposer],
    meta: MetaStore,
    group_id: int,
) -> AppenderFactory:
    """A stream's appender factory for Raft group `group_id`: `build_driver(store, machine,
    applied)` builds the group's driver over the stream's store, to drive `machine`, from
    the restart commit point `applied`."""

    def build(store: LogStore, events: StreamEvents) -> Appender:
        commit = restart_commit_index(meta, group_id, store)
        machine = StreamMachine(events, store)
        return RaftAppender(build_driver(store, machine, commit), machine, commit)

    return build


def restart_commit_index(meta: MetaStore, group_id: int, store: LogStore) -> int:
    """Where a restarted replica may assume the commit point is: the saved hint, clamped
    to its log (a hint may lag, never lead, so what it covers is committed), or the start
    of its log recorded by a snapshot or retention if that is further."""
    commit = min(load_hard_state(meta, group_id).commit, store.last_index())
    snapshot = load_snapshot_meta(meta, group_id)
    if snapshot is not None and store.first_index() - 1 <= snapshot.index <= store.last_index():
        commit = max(commit, snapshot.index)
    return commit
