"""Where a group's driver records the raft stages of a replicated produce.

The stages (`raft_append_round_trip_seconds{peer}`, `raft_receive_to_write_seconds`,
`raft_write_to_durable_seconds{role}`) are described in `vdl/metrics/stages.py`. Only
stream groups record them (`GroupStageTimers`); the metadata group gets `NoStageTimers`,
so its traffic does not blur what a produce costs.
"""

from __future__ import annotations

from vdl.consensus.messages import AppendEntries, AppendResponse, Message
from vdl.metrics.stages import STAGES, IndexTimer

_RECEIVE_TO_WRITE = STAGES.histogram("raft_receive_to_write_seconds")
_WRITE_TO_DURABLE_LEADER = STAGES.histogram("raft_write_to_durable_seconds", role="leader")
_WRITE_TO_DURABLE_FOLLOWER = STAGES.histogram("raft_write_to_durable_seconds", role="follower")


class NoStageTimers:
    def sent(self, message: Message) -> None:
        pass

    def delivered(self, message: Message) -> None:
        pass

    def written(self, last_index: int, leader: bool) -> None:
        pass

    def durable(self, index: int) -> None:
        pass

    def truncated(self, from_index: int) -> None:
        pass


class GroupStageTimers(NoStageTimers):
    def __init__(self) -> None:
        self._round_trips: dict[int, IndexTimer] = {}
        self._received = IndexTimer(_RECEIVE_TO_WRITE)
        # The last index written as a follower: entries a follower has already (a resent
        # AppendEntries) are never written again, so they are not timed.
        self._follower_written = 0
        self._written_leader = IndexTimer(_WRITE_TO_DURABLE_LEADER)
        self._written_follower = IndexTimer(_WRITE_TO_DURABLE_FOLLOWER)

    def sent(self, message: Message) -> None:
        """The driver handed `message` to the transport."""
        if isinstance(message, AppendEntries) and message.entries:
            timer = self._round_trips.get(message.dst)
            if timer is None:
                hist = STAGES.histogram("raft_append_round_trip_seconds", peer=str(message.dst))
                timer = self._round_trips[message.dst] = IndexTimer(hist)
            timer.start(message.entries[-1].index)

    def delivered(self, message: Message) -> None:
        """The transport delivered `message` to the group."""
        if isinstance(message, AppendResponse):
            if not message.reject:
                timer = self._round_trips.get(message.src)
                if timer is not None:
                    timer.stop_upto(message.index)
        elif isinstance(message, AppendEntries):
            if message.entries and message.entries[-1].index > self._follower_written:
                self._received.start(message.entries[-1].index)

    def written(self, last_index: int, leader: bool) -> None:
        """Entries up to `last_index` were appended to the store (not synced)."""
        if not leader:
            self._received.stop_upto(last_index)
            self._follower_written = last_index
        (self._written_leader if leader else self._written_follower).start(last_index)

    def durable(self, index: int) -> None:
        """The store is durable up to `index`."""
        self._written_leader.stop_upto(index)
        self._written_follower.stop_upto(index)

    def truncated(self, from_index: int) -> None:
        self._follower_written = min(self._follower_written, from_index - 1)
        self._received.drop_from(from_index)
        self._written_leader.drop_from(from_index)
        self._written_follower.drop_from(from_index)
