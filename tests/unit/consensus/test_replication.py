from __future__ import annotations

from vdl.backends.api import EntryType
from vdl.consensus import HardState, RaftOptions, Role
from vdl.consensus.messages import AppendEntries, AppendResponse, VoteResponse
from vdl.consensus.progress import ProgressState

from .helpers import MemStorage, Net, entries_of, make_node


def test_proposals_replicate_and_apply_everywhere() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    first, last = leader.propose([b"a", b"b"])
    net.settle()
    net.tick(1)  # the heartbeat carries the new commit index
    for i in (1, 2, 3):
        payloads = [e.payload for e in net.applied[i] if e.type == EntryType.DATA]
        assert payloads == [b"a", b"b"], i
    assert (first, last) == (2, 3)


def test_many_proposals_between_readies_travel_in_one_append() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    for i in range(10):
        leader.propose([b"p%d" % i])
    rd = leader.ready()
    appends = [m for m in rd.messages if isinstance(m, AppendEntries)]
    assert sorted(m.dst for m in appends) == [2, 3]
    assert all(len(m.entries) == 10 for m in appends)
    assert len(rd.entries) == 10  # one write for the local log too


def test_follower_acknowledges_only_after_persist() -> None:
    follower = make_node(2, [1, 2, 3])
    follower.step(AppendEntries(1, 2, 1, 0, 0, 0, tuple(entries_of(1, 1))))
    rd = follower.ready()
    assert not rd.messages
    (ack,) = rd.messages_after_persist
    assert isinstance(ack, AppendResponse) and ack.index == 2 and not ack.reject
    assert [e.index for e in rd.entries] == [1, 2]


def test_leader_counts_itself_only_after_its_own_flush() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    net.down.add(3)
    leader.propose([b"x"])
    rd = leader.ready()  # the leader does not persist yet
    assert rd.entries and rd.messages
    leader.advance(rd)
    net.deliver(list(rd.messages))  # node 2 persists and acknowledges
    assert leader.progress[2].match == 2
    assert leader.commit_index == 1, "must not count the leader's unflushed entry"
    leader.on_persisted(2, leader.term)
    assert leader.commit_index == 2


def test_commit_by_two_followers_while_leader_flush_is_slow() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    leader.propose([b"x"])
    rd = leader.ready()
    leader.advance(rd)
    net.deliver(list(rd.messages))
    assert leader.commit_index == 2  # a majority (2 and 3) has it durable
    assert not leader.ready().committed_entries, "not applied before the local flush"


def test_entries_of_a_previous_term_are_not_committed_by_counting() -> None:
    # Raft figure 8: node 1 leads term 3 with an uncommitted term-2 entry at index 2.
    storage = MemStorage(entries_of(1, 2))
    storage.hard_state = HardState(term=2)
    leader = make_node(1, [1, 2, 3], storage, options=RaftOptions(pre_vote=False, quiesce=False))
    leader.campaign()
    rd = leader.ready()
    storage.write(rd)
    leader.advance(rd)
    leader.step(_vote(2, 1, leader.term))
    assert leader.role is Role.LEADER and leader.term == 3
    rd = leader.ready()
    storage.write(rd)
    leader.advance(rd)
    leader.on_persisted(3, 3)  # its NOOP at index 3
    # Node 2 acknowledges only up to the term-2 entry: a majority has index 2, yet no commit.
    leader.step(AppendResponse(2, 1, 3, index=2))
    assert leader.commit_index == 0
    leader.step(AppendResponse(2, 1, 3, index=3))
    assert leader.commit_index == 3


def _vote(src: int, dst: int, term: int) -> VoteResponse:
    return VoteResponse(src, dst, term, True)


def test_conflicting_follower_log_is_repaired_with_few_round_trips() -> None:
    # Follower 2 holds many entries of a stale term 2; leader 1 has term 3 entries there.
    leader_log = MemStorage(entries_of(1, 1, 3, 3, 3, 3, 3, 3, 3, 3))
    follower_log = MemStorage(entries_of(1, 1, *([2] * 30)))
    net = Net([1, 2, 3])
    for i, st in ((1, leader_log), (2, follower_log), (3, MemStorage(leader_log.log))):
        st.hard_state = HardState(term=3)
        net.add(make_node(i, [1, 2, 3], st), st)
    leader = net.elect(1)
    net.tick(1)
    assert net.storages[2].log == net.storages[1].log
    rejects = [m for m in net.sent if isinstance(m, AppendResponse) and m.reject and m.src == 2]
    assert len(rejects) <= 2, rejects
    assert leader.progress[2].state is ProgressState.REPLICATE


def test_short_follower_log_hint_skips_straight_to_its_end() -> None:
    follower = make_node(2, [1, 2, 3], MemStorage(entries_of(1, 1)))
    follower.step(AppendEntries(1, 2, 2, prev_index=50, prev_term=2, commit=10))
    (resp,) = follower.ready().messages_after_persist
    assert isinstance(resp, AppendResponse) and resp.reject
    assert (resp.hint_index, resp.hint_term) == (3, 0)


def test_inflight_window_bounds_unacknowledged_appends() -> None:
    net = Net([1, 2, 3], options=RaftOptions(max_inflight=2, max_append_bytes=1, quiesce=False))
    leader = net.elect(1)
    net.tick(1)
    assert leader.progress[2].state is ProgressState.REPLICATE
    leader.propose([b"a", b"b", b"c", b"d", b"e"])  # one entry per message (byte limit)
    rd = leader.ready()
    to_2 = [m for m in rd.messages if isinstance(m, AppendEntries) and m.dst == 2]
    assert len(to_2) == 2  # the window is full
    assert leader.progress[2].inflights.full()
    leader.advance(rd)
    ack = AppendResponse(2, 1, leader.term, index=to_2[0].entries[-1].index)
    leader.step(ack)
    rd = leader.ready()
    assert len([m for m in rd.messages if isinstance(m, AppendEntries) and m.dst == 2]) == 1


def test_lost_append_is_recovered_through_heartbeats() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    net.drop = lambda m: isinstance(m, AppendEntries) and m.dst == 3
    leader.propose([b"lost"])
    net.settle()
    net.heal()
    net.tick(3)
    assert net.storages[3].log == net.storages[1].log
    assert net.nodes[3].commit_index == leader.commit_index == 2
