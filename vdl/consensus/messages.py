"""The messages Raft nodes exchange, as small frozen dataclasses.

Every message names its sender, its receiver and the sender's term. Entries travel as the
storage layer's `Entry`, so a follower can append what it receives without conversion.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdl.backends.api import Entry
from vdl.consensus.state import SnapshotMeta


@dataclass(frozen=True, slots=True)
class AppendEntries:
    """Leader -> follower: entries after (prev_index, prev_term); may be empty (a probe)."""

    src: int
    dst: int
    term: int
    prev_index: int
    prev_term: int
    commit: int
    entries: tuple[Entry, ...] = ()


@dataclass(frozen=True, slots=True)
class AppendResponse:
    """Follower -> leader.

    On success `index` is the last index the follower now holds, durably, matching the
    leader. On rejection `index` is the rejected prev_index and the hint tells the leader
    where to retry: `hint_term` is the follower's term at prev_index and `hint_index` the
    first index the follower has with that term; `hint_term` 0 means the follower's log is
    too short and `hint_index` is its last index + 1.
    """

    src: int
    dst: int
    term: int
    index: int
    reject: bool = False
    hint_index: int = 0
    hint_term: int = 0


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Leader -> follower: keeps followers from campaigning; `commit` is capped at the
    follower's known match so it never commits entries it might not have. With `quiesce`
    the leader stops heartbeating after this one: the group is idle and every follower
    holds and knows committed everything the leader has."""

    src: int
    dst: int
    term: int
    commit: int
    quiesce: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    src: int
    dst: int
    term: int


@dataclass(frozen=True, slots=True)
class RequestVote:
    """Candidate -> voter. A pre-vote carries the term the candidate *would* use and changes
    no state anywhere; `transfer` marks a campaign ordered by the leader (TimeoutNow), which
    voters honour even while they still hear from that leader."""

    src: int
    dst: int
    term: int
    last_index: int
    last_term: int
    pre_vote: bool = False
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    src: int
    dst: int
    term: int
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leader -> transfer target: campaign now, skipping the election timeout and pre-vote."""

    src: int
    dst: int
    term: int


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    """Leader -> lagging follower: replace your log prefix with the snapshot.

    The data itself (closed segment files) is moved by the drivers; `handle` is an opaque
    token they use to find it. The follower answers with an AppendResponse at
    `snapshot.index` once it has persisted the snapshot.
    """

    src: int
    dst: int
    term: int
    snapshot: SnapshotMeta
    handle: bytes = b""


Message = (
    AppendEntries
    | AppendResponse
    | Heartbeat
    | HeartbeatResponse
    | RequestVote
    | VoteResponse
    | TimeoutNow
    | InstallSnapshot
)

LEADER_MESSAGES = (AppendEntries, Heartbeat, InstallSnapshot)
