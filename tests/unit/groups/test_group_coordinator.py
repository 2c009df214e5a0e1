"""The pure group state machine, driven call by call with explicit times."""

from __future__ import annotations

import pytest

from tests.unit.groups.harness import DELAY, GROUP, REBALANCE, SESSION, Harness, stable_group
from vdl.groups.coordinator import (
    Held,
    JoinResult,
    SyncResult,
)
from vdl.groups.group import GroupState
from vdl.log.error_codes import ErrorCode

# -- JoinGroup ---------------------------------------------------------------------------


def test_member_id_required_then_join_after_initial_delay() -> None:
    h = Harness()
    first = h.join(0)
    assert isinstance(first, JoinResult)
    assert first.error == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id == "c-1"
    assert h.state() is GroupState.EMPTY
    held = h.join(5, "c-1")
    assert isinstance(held, Held)
    assert h.state() is GroupState.PREPARING_REBALANCE
    h.tick(5 + DELAY - 1)
    assert held.ticket not in h.answers
    h.tick(5 + DELAY)
    result = h.join_answer(held)
    assert result.error == ErrorCode.NONE
    assert (result.generation, result.leader, result.protocol) == (1, "c-1", "range")
    assert result.members == (("c-1", None, b"m"),)
    assert h.state() is GroupState.COMPLETING_REBALANCE


def test_old_versions_get_their_id_without_member_id_required() -> None:
    h = Harness()
    held = h.join(0, v4=False)
    assert isinstance(held, Held)
    h.tick(DELAY)
    assert h.join_answer(held).member_id == "c-1"


def test_unknown_member_and_bad_session_timeout() -> None:
    h = Harness()
    assert h.join_answer(h.join(0, "nobody")).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.join_answer(h.join(0, session=10)).error == ErrorCode.INVALID_SESSION_TIMEOUT
    h.new_member(0)
    assert h.join_answer(h.join(0, "nobody")).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_pending_member_expires_if_it_never_rejoins() -> None:
    h = Harness()
    first = h.join_answer(h.join(0))
    h.tick(SESSION)
    late = h.join(SESSION + 1, first.member_id)
    assert h.join_answer(late).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_inconsistent_protocols_are_rejected() -> None:
    h = Harness()
    h.new_member(0, protocols=(("range", b""),))
    other = h.join(0, protocols=(("roundrobin", b""),))
    assert h.join_answer(other).error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    other_type = h.join(0, protocol_type="connect")
    assert h.join_answer(other_type).error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_chosen_by_vote() -> None:
    h = Harness()
    both = (("range", b"r"), ("roundrobin", b"rr"))
    rr_first = (("roundrobin", b"rr"), ("range", b"r"))
    helds = [
        h.new_member(0, client="a", protocols=both),
        h.new_member(0, client="b", protocols=rr_first),
        h.new_member(0, client="c", protocols=rr_first),
    ]
    h.tick(DELAY)
    results = [h.join_answer(x) for x in helds]
    assert {r.protocol for r in results} == {"roundrobin"}
    leader = next(r for r in results if r.member_id == r.leader)
    assert {m: meta for m, _, meta in leader.members} == {"a-1": b"rr", "b-2": b"rr", "c-3": b"rr"}
    assert all(r.members == () for r in results if r is not leader)


def test_initial_delay_extends_while_members_keep_arriving() -> None:
    h = Harness(delay=100)
    a = h.new_member(0, client="a")
    b = h.new_member(80, client="b")  # pushes the end to 180
    h.tick(100)
    assert a.ticket not in h.answers
    h.tick(180)
    assert h.join_answer(a).generation == h.join_answer(b).generation == 1


def test_rebalance_completes_when_every_member_rejoined() -> None:
    h = Harness()
    ids, gen = stable_group(h, 2)
    newcomer = h.new_member(1000, client="n")
    assert h.state() is GroupState.PREPARING_REBALANCE
    # Not complete until both old members rejoin; no waiting for the deadline after that.
    first = h.join(1001, ids[0])
    assert isinstance(first, Held)
    assert first.ticket not in h.answers
    second = h.join(1002, ids[1])
    results = [h.join_answer(x) for x in (first, second, newcomer)]
    assert {r.generation for r in results} == {gen + 1}
    assert h.state() is GroupState.COMPLETING_REBALANCE


def test_leader_keeps_its_role_across_rebalances() -> None:
    h = Harness()
    ids, _ = stable_group(h, 3)
    leader = ids[0]
    newcomer = h.new_member(1000, client="n")
    rejoins = [h.join(1001, m) for m in reversed(ids)]
    results = [h.join_answer(x) for x in [*rejoins, newcomer]]
    assert {r.leader for r in results} == {leader}
    assert len(next(r for r in results if r.member_id == leader).members) == 4


