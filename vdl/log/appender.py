"""Where a log stream's appends go: the seam between the log and consensus.

A `LogStream` assigns offsets, checks producers and keeps waiters; what happens to an
entry after that is its appender's. There are two, chosen when the stream is built (as an
HTTP server picks its HTTP/1.1 or HTTP/2 protocol behind one interface):

- `LocalAppender` (here): one replica. The entry goes to the store, the flusher syncs it,
  and durable on this disk is committed.
- `RaftAppender` (`vdl/consensus/stream_replica.py`): a Raft group. The entry is proposed;
  the group's driver writes and syncs the store and reports what is durable here and what
  a majority has.

Either reports back through the stream's `StreamEvents`. A stream hands itself to its
appender's factory when it is built, so both sides are wired by their constructors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from vdl.backends.api import Buffer, Entry, EntryType, LogStore
from vdl.log.flusher import Flusher

# The term (and partitionLeaderEpoch) of every entry of a single-replica stream.
SINGLE_NODE_TERM = 1


class StreamEvents(Protocol):
    """What an appender (and a Raft group's state machine) reports to its stream (a
    `LogStream`)."""

    def on_commit(self, index: int) -> None:
        """Every entry up to raft `index` is committed: readers may see it."""
        ...

    def on_local_durable(self, index: int) -> None:
        """Every entry up to raft `index` is durable on this node's disk."""
        ...

    # From a Raft group only (vdl/consensus/stream_replica.py):

    def on_replicated(self, index: int, payload: Buffer) -> None:
        """A follower stored the leader's data entry at raft `index` (not committed yet)."""
        ...

    def on_truncated(self, from_index: int) -> int:
        """Entries from raft `from_index` on will never commit; the offset after the last
        entry kept."""
        ...

    def on_restored(self, index: int) -> None:
        """A snapshot replaced the log: it ends at raft `index`, all of it committed."""
        ...


class Appender(Protocol):
    def initial_commit_index(self) -> int:
        """The raft index up to which the stored log was committed when the stream opened."""
        ...

    def next_offset(self) -> int:
        """The offset the next appended batch starts at."""
        ...

    def term(self) -> int:
        """The term the next entry gets: its batch's partitionLeaderEpoch."""
        ...

    def append(self, payload: Buffer, next_offset: int) -> int:
        """Take one batch (offsets and epoch stamped, ending before `next_offset`); its raft
        index. Raises `StreamError` when this replica cannot take writes."""
        ...

    def apply_retention(self, now_ms: int, drop_before: int | None = None) -> int:
        """Remove what the topic's retention allows, and whole segments of entries before
        raft index `drop_before` (below the log start); the number of entries removed."""
        ...

    async def close(self) -> None:
        """Let go of what the appender holds (the store is the stream's to close)."""
        ...


AppenderFactory = Callable[[LogStore, StreamEvents], Appender]


class LocalAppender:
    """One replica: the store takes the entry, the flusher makes it durable, and durable
    is committed. It is the flusher's dirty object."""

    def __init__(self, store: LogStore, flusher: Flusher, events: StreamEvents) -> None:
        self._store = store
        self._flusher = flusher
        self._events = events

    @classmethod
    def factory(cls, flusher: Flusher) -> AppenderFactory:
        def build(store: LogStore, events: StreamEvents) -> Appender:
            return cls(store, flusher, events)

        return build

    @property
    def store(self) -> LogStore:
        return self._store

    def initial_commit_index(self) -> int:
        # Everything stored was synced before it was acknowledged, or never acknowledged.
        return self._store.last_index()

    def next_offset(self) -> int:
        return self._store.next_offset()

    def term(self) -> int:
        return SINGLE_NODE_TERM

    def append(self, payload: Buffer, next_offset: int) -> int:
        index = self._store.last_index() + 1
        self._store.append([Entry(SINGLE_NODE_TERM, index, EntryType.DATA, payload)])
        self._flusher.mark_dirty(self)
        return index

    def on_durable(self, index: int) -> None:
        """The flusher synced the store up to `index`."""
        self._events.on_local_durable(index)
        self._events.on_commit(index)

    def apply_retention(self, now_ms: int, drop_before: int | None = None) -> int:
        return self._store.apply_retention(now_ms, drop_before=drop_before)

    async def close(self) -> None:
        await self._flusher.release(self)
