"""Leadership gossip: the wire body and the table of freshest claims."""

from __future__ import annotations

import pytest

from vdl.cluster.leader_gossip import (
    GossipError,
    LeaderClaim,
    LeaderTable,
    decode_claims,
    decode_gossip,
    digest,
    encode_claims,
    encode_refresh,
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


def test_a_refresh_keeps_the_list_it_names_fresh_and_no_other() -> None:
    """Between full lists a leader sends a few bytes naming the list it last sent: a
    receiver holding that list keeps trusting it; one holding another (or none) does not,
    and its entries expire as if nothing had come."""
    claims = [LeaderClaim(10, 4, (1, 2)), LeaderClaim(11, 2, (1,))]
    body = encode_claims(1, claims)
    assert decode_gossip(body) == (1, claims, digest(body))
    refresh = encode_refresh(1, body)
    assert len(refresh) == 12 and decode_gossip(refresh) == (1, None, digest(body))
    with pytest.raises(GossipError):
        decode_claims(refresh)
    table = LeaderTable(ttl_s=2.0)
    table.heard(1, claims, now=0.0, body_digest=digest(body))
    assert table.refresh(1, digest(body), now=1.5)
    assert table.leader_of(10, now=3.0) is not None and table.leader_of(11, now=3.0) is not None
    assert table.leader_of(10, now=3.6) is None
    other = encode_claims(1, claims[:1])
    assert not table.refresh(1, digest(other), now=3.0)
    assert not table.refresh(2, digest(body), now=3.0)
    # A newer full list from the same node replaces the digest the refreshes must name.
    table.heard(1, claims[:1], now=4.0, body_digest=digest(other))
    assert not table.refresh(1, digest(body), now=4.5)
    assert table.refresh(1, digest(other), now=5.5)
    assert table.leader_of(10, now=7.0) is not None and table.leader_of(11, now=7.0) is None