def test_members_that_do_not_rejoin_are_removed_at_the_rebalance_timeout() -> None:
    h = Harness()
    ids, gen = stable_group(h, 2)
    newcomer = h.new_member(1000, client="n")
    rejoined = h.join(1000, ids[1])
    # ids[0] (the leader) keeps heartbeating but never rejoins, although it is told to.
    for t in range(2000, 1000 + REBALANCE, 3000):
        assert h.core.heartbeat(t, GROUP, ids[0], gen) == ErrorCode.REBALANCE_IN_PROGRESS
        h.tick(t)
    h.tick(1000 + REBALANCE - 1)
    assert newcomer.ticket not in h.answers
    h.tick(1000 + REBALANCE)
    results = [h.join_answer(x) for x in (rejoined, newcomer)]
    assert {r.generation for r in results} == {gen + 1}
    # The old leader is gone, so the first remaining member leads.
    assert {r.leader for r in results} == {ids[1]}
    assert h.core.heartbeat(1000 + REBALANCE, GROUP, ids[0], gen + 1) == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )


def test_stable_follower_join_without_changes_gets_current_generation() -> None:
    h = Harness()
    ids, gen = stable_group(h, 2)
    again = h.join_answer(h.join(500, ids[1]))
    assert (again.error, again.generation, again.leader) == (ErrorCode.NONE, gen, ids[0])
    assert h.state() is GroupState.STABLE


def test_leader_join_or_changed_metadata_starts_a_rebalance() -> None:
    h = Harness()
    ids, _ = stable_group(h, 2)
    assert isinstance(h.join(500, ids[0]), Held)
    assert h.state() is GroupState.PREPARING_REBALANCE
    h2 = Harness()
    ids2, _ = stable_group(h2, 2)
    assert isinstance(h2.join(500, ids2[1], protocols=(("range", b"new"),)), Held)
    assert h2.state() is GroupState.PREPARING_REBALANCE


# -- SyncGroup ---------------------------------------------------------------------------


def test_followers_wait_for_the_leaders_assignment() -> None:
    h = Harness()
    helds = [h.new_member(0, client=f"c{i}") for i in range(3)]
    h.tick(DELAY)
    results = [h.join_answer(x) for x in helds]
    leader, gen = results[0].leader, results[0].generation
    followers = [r.member_id for r in results if r.member_id != leader]
    waiting = [h.sync(DELAY, m, gen) for m in followers]
    assert all(isinstance(w, Held) for w in waiting)
    assert not any(isinstance(w, Held) and w.ticket in h.answers for w in waiting)
    # The leader leaves one member out: it gets an empty assignment, not an error.
    mine = h.sync(DELAY, leader, gen, {leader: b"L", followers[0]: b"F0"})
    assert mine == SyncResult(ErrorCode.NONE, b"L", "consumer", "range")
    got = [h.answer(w) for w in waiting]
    assert [(r.error, r.assignment) for r in got if isinstance(r, SyncResult)] == [
        (ErrorCode.NONE, b"F0"),
        (ErrorCode.NONE, b""),
    ]
    assert h.state() is GroupState.STABLE
    assert h.sync(DELAY + 1, followers[0], gen) == SyncResult(
        ErrorCode.NONE, b"F0", "consumer", "range"
    )


def test_sync_checks_member_generation_and_state() -> None:
    h = Harness()
    ids, gen = stable_group(h, 2)
    assert h.answer(h.sync(500, "nobody", gen)).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.answer(h.sync(500, ids[1], gen + 7)).error == ErrorCode.ILLEGAL_GENERATION
    h.new_member(600, client="n")
    assert h.answer(h.sync(600, ids[1], gen)).error == ErrorCode.REBALANCE_IN_PROGRESS


def test_held_syncs_fail_when_a_rebalance_starts() -> None:
    h = Harness()
    helds = [h.new_member(0, client=f"c{i}") for i in range(2)]
    h.tick(DELAY)
    results = [h.join_answer(x) for x in helds]
    follower = next(r for r in results if r.member_id != r.leader)
    waiting = h.sync(DELAY, follower.member_id, follower.generation)
    assert isinstance(waiting, Held)
    h.new_member(DELAY + 1, client="late")
    assert h.answer(waiting).error == ErrorCode.REBALANCE_IN_PROGRESS


def test_missing_leader_sync_times_out_into_a_new_rebalance() -> None:
    h = Harness()
    helds = [h.new_member(0, client=f"c{i}") for i in range(2)]
    h.tick(DELAY)
    results = [h.join_answer(x) for x in helds]
    follower = next(r for r in results if r.member_id != r.leader)
    waiting = h.sync(DELAY, follower.member_id, follower.generation)
    h.tick(DELAY + REBALANCE)
    assert h.answer(waiting).error == ErrorCode.REBALANCE_IN_PROGRESS
    group = h.core.group(GROUP)
    assert group is not None
    assert list(group.members) == [follower.member_id]
    assert group.state is GroupState.PREPARING_REBALANCE


# -- Heartbeat, sessions, LeaveGroup -----------------------------------------------------


