"""The leader's view of each follower: how far it matches, what to send next, how much is
in flight.

A follower is in one of three states:
- PROBE: we do not know where its log matches ours; send one AppendEntries at a time and
  wait for the answer (or the next heartbeat response) before sending another.
- REPLICATE: its log matches up to `match`; stream AppendEntries optimistically (advancing
  `next` as we send) with at most `max_inflight` unacknowledged messages, like a TCP window
  (VDL 5.2.5.2, pipelined replication).
- SNAPSHOT: it needs entries we no longer have; wait until the snapshot is reported.
"""

from __future__ import annotations

import enum
from collections import deque


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Inflights:
    """Last indexes of AppendEntries sent but not yet acknowledged, oldest first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("in-flight window must hold at least one message")
        self.capacity = capacity
        self._last_indexes: deque[int] = deque()

    def __len__(self) -> int:
        return len(self._last_indexes)

    def full(self) -> bool:
        return len(self._last_indexes) >= self.capacity

    def add(self, last_index: int) -> None:
        if self.full():
            raise RuntimeError("in-flight window is full")
        self._last_indexes.append(last_index)

    def free_to(self, index: int) -> None:
        """An acknowledgement up to `index` frees every message ending at or before it."""
        while self._last_indexes and self._last_indexes[0] <= index:
            self._last_indexes.popleft()

    def free_first(self) -> None:
        if self._last_indexes:
            self._last_indexes.popleft()

    def reset(self) -> None:
        self._last_indexes.clear()


class Progress:
    def __init__(self, next_index: int, max_inflight: int, *, learner: bool = False) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.pending_snapshot = 0
        # Set by any message from the peer; check-quorum reads and clears it.
        self.recent_active = False
        self.learner = learner
        self.inflights = Inflights(max_inflight)

    def __repr__(self) -> str:
        return (
            f"Progress(match={self.match}, next={self.next}, state={self.state.value}, "
            f"inflight={len(self.inflights)}, probe_sent={self.probe_sent})"
        )

    def become_probe(self) -> None:
        if self.state is ProgressState.SNAPSHOT:
            # The snapshot may have landed; resume after it rather than before it.
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self.state = ProgressState.PROBE
        self.pending_snapshot = 0
        self.probe_sent = False
        self.inflights.reset()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.pending_snapshot = 0
        self.inflights.reset()

    def become_snapshot(self, index: int) -> None:
        self.state = ProgressState.SNAPSHOT
        self.pending_snapshot = index
        self.inflights.reset()

    def is_paused(self) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return self.inflights.full()
        return True

    def sent(self, last_index: int | None) -> None:
        """Record an AppendEntries whose last entry is `last_index` (None: no entries)."""
        if self.state is ProgressState.REPLICATE:
            if last_index is not None:
                self.next = last_index + 1
                self.inflights.add(last_index)
        elif self.state is ProgressState.PROBE:
            self.probe_sent = True

    def on_ack(self, index: int) -> bool:
        """The follower durably matches us up to `index`; True if that is news."""
        if self.state is ProgressState.REPLICATE:
            self.inflights.free_to(index)
        if index <= self.match:
            return False
        self.match = index
        self.next = max(self.next, index + 1)
        self.probe_sent = False
        return True

    def on_reject(self, rejected: int, hint_next: int) -> bool:
        """An AppendEntries after `rejected` was refused; move `next` back.

        Returns False for a stale rejection (one answering a message from before the last
        change of `next`), which must be ignored or we would loop sending old data.
        """
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.become_probe()
        elif self.state is ProgressState.SNAPSHOT or self.next - 1 != rejected:
            return False
        self.next = max(self.match + 1, min(hint_next, rejected))
        self.probe_sent = False
        return True
