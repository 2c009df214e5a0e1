"""Leadership gossip: the wire body and the table of freshest claims."""

from __future__ import annotations

import pytest

from vdl.cluster.leader_gossip import (
    GossipError,
    LeaderClaim,
    LeaderTable,
    decode_claims,
    encode_claims,
)


def test_claims_round_trip() -> None:
    claims = [LeaderClaim(5, 3, (1, 2, 4)), LeaderClaim(2**40, 7, ())]
    assert decode_claims(encode_claims(9, claims)) == (9, claims)
    assert decode_claims(encode_claims(1, [])) == (1, [])


@pytest.mark.parametrize("body", [b"", b"\x00\x00\x00\x01\x00\x00\x00\x01", b"x" * 9])
def test_bad_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(GossipError):
        decode_claims(body)


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(GossipError):
        decode_claims(encode_claims(1, [LeaderClaim(1, 1, (1,))]) + b"\x00")


def test_the_newest_term_wins_until_it_expires() -> None:
    table = LeaderTable(ttl_s=2.0)
    table.heard(1, [LeaderClaim(10, 4, (1, 2, 3))], now=0.0)
    known = table.leader_of(10, now=1.0)
    assert known is not None and (known.leader, known.term, known.isr) == (1, 4, (1, 2, 3))
    # A deposed leader that still believes it leads (an older term) is not believed...
    table.heard(2, [LeaderClaim(10, 3, (2,))], now=1.0)
    assert table.leader_of(10, now=1.5).leader == 1  # type: ignore[union-attr]
    # ...a newer term is, at once.
    table.heard(3, [LeaderClaim(10, 5, (2, 3))], now=1.6)
    assert table.leader_of(10, now=1.7).leader == 3  # type: ignore[union-attr]
    # A leader that stops announcing is forgotten after the TTL.
    assert table.leader_of(10, now=3.7) is None
    assert table.leader_of(11, now=0.0) is None


def test_a_node_withdraws_what_it_no_longer_claims() -> None:
    table = LeaderTable(ttl_s=2.0)
    table.heard(1, [LeaderClaim(10, 4, (1,)), LeaderClaim(11, 2, (1,))], now=0.0)
    table.heard(2, [LeaderClaim(12, 1, (2,))], now=0.0)
    table.heard(1, [LeaderClaim(11, 2, (1,))], now=0.5)
    assert table.leader_of(10, now=0.6) is None
    assert table.leader_of(11, now=0.6) is not None
    assert table.leader_of(12, now=0.6) is not None
