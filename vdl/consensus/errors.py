"""Errors the consensus core raises to its caller (the driver maps them to client errors)."""

from __future__ import annotations


class ConsensusError(Exception):
    """Base class of consensus errors."""


class NotLeader(ConsensusError):
    """The node is not the leader; `leader_id` is the known leader or 0."""

    def __init__(self, leader_id: int) -> None:
        super().__init__(f"not the leader (leader is {leader_id or 'unknown'})")
        self.leader_id = leader_id


class ProposalDropped(ConsensusError):
    """The leader cannot take proposals right now (e.g. a leadership transfer is running)."""


class ConfigChangeRejected(ConsensusError):
    """A membership change is invalid, or another one is still pending."""


class SafetyViolation(ConsensusError):
    """An input would break a Raft invariant (e.g. truncating committed entries); a bug."""
