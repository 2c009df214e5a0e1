"""Which replica should lead a partition, and whether its leader should hand over now.

Kafka's "preferred replica leader election": a partition's preferred leader is the first
replica of its assignment, and placement rotates first replicas over the nodes, so when
every partition is led by its preferred leader the leaders (their client traffic and
their leader-side disk writes) are spread evenly. Elections ignore this (a restarted node
leads nothing, and the survivors of a failure keep what they won), so a leader that is
not the preferred one hands leadership to it once that replica is healthy.

A topic's preferred DC (VDL 3.2) wins: the preferred leader is then the first replica
inside that DC, and no transfer ever takes leadership out of it.

Every transfer `leader_target` allows strictly improves the leader's `rank` (in the
preferred DC before outside it; the preferred leader before the other replicas), so for a
given assignment leadership cannot cycle between nodes, whatever the health reports say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def transfer_target(
    *,
    leader: int,
    preferred: str,
    dcs: Mapping[int, str],
    voters: frozenset[int],
    in_contact: frozenset[int],
    match: Mapping[int, int],
    commit_index: int,
) -> int | None:
    """The DC rule alone: the voter of the preferred DC leadership should move to, or None.

    Healthy means heard from within an election timeout (`in_contact`) and holding every
    committed entry (`match`), so it can take over at once and its election cannot fail for
    a stale log. Among several, the most caught-up one (then the lowest id) is picked. A
    leader already in the preferred DC never moves.
    """
    if not preferred or dcs.get(leader, "") == preferred:
        return None
    healthy = [
        node
        for node in voters
        if node != leader
        and dcs.get(node, "") == preferred
        and _healthy(node, voters, in_contact, match, commit_index)
    ]
    if not healthy:
        return None
    return min(healthy, key=lambda node: (-match.get(node, 0), node))


def _healthy(
    node: int,
    voters: frozenset[int],
    in_contact: frozenset[int],
    match: Mapping[int, int],
    commit_index: int,
) -> bool:
    return node in voters and node in in_contact and match.get(node, 0) >= commit_index


def preferred_leader(replicas: Sequence[int], preferred: str, dcs: Mapping[int, str]) -> int | None:
    """The first replica in the preferred DC, else (no preference, or no replica there) the
    first replica; None for an empty assignment."""
    if preferred:
        for node in replicas:
            if dcs.get(node, "") == preferred:
                return node
    return replicas[0] if replicas else None


def rank(node: int, best: int | None, preferred: str, dcs: Mapping[int, str]) -> tuple[int, int]:
    """How well `node` fits as leader; lower is better."""
    outside = 1 if preferred and dcs.get(node, "") != preferred else 0
    return outside, 0 if node == best else 1


def leader_target(
    *,
    leader: int,
    replicas: Sequence[int],
    preferred: str,
    dcs: Mapping[int, str],
    voters: frozenset[int],
    in_contact: frozenset[int],
    match: Mapping[int, int],
    commit_index: int,
) -> int | None:
    """The voter leadership should move to, or None to stay.

    `replicas` is the assignment in order; empty turns balancing off and leaves only the
    DC rule (`transfer_target`). The preferred leader is taken when it is a voter in contact
    holding every committed entry; otherwise a leader outside the preferred DC still moves
    to any healthy voter inside it.
    """
    best = preferred_leader(replicas, preferred, dcs)
    if (
        best is not None
        and _healthy(best, voters, in_contact, match, commit_index)
        and rank(best, best, preferred, dcs) < rank(leader, best, preferred, dcs)
    ):
        return best
    return transfer_target(
        leader=leader,
        preferred=preferred,
        dcs=dcs,
        voters=voters,
        in_contact=in_contact,
        match=match,
        commit_index=commit_index,
    )
