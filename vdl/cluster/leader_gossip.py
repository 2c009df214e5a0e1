"""Who leads the partition groups a node does not host, learnt from the leaders themselves.

With more nodes than replicas (5 nodes, RF 3) a node hosts only some partitions, yet
Kafka's Metadata from any node must name every partition's leader. Each node periodically
tells its peers, over the raft connections it already has, which groups it leads, at which
term and with which in-sync replicas; every node keeps the freshest claim per group.

Why gossip rather than the metadata group: leadership changes with every failover and is
only a hint (a client that reaches a non-leader is answered NOT_LEADER_OR_FOLLOWER and asks
again), so it need not be agreed on; putting it through group 0 would cost a replicated,
fsynced write per election and slow the failover it reports.

Wire body (big-endian): u32 sender node id, u32 claim count, then per claim u64 group id,
u64 term, u8 ISR size and one u32 per ISR member.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

_HEAD = struct.Struct(">II")
_CLAIM = struct.Struct(">QQB")
_MEMBER = struct.Struct(">I")


class GossipError(ValueError):
    """A gossip body that does not parse (ignored: gossip is only a hint)."""


@dataclass(frozen=True, slots=True)
class LeaderClaim:
    group_id: int
    term: int
    isr: tuple[int, ...]


def encode_claims(node_id: int, claims: Iterable[LeaderClaim]) -> bytes:
    items = list(claims)
    out = [_HEAD.pack(node_id, len(items))]
    for claim in items:
        isr = claim.isr[:255]
        out.append(_CLAIM.pack(claim.group_id, claim.term, len(isr)))
        out.extend(_MEMBER.pack(n) for n in isr)
    return b"".join(out)


def decode_claims(body: bytes) -> tuple[int, list[LeaderClaim]]:
    try:
        node_id, count = _HEAD.unpack_from(body, 0)
        pos = _HEAD.size
        claims = []
        for _ in range(count):
            group_id, term, size = _CLAIM.unpack_from(body, pos)
            pos += _CLAIM.size
            isr = tuple(_MEMBER.unpack_from(body, pos + 4 * i)[0] for i in range(size))
            pos += 4 * size
            claims.append(LeaderClaim(group_id, term, isr))
    except struct.error as exc:
        raise GossipError(str(exc)) from exc
    if pos != len(body):
        raise GossipError("trailing bytes after the claims")
    return node_id, claims


@dataclass(frozen=True, slots=True)
class KnownLeader:
    leader: int
    term: int
    isr: tuple[int, ...]
    heard_at: float


class LeaderTable:
    """The freshest leadership claim per group; a pure table (time is passed in).

    A claim of a higher term replaces the entry; one of the same term refreshes it (the
    same leader, re-announced); a lower term is stale unless the entry has expired (a
    leader that stopped announcing is presumed gone)."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl = ttl_s
        self._known: dict[int, KnownLeader] = {}

    def heard(self, node_id: int, claims: Iterable[LeaderClaim], now: float) -> None:
        """`claims` is everything `node_id` leads now: what it no longer claims is gone."""
        claims = list(claims)
        claimed = {c.group_id for c in claims}
        for group_id in [
            g for g, k in self._known.items() if k.leader == node_id and g not in claimed
        ]:
            del self._known[group_id]
        for claim in claims:
            current = self._known.get(claim.group_id)
            if current is None or claim.term >= current.term or now - current.heard_at > self._ttl:
                self._known[claim.group_id] = KnownLeader(node_id, claim.term, claim.isr, now)

    def leader_of(self, group_id: int, now: float) -> KnownLeader | None:
        known = self._known.get(group_id)
        if known is None or now - known.heard_at > self._ttl:
            return None
        return known

    def forget(self, group_id: int) -> None:
        self._known.pop(group_id, None)