def test_heartbeat_checks() -> None:
    h = Harness()
    ids, gen = stable_group(h, 2)
    assert h.core.heartbeat(500, GROUP, ids[1], gen) == ErrorCode.NONE
    assert h.core.heartbeat(500, GROUP, ids[1], gen - 1) == ErrorCode.ILLEGAL_GENERATION
    assert h.core.heartbeat(500, GROUP, "nobody", gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.core.heartbeat(500, "other", ids[1], gen) == ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeats_keep_a_session_alive_and_silence_expires_it() -> None:
    h = Harness()
    ids, gen = stable_group(h, 2, now=0)
    for t in range(3000, 3 * SESSION, 3000):
        assert h.core.heartbeat(t, GROUP, ids[0], gen) == ErrorCode.NONE
        h.tick(t)
        if h.state() is not GroupState.STABLE:
            break
    # ids[1] went silent at DELAY: its session ended at DELAY + SESSION.
    assert h.state() is GroupState.PREPARING_REBALANCE
    group = h.core.group(GROUP)
    assert group is not None
    assert list(group.members) == [ids[0]]
    assert h.core.heartbeat(SESSION + 1000, GROUP, ids[0], gen) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoin = h.join(SESSION + 1000, ids[0])
    assert h.join_answer(rejoin).generation == gen + 1


def test_last_member_expiring_empties_the_group() -> None:
    h = Harness()
    stable_group(h, 1)
    h.tick(DELAY + SESSION)
    assert h.state() is GroupState.EMPTY
    assert h.core.next_deadline_ms() is None


def test_leave_single_and_batched() -> None:
    h = Harness()
    ids, gen = stable_group(h, 3)
    assert h.core.leave(500, GROUP, [ids[2]]) == [ErrorCode.NONE]
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.core.leave(500, GROUP, [ids[2], ids[1], "nobody"]) == [
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    h.collect()
    # The only member left rejoins and the rebalance completes at once.
    assert h.join_answer(h.join(600, ids[0])).generation == gen + 1
    assert h.core.leave(700, GROUP, [ids[0]]) == [ErrorCode.NONE]
    h.collect()
    assert h.state() is GroupState.EMPTY


def test_leaving_while_held_answers_the_held_join() -> None:
    h = Harness()
    held = h.new_member(0)
    assert h.core.leave(10, GROUP, ["c-1"]) == [ErrorCode.NONE]
    h.collect()
    assert h.join_answer(held).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.state() is GroupState.EMPTY


def test_close_answers_everything_held() -> None:
    h = Harness()
    held = h.new_member(0)
    h.core.close()
    h.collect()
    assert h.join_answer(held).error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.join_answer(h.join(1)).error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.state() is GroupState.DEAD


# -- commit rules ------------------------------------------------------------------------


def test_commit_rules() -> None:
    h = Harness()
    core = h.core
    # Standalone commits: accepted for an unknown or empty group, generation -1 only.
    assert core.check_commit(0, "solo", "", -1) == ErrorCode.NONE
    assert core.check_commit(0, "unknown", "m", 3) == ErrorCode.ILLEGAL_GENERATION
    helds = [h.new_member(0, client=f"c{i}") for i in range(2)]
    h.tick(DELAY)
    results = [h.join_answer(x) for x in helds]
    member, gen = results[0].member_id, results[0].generation
    assert core.check_commit(DELAY, GROUP, member, gen) == ErrorCode.REBALANCE_IN_PROGRESS
    ids, gen = [r.member_id for r in results], results[0].generation
    for m in ids[1:]:
        h.sync(DELAY, m, gen)
    h.sync(DELAY, results[0].leader, gen, {})
    assert core.check_commit(DELAY, GROUP, member, gen) == ErrorCode.NONE
    assert core.check_commit(DELAY, GROUP, member, gen - 1) == ErrorCode.ILLEGAL_GENERATION
    assert core.check_commit(DELAY, GROUP, "nobody", gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert core.check_commit(DELAY, GROUP, "", -1) == ErrorCode.UNKNOWN_MEMBER_ID
    # While preparing, current members may still commit what they are giving up.
    h.new_member(DELAY + 1, client="n")
    assert core.check_commit(DELAY + 1, GROUP, member, gen) == ErrorCode.NONE


@pytest.mark.parametrize("members", [1, 2, 5])
def test_every_held_request_is_answered_exactly_once(members: int) -> None:
    h = Harness()
    ids, _ = stable_group(h, members)
    # Half the members rejoin, the rest go silent; a newcomer and a duplicate join pile on.
    held: list[JoinResult | Held] = [h.new_member(500, client="x")]
    held += [h.join(600, m) for m in ids[: members // 2 + 1]]
    held.append(h.join(700, ids[0]))
    tickets = [x.ticket for x in held if isinstance(x, Held)]
    for t in range(1000, 1000 + 3 * REBALANCE, 1000):
        h.tick(t)
    assert all(t in h.answers for t in tickets)
    assert h.core.take_completions() == []
