"""One consumer group's data: its state, generation, members and their timers.

Only queries live here; every transition is made by `GroupCoordinator`, so the rules of a
rebalance read top to bottom in one place.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field


class GroupState(enum.Enum):
    # Values are the names Kafka tools show (DescribeGroups, ListGroups).
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


Protocols = tuple[tuple[str, bytes], ...]  # (assignor name, opaque metadata), by preference


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    session_deadline_ms: int
    # Static membership (KIP-345): the id a client keeps across restarts; None if dynamic.
    group_instance_id: str | None = None
    # Tickets of this member's held JoinGroup / SyncGroup, if any. A member with a held
    # request is kept alive regardless of its session: the rebalance deadline bounds it.
    join_ticket: int | None = None
    sync_ticket: int | None = None
    assignment: bytes = b""

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def renew_session(self, now_ms: int) -> None:
        self.session_deadline_ms = now_ms + self.session_timeout_ms


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    # Insertion order matters: the first member becomes leader when one must be chosen.
    members: dict[str, Member] = field(default_factory=dict)
    # Static members: group instance id -> its current member id.
    static_members: dict[str, str] = field(default_factory=dict)
    # Ids handed out with MEMBER_ID_REQUIRED, each with the deadline for rejoining with it.
    pending: dict[str, int] = field(default_factory=dict)
    # PreparingRebalance: when the join phase ends even if some members have not rejoined.
    join_deadline_ms: int | None = None
    # Set while a new group waits out the initial rebalance delay; joins extend the delay
    # up to this cap.
    initial_delay_cap_ms: int | None = None
    # CompletingRebalance: when to give up on the leader's SyncGroup.
    sync_deadline_ms: int | None = None
    # Wall-clock time the group last became Empty (stamped by the driver, kept in its
    # record): its offsets' retention runs from here. None while it has members, and for
    # a group that never had any (standalone committers: retention runs from each commit).
    empty_since_ms: int | None = None

    def is_leader(self, member_id: str) -> bool:
        return self.leader == member_id

    def is_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """A request naming a static instance whose member id has since been replaced."""
        if not group_instance_id:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_rejoined(self) -> bool:
        # Pending members count too: they are about to join and would force another round.
        return not self.pending and all(m.join_ticket is not None for m in self.members.values())

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        iid = member.group_instance_id
        if iid is not None and self.static_members.get(iid) == member_id:
            del self.static_members[iid]
        return member

    def candidate_protocols(self) -> set[str]:
        """Assignors every current member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names)
        for member in members[1:]:
            common &= set(member.protocol_names)
        return common

    def accepts(self, protocol_type: str, names: list[str], member_id: str = "") -> bool:
        """Whether a member with these protocols may join: same type, a common assignor."""
        others = [m for m in self.members.values() if m.member_id != member_id]
        if not others:
            return bool(names)
        if protocol_type != self.protocol_type:
            return False
        common = set(names)
        for member in others:
            common &= set(member.protocol_names)
        return bool(common)

    def select_protocol(self) -> str:
        """Kafka's vote: each member backs its most preferred candidate; most votes wins.

        Ties go to the candidate earliest in the first member's preference list, so the
        choice is deterministic (a replicated coordinator must choose the same on every node).
        """
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        for member in self.members.values():
            for name in member.protocol_names:
                if name in candidates:
                    votes[name] += 1
                    break
        first = next(iter(self.members.values()))
        order = {name: i for i, name in enumerate(first.protocol_names)}
        return min(candidates, key=lambda name: (-votes[name], order.get(name, len(order))))

    def next_deadline_ms(self) -> int | None:
        deadlines: list[int] = list(self.pending.values())
        if self.join_deadline_ms is not None:
            deadlines.append(self.join_deadline_ms)
        if self.sync_deadline_ms is not None:
            deadlines.append(self.sync_deadline_ms)
        deadlines.extend(
            m.session_deadline_ms
            for m in self.members.values()
            if m.join_ticket is None and m.sync_ticket is None
        )
        return min(deadlines, default=None)
