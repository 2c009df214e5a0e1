"""Quiescence in the core: an idle group stops ticking and heartbeating, and what wakes it.

Stepped by hand through `Net` (messages delivered in order, writes durable at once), with
node liveness played by the test: `wake()` and `dead_peers` as a node's clock sets them.
"""

from __future__ import annotations

from vdl.consensus import RaftOptions, Role
from vdl.consensus.messages import (
    Heartbeat,
    HeartbeatResponse,
    Message,
    RequestVote,
    VoteResponse,
)

from .helpers import Net, role

QUIET = RaftOptions(election_tick=10, heartbeat_tick=1, max_inflight=8)


def quiet_net(ids: list[int] | None = None) -> Net:
    net = Net(ids or [1, 2, 3], options=QUIET)
    net.elect(1)
    net.tick(3)  # heartbeats answered, then the quiescing one
    return net


def test_an_idle_group_quiesces_and_then_sends_nothing() -> None:
    net = quiet_net()
    assert all(n.quiesced for n in net.nodes.values())
    quiescing = [m for m in net.sent if isinstance(m, Heartbeat) and m.quiesce]
    assert {m.dst for m in quiescing} == {2, 3} and all(m.commit == 1 for m in quiescing)
    sent = len(net.sent)
    net.tick(100)  # ten election timeouts: nobody campaigns, nobody heartbeats
    assert len(net.sent) == sent
    assert role(net.nodes[1]) is Role.LEADER and net.nodes[1].term == 1


def test_a_proposal_wakes_the_group_and_it_quiesces_again_once_replicated() -> None:
    net = quiet_net()
    leader = net.nodes[1]
    leader.propose([b"a"])
    assert not leader.quiesced
    net.settle()
    assert not net.nodes[2].quiesced and not net.nodes[3].quiesced  # the append woke them
    net.tick(3)
    assert all(n.quiesced and n.commit_index == 2 for n in net.nodes.values())
    assert [bytes(e.payload) for e in net.applied[3] if e.payload] == [b"a"]


def test_the_followers_answers_to_the_quiescing_heartbeat_leave_the_leader_asleep() -> None:
    net = quiet_net()
    leader = net.nodes[1]
    leader.step(HeartbeatResponse(2, 1, leader.term))
    assert leader.quiesced and not leader.has_ready()
    leader.step(HeartbeatResponse(2, 1, leader.term + 1))  # a newer term: not an answer
    assert not leader.quiesced and role(leader) is Role.FOLLOWER


def test_a_follower_that_missed_the_quiescing_heartbeat_wakes_the_leader() -> None:
    net = Net([1, 2, 3], options=QUIET)
    lost: list[Message] = []

    def drop(m: Message) -> bool:
        if isinstance(m, Heartbeat) and m.quiesce and m.dst == 3:
            lost.append(m)
            return True
        return False

    net.drop = drop
    net.elect(1)
    net.tick(2)
    net.drop = lambda m: False
    assert lost and net.nodes[1].quiesced and not net.nodes[3].quiesced
    # Node 3 times out and asks for (pre-)votes: the leader wakes, keeps its lease and
    # heartbeats again, and node 3 follows it; then the group quiesces again.
    net.tick(40)
    assert role(net.nodes[1]) is Role.LEADER and net.nodes[1].term == 1
    assert net.nodes[3].leader_id == 1
    assert all(n.quiesced for n in net.nodes.values())


def test_liveness_wakes_followers_of_a_dead_leader_and_they_elect() -> None:
    net = quiet_net()
    net.down.add(1)
    for i in (2, 3):
        net.nodes[i].dead_peers = frozenset({1})
        net.nodes[i].wake()
    net.tick(40)
    leader = net.leader()
    assert leader is not None and leader.id in (2, 3) and leader.term > 1


def test_without_a_wake_followers_of_a_dead_leader_stay_quiet() -> None:
    # What the liveness wake-up is for: nothing else would end this group's silence.
    net = quiet_net()
    net.down.add(1)
    net.tick(100)
    assert all(role(net.nodes[i]) is Role.FOLLOWER for i in (2, 3))
    assert net.nodes[2].term == 1


def test_a_quiesced_leader_cut_off_steps_down_once_liveness_wakes_it() -> None:
    net = quiet_net()
    leader = net.nodes[1]
    net.isolate(1)
    leader.dead_peers = frozenset({2, 3})
    leader.wake()
    assert not leader.quiesced
    net.tick(QUIET.election_tick + 1)
    assert role(leader) is Role.FOLLOWER  # check-quorum
    assert not leader.quiesced


def test_a_leader_does_not_quiesce_while_a_live_follower_is_silent() -> None:
    net = Net([1, 2, 3], options=QUIET)
    net.elect(1)
    net.down.add(3)
    net.nodes[1].propose([b"a"])
    net.tick(30)
    assert not net.nodes[1].quiesced  # node 3 counts as alive and does not answer
    # Once liveness holds node 3 for down, the other two are a majority and may rest.
    net.nodes[1].dead_peers = frozenset({3})
    net.nodes[2].dead_peers = frozenset({3})
    net.tick(QUIET.election_tick + 3)
    assert net.nodes[1].quiesced and net.nodes[2].quiesced
    # A majority held for down: no quiescence (check-quorum must be able to act).
    net2 = Net([1, 2, 3], options=QUIET)
    net2.elect(1)
    net2.down.update({2, 3})
    net2.nodes[1].propose([b"a"])
    net2.nodes[1].dead_peers = frozenset({2, 3})
    net2.tick(QUIET.election_tick * 3)
    assert not net2.nodes[1].quiesced and role(net2.nodes[1]) is Role.FOLLOWER


def test_a_restarted_follower_learns_of_the_quiesced_leader_from_its_wake_heartbeat() -> None:
    net = quiet_net()
    net.nodes[1].wake()  # liveness: node 3 restarted
    heartbeats = [m for m in net.nodes[1].ready().messages if isinstance(m, Heartbeat)]
    assert {m.dst for m in heartbeats} == {2, 3} and not any(m.quiesce for m in heartbeats)


def test_a_follower_with_a_live_leader_sleeps_through_other_members_news() -> None:
    """Another member restarting is the leader's business: a follower woken by it (or by
    that member's pre-vote) while its leader sleeps on would time out and campaign against
    a live leader, and the restarted member, knowing no leader yet, would grant it."""
    net = quiet_net()
    follower = net.nodes[2]
    follower.wake()  # liveness: node 3 restarted; the leader, node 1, is up
    assert follower.quiesced
    follower.step(RequestVote(3, 2, follower.term + 1, 1, 1, pre_vote=True))
    assert follower.quiesced  # refused in lease, asleep
    granted = [m for m in follower.ready().messages if isinstance(m, VoteResponse) and m.granted]
    assert not granted
    net.tick(100)
    assert role(net.nodes[1]) is Role.LEADER and net.nodes[1].term == 1
    assert all(n.term == 1 for n in net.nodes.values())
