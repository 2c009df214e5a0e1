from __future__ import annotations

import pytest

from vdl.consensus import ProposalDropped, Role
from vdl.consensus.messages import AppendEntries, TimeoutNow

from .helpers import Net


def test_transfer_to_caught_up_follower() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    net.tick(1)
    leader.transfer_leader(2)
    net.settle()
    assert any(isinstance(m, TimeoutNow) and m.dst == 2 for m in net.sent)
    assert net.nodes[2].role is Role.LEADER
    assert leader.role is Role.FOLLOWER and leader.leader_id == 2


def test_transfer_waits_for_a_lagging_target_and_drops_proposals_meanwhile() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    net.drop = lambda m: isinstance(m, AppendEntries) and m.dst == 3
    leader.propose([b"x"])
    net.settle()
    net.heal()
    leader.transfer_leader(3)
    with pytest.raises(ProposalDropped):
        leader.propose([b"y"])
    net.settle()
    net.tick(2)
    assert net.nodes[3].role is Role.LEADER
    assert net.storages[3].log[:2] == net.storages[1].log[:2]


def test_transfer_is_abandoned_after_an_election_timeout() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    net.down.add(2)
    leader.transfer_leader(2)
    assert leader.lead_transferee == 2
    net.tick(11)
    assert leader.lead_transferee == 0
    leader.propose([b"ok"])
