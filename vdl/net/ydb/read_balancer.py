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
class _Group:
    partitions: int
    members: dict[str, Wanted] = field(default_factory=dict)
    wake: dict[str, Callable[[], None]] = field(default_factory=dict)
    target: dict[int, str] = field(default_factory=dict)
    owner: dict[int, str] = field(default_factory=dict)


class ReadCoordinator:
    """Members of every (consumer, topic) on this node, their targets and holdings."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], _Group] = {}

    def join(
        self,
        consumer: str,
        topic: str,
        partitions: int,
        member: str,
        wanted: Wanted,
        wake: Callable[[], None],
    ) -> None:
        group = self._groups.setdefault((consumer, topic), _Group(partitions))
        group.partitions = max(group.partitions, partitions)
        group.members[member] = wanted
        group.wake[member] = wake
        self._rebalance(group)

    def leave(self, consumer: str, topic: str, member: str) -> None:
        group = self._groups.get((consumer, topic))
        if group is None or member not in group.members:
            return
        del group.members[member]
        del group.wake[member]
        for partition, owner in list(group.owner.items()):
            if owner == member:
                del group.owner[partition]
        if not group.members:
            del self._groups[(consumer, topic)]
            return
        self._rebalance(group)

    def targets(self, consumer: str, topic: str, member: str) -> set[int]:
        group = self._groups.get((consumer, topic))
        if group is None:
            return set()
        return {p for p, m in group.target.items() if m == member}

    def try_acquire(self, consumer: str, topic: str, member: str, partition: int) -> bool:
        """Take ``partition`` if it is this member's target and nobody else holds it."""
        group = self._groups.get((consumer, topic))
        if group is None or group.target.get(partition) != member:
            return False
        holder = group.owner.get(partition)
        if holder is not None and holder != member:
            return False
        group.owner[partition] = member
        return True

    def release(self, consumer: str, topic: str, member: str, partition: int) -> None:
        group = self._groups.get((consumer, topic))
        if group is None or group.owner.get(partition) != member:
            return
        del group.owner[partition]
        new_owner = group.target.get(partition)
        if new_owner is not None and new_owner != member:
            group.wake[new_owner]()

    def grown(self, consumer: str, topic: str, partitions: int) -> None:
        """The topic has `partitions` partitions now (more were added): balance those too."""
        group = self._groups.get((consumer, topic))
        if group is not None and partitions > group.partitions:
            group.partitions = partitions
            self._rebalance(group)

    def holders(self, consumer: str, topic: str) -> dict[int, str]:
        group = self._groups.get((consumer, topic))
        return dict(group.owner) if group is not None else {}

    def _rebalance(self, group: _Group) -> None:
        # Balance from what is held, so the held partitions stay where they are if fair.
        current = dict(group.target)
        current.update(group.owner)
        group.target = balance(group.partitions, group.members, current)
        for wake in group.wake.values():
            wake()
