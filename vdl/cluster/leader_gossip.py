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
u64 term, u8 ISR size and one u32 per ISR member. The full list goes out when it changes
and now and then; in between a refresh (count 0xFFFFFFFF, then the u32 CRC-32 of the last
full body) keeps a receiver that holds that very list trusting it, at a cost that does
not grow with the number of partitions.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

_HEAD = struct.Struct(">II")
_CLAIM = struct.Struct(">QQB")
_MEMBER = struct.Struct(">I")
_REFRESH = 0xFFFFFFFF
_DIGEST = struct.Struct(">I")


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


def digest(body: bytes) -> int:
    """What a refresh names a full claims body by."""
    return zlib.crc32(body)


def encode_refresh(node_id: int, full_body: bytes) -> bytes:
    return _HEAD.pack(node_id, _REFRESH) + _DIGEST.pack(digest(full_body))


def decode_gossip(body: bytes) -> tuple[int, list[LeaderClaim] | None, int]:
    """(sender, its claims or None for a refresh, the digest of the full body)."""
    if len(body) == _HEAD.size + _DIGEST.size:
        node_id, count = _HEAD.unpack_from(body, 0)
        if count == _REFRESH:
            return node_id, None, _DIGEST.unpack_from(body, _HEAD.size)[0]
    node_id, claims = decode_claims(body)
    return node_id, claims, digest(body)


def decode_claims(body: bytes) -> tuple[int, list[LeaderClaim]]:
    try:
        node_id, count = _HEAD.unpack_from(body, 0)
        if count == _REFRESH:
            raise GossipError("a refresh, not a list of claims")
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
        # Per sender: the digest of its last full list, and when a refresh confirmed it.
        self._digests: dict[int, int] = {}
        self._refreshed: dict[int, float] = {}

    def _fresh(self, known: KnownLeader, now: float) -> bool:
        heard = max(known.heard_at, self._refreshed.get(known.leader, known.heard_at))
        return now - heard <= self._ttl

    def refresh(self, node_id: int, body_digest: int, now: float) -> bool:
        """`node_id` still claims the list whose full body has this digest: if that is
        the one held here, all its entries are fresh again (True)."""
        if self._digests.get(node_id) != body_digest:
            return False
        self._refreshed[node_id] = now
        return True

    def heard(
        self,
        node_id: int,
        claims: Iterable[LeaderClaim],
        now: float,
        body_digest: int | None = None,
    ) -> None:
        """`claims` is everything `node_id` leads now: what it no longer claims is gone."""
        if body_digest is None:
            self._digests.pop(node_id, None)
        else:
            self._digests[node_id] = body_digest
        self._refreshed[node_id] = now
        claims = list(claims)
        claimed = {c.group_id for c in claims}
        for group_id in [
            g for g, k in self._known.items() if k.leader == node_id and g not in claimed
        ]:
            del self._known[group_id]
        for claim in claims:
            current = self._known.get(claim.group_id)
            if current is None or claim.term >= current.term or not self._fresh(current, now):
                self._known[claim.group_id] = KnownLeader(node_id, claim.term, claim.isr, now)

    def leader_of(self, group_id: int, now: float) -> KnownLeader | None:
        known = self._known.get(group_id)
        if known is None or not self._fresh(known, now):
            return None
        return known

    def forget(self, group_id: int) -> None:
        self._known.pop(group_id, None)
