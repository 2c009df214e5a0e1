"""What a group driver tells the thing it replicates for (a log stream, the metadata).

The driver owns the Raft log's store: it writes what the core hands it and reports here.
Entries this node proposed itself are not reported by `on_written` (the proposer knew them
first); everything else that lands in or leaves the log is, so the machine can keep
offsets and producer state in step with the log on followers too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from vdl.backends.api import Entry


class StateMachine(Protocol):
    def on_written(self, entries: Sequence[Entry]) -> None:
        """Entries from a leader were appended to the store (not yet durable/committed)."""
        ...

    def on_truncated(self, from_index: int) -> None:
        """Entries from `from_index` on were removed, or will never be written: they were
        not committed and never will be (including this node's own proposals)."""
        ...

    def apply(self, entries: Sequence[Entry]) -> None:
        """Entries are committed and durable here, in index order, each exactly once per
        process (after a restart, from the driver's `applied` point on)."""
        ...

    def on_role_change(self, leader_id: int, term: int, is_leader: bool) -> None:
        """The known leader or this node's role changed."""
        ...

    def on_persisted(self, index: int) -> None:
        """Every entry up to `index` is durable on this node's disk (committed or not):
        what a leader-durable acknowledgement (Kafka acks=1) waits for."""
        ...

    def on_restored(self, index: int) -> None:
        """The log was replaced by a snapshot: the store holds the leader's log up to
        `index`, all of it committed, and nothing else."""
        ...


@runtime_checkable
class AppliesByIndex(Protocol):
    """A machine whose committed entries are already in hand (a log stream: its own store
    holds them, and `on_written` or the proposal told it what they are), so applying only
    moves its commit point. Its driver then never reads committed payloads back from the
    store, and calls this instead of `StateMachine.apply`."""

    def apply_to(self, index: int) -> None:
        """Every entry up to `index` is committed and durable here (as `apply`)."""
        ...
