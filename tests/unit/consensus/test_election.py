from __future__ import annotations

from vdl.backends.api import EntryType
from vdl.consensus import HardState, RaftOptions, Role
from vdl.consensus.messages import RequestVote, VoteResponse

from .helpers import MemStorage, Net, entries_of, make_node, role


def test_single_node_elects_itself_and_commits_after_persist() -> None:
    net = Net([1])
    node = net.elect(1)
    assert node.term == 1
    assert node.commit_index == 1  # its NOOP, once persisted
    assert net.applied[1][0].type == EntryType.NOOP


def test_three_nodes_elect_one_leader_by_timeout() -> None:
    net = Net([1, 2, 3])
    net.tick(25)
    leaders = [n for n in net.nodes.values() if n.role is Role.LEADER]
    assert len(leaders) == 1
    leader = leaders[0]
    assert all(n.term == leader.term and n.leader_id == leader.id for n in net.nodes.values())
    assert all(n.commit_index == 1 for n in net.nodes.values())


def test_vote_refused_to_a_less_up_to_date_log() -> None:
    node = make_node(1, [1, 2, 3], MemStorage(entries_of(1, 2)))
    node.step(RequestVote(2, 1, 5, last_index=5, last_term=1))
    rd = node.ready()
    (resp,) = rd.messages_after_persist
    assert isinstance(resp, VoteResponse) and not resp.granted
    assert node.term == 5 and node.vote == 0


def test_real_vote_is_sent_only_after_persist() -> None:
    node = make_node(1, [1, 2, 3])
    node.step(RequestVote(2, 1, 1, last_index=0, last_term=0))
    rd = node.ready()
    assert rd.hard_state is not None and rd.hard_state.vote == 2
    assert not rd.messages and len(rd.messages_after_persist) == 1


def test_candidate_requests_votes_after_persisting_its_own() -> None:
    node = make_node(1, [1, 2, 3], options=RaftOptions(pre_vote=False, quiesce=False))
    node.campaign()
    rd = node.ready()
    assert node.role is Role.CANDIDATE
    assert rd.hard_state is not None and rd.hard_state.vote == 1 and rd.hard_state.term == 1
    assert not rd.messages
    assert {m.dst for m in rd.messages_after_persist} == {2, 3}


def test_pre_vote_keeps_a_partitioned_node_from_inflating_its_term() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    term = leader.term
    net.isolate(3)
    net.tick(100)
    assert net.nodes[3].term == term  # only pre-votes, which never bump terms
    assert net.nodes[3].role is Role.PRE_CANDIDATE
    net.heal()
    net.tick(5)
    assert net.leader() is leader and leader.term == term
    assert role(net.nodes[3]) is Role.FOLLOWER and net.nodes[3].leader_id == 1


def test_without_pre_vote_the_partitioned_node_disrupts() -> None:
    # The contrast that shows why pre-vote is on by default.
    net = Net([1, 2, 3], options=RaftOptions(pre_vote=False, check_quorum=False, quiesce=False))
    net.elect(1)
    net.isolate(3)
    net.tick(100)
    assert net.nodes[3].term > 5


def test_check_quorum_leader_steps_down_when_cut_off() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    net.isolate(1)
    net.tick(9)
    assert leader.role is Role.LEADER
    net.tick(12)
    assert leader.role is not Role.LEADER
    assert net.leader() is not None and net.leader() is not leader


def test_voters_ignore_vote_requests_while_they_hear_from_a_leader() -> None:
    net = Net([1, 2, 3])
    net.elect(1)
    follower = net.nodes[2]
    follower.step(RequestVote(3, 2, 9, last_index=100, last_term=9))
    assert follower.term == 1 and not follower.has_ready()


def test_pre_vote_grants_count_only_for_the_current_pre_campaign() -> None:
    node = make_node(1, [1, 2, 3], hard_state=HardState(term=3))
    node.campaign()  # pre-campaign for term 4
    node.step(VoteResponse(2, 1, 3, granted=True, pre_vote=True))  # from a pre-campaign for 3
    assert node.role is Role.PRE_CANDIDATE
    node.step(VoteResponse(2, 1, 4, granted=True, pre_vote=True))
    assert role(node) is Role.CANDIDATE and node.term == 4
