"""Which live reader of a consumer reads which partition of a topic (sans-I/O).

The server balances partitions among the read sessions of one consumer: when a reader
joins or leaves, :func:`balance` computes a new target, moving as few partitions as it can.
A partition changes hands in two steps: its holder releases it (the session tells its client
``stop_partition_session``), and only then may the new target acquire it, so two readers of a
consumer never hold the same partition at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Wanted = frozenset[int] | None  # None: any partition


def balance(
    partitions: int, members: Mapping[str, Wanted], current: Mapping[int, str]
) -> dict[int, str]:
    """Target owner per partition: everyone gets ``partitions // members`` and the first
    ``partitions % members`` one more, current owners kept where that allows, the rest to
    the least loaded eligible member."""
    if not members:
        return {}
    base, extra = divmod(partitions, len(members))
    names = sorted(members)
    # Only `extra` members may hold base + 1; a cap of ceil() for everyone lets current
    # owners keep so much that another member is left with nothing.
    extras_left = extra

    def eligible(member: str, partition: int) -> bool:
        wanted = members[member]
        return wanted is None or partition in wanted

    target: dict[int, str] = {}
    load: Counter[str] = Counter()

    def take(partition: int, member: str) -> None:
        nonlocal extras_left
        if load[member] == base:
            extras_left -= 1
        target[partition] = member
        load[member] += 1

    def has_room(member: str) -> bool:
        return load[member] < base or (load[member] == base and extras_left > 0)

    for partition in range(partitions):
        owner = current.get(partition)
        if (
            owner is not None
            and owner in members
            and eligible(owner, partition)
            and has_room(owner)
        ):
            take(partition, owner)
    for partition in range(partitions):
        if partition in target:
            continue
        candidates = [m for m in names if eligible(m, partition)]
        if candidates:
            # Least loaded first; with restricted `wanted` sets perfect fairness may be
            # impossible, and then the partition still gets an owner.
            take(partition, min(candidates, key=lambda m: (load[m], m)))
    return target


@dataclass(slots=True)
class Member:
    """One read session of a (consumer, topic): what it asked for, how to wake it, and the
    partitions it holds (acquired and not yet released)."""

    wanted: Wanted
    wake: Callable[[], None]
    held: set[int] = field(default_factory=set)


@dataclass(slots=True)
class MemberGroup:
    """The read sessions of one (consumer, topic) on this node."""

    partitions: int
    members: dict[str, Member] = field(default_factory=dict)

    def holders(self) -> dict[int, str]:
        return {p: name for name, member in self.members.items() for p in member.held}


class MemberTable:
    """The read sessions of every (consumer, topic) on this node: their joining, leaving
    and the topic's growth, shared by the per-node ``ReadCoordinator`` and the node side of
    the cluster-wide balancer (``vdl.net.ydb.cluster_reads.ClusterReads``)."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], MemberGroup] = {}

    def join(
        self,
        consumer: str,
        topic: str,
        partitions: int,
        member: str,
        wanted: Wanted,
        wake: Callable[[], None],
    ) -> MemberGroup:
        group = self.groups.setdefault((consumer, topic), MemberGroup(partitions))
        group.partitions = max(group.partitions, partitions)
        group.members[member] = Member(wanted, wake)
        return group

    def leave(self, consumer: str, topic: str, member: str) -> MemberGroup | None:
        """Forget ``member`` (and what it held); the group it left, None if it was not
        there. A group left empty is dropped (its ``members`` then is empty)."""
        group = self.groups.get((consumer, topic))
        if group is None or group.members.pop(member, None) is None:
            return None
        if not group.members:
            del self.groups[(consumer, topic)]
        return group

    def grow(self, consumer: str, topic: str, partitions: int) -> MemberGroup | None:
        """The topic has ``partitions`` partitions now: the group, if that is more than it
        knew."""
        group = self.groups.get((consumer, topic))
        if group is None or partitions <= group.partitions:
            return None
        group.partitions = partitions
        return group

    def group(self, consumer: str, topic: str) -> MemberGroup | None:
        return self.groups.get((consumer, topic))

    def member(self, consumer: str, topic: str, member: str) -> Member | None:
        group = self.groups.get((consumer, topic))
        return None if group is None else group.members.get(member)

    def wake_all(self) -> None:
        for group in self.groups.values():
            for member in group.members.values():
                member.wake()


class ReadCoordinator:
    """Members of every (consumer, topic) on this node, their targets and holdings."""

    def __init__(self) -> None:
        self._table = MemberTable()
        self._targets: dict[tuple[str, str], dict[int, str]] = {}

    def join(
        self,
        consumer: str,
        topic: str,
        partitions: int,
        member: str,
        wanted: Wanted,
        wake: Callable[[], None],
    ) -> None:
        group = self._table.join(consumer, topic, partitions, member, wanted, wake)
        self._rebalance((consumer, topic), group)

    def leave(self, consumer: str, topic: str, member: str) -> None:
        group = self._table.leave(consumer, topic, member)
        if group is None:
            return
        if not group.members:
            self._targets.pop((consumer, topic), None)
            return
        self._rebalance((consumer, topic), group)

    def targets(self, consumer: str, topic: str, member: str) -> set[int]:
        target = self._targets.get((consumer, topic), {})
        return {p for p, m in target.items() if m == member}

    def try_acquire(self, consumer: str, topic: str, member: str, partition: int) -> bool:
        """Take ``partition`` if it is this member's target and nobody else holds it."""
        group = self._table.group(consumer, topic)
        if group is None or self._targets.get((consumer, topic), {}).get(partition) != member:
            return False
        holder = group.holders().get(partition)
        if holder is not None and holder != member:
            return False
        group.members[member].held.add(partition)
        return True

    def release(self, consumer: str, topic: str, member: str, partition: int) -> None:
        group = self._table.group(consumer, topic)
        local = None if group is None else group.members.get(member)
        if group is None or local is None or partition not in local.held:
            return
        local.held.discard(partition)
        new_owner = self._targets.get((consumer, topic), {}).get(partition)
        if new_owner is not None and new_owner != member:
            group.members[new_owner].wake()

    def grown(self, consumer: str, topic: str, partitions: int) -> None:
        """The topic has `partitions` partitions now (more were added): balance those too."""
        group = self._table.grow(consumer, topic, partitions)
        if group is not None:
            self._rebalance((consumer, topic), group)

    def holders(self, consumer: str, topic: str) -> dict[int, str]:
        group = self._table.group(consumer, topic)
        return {} if group is None else group.holders()

    def _rebalance(self, key: tuple[str, str], group: MemberGroup) -> None:
        # Balance from what is held, so the held partitions stay where they are if fair.
        current = dict(self._targets.get(key, {}))
        current.update(group.holders())
        wanted = {name: member.wanted for name, member in group.members.items()}
        self._targets[key] = balance(group.partitions, wanted, current)
        for member in group.members.values():
            member.wake()
