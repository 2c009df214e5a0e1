"""Tunables of one Raft group."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RaftOptions:
    election_tick: int = 10  # ticks without a leader before a (pre-)campaign; randomised to [n, 2n)
    heartbeat_tick: int = 1  # ticks between the leader's heartbeats
    max_inflight: int = 64  # unacknowledged AppendEntries per follower in REPLICATE state
    max_append_bytes: int = 1024 * 1024  # payload per AppendEntries (at least one entry)
    max_apply_bytes: int = 4 * 1024 * 1024  # committed entries per Ready (at least one)
    pre_vote: bool = True
    check_quorum: bool = True
    # An idle group stops ticking and heartbeating until a proposal, a message or a change
    # in node liveness wakes it (see RaftNode.quiesced).
    quiesce: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_tick < self.election_tick:
            raise ValueError("need 0 < heartbeat_tick < election_tick")
        if self.max_inflight < 1:
            raise ValueError("max_inflight must be >= 1")
