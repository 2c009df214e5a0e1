"""Static membership (KIP-345) in the pure coordinator: ids bound to group instance ids."""

from __future__ import annotations

from tests.unit.groups.harness import DELAY, GROUP, REBALANCE, SESSION, Harness
from vdl.groups.coordinator import Held, JoinResult, SyncResult
from vdl.groups.group import GroupState
from vdl.log.error_codes import ErrorCode


def static_group(
    h: Harness, instances: list[str], now: int = 0, session: int = SESSION
) -> tuple[dict[str, str], int]:
    """Static members joined and synced; returns (instance -> member id, generation)."""
    helds = {i: h.join(now, client=i, instance=i, session=session) for i in instances}
    assert all(isinstance(x, Held) for x in helds.values()), "static members skip KIP-394"
    h.tick(now + DELAY)
    results = {i: h.join_answer(held) for i, held in helds.items()}
    ids = {i: r.member_id for i, r in results.items()}
    generation = next(iter(results.values())).generation
    leader = next(iter(results.values())).leader
    for i, member_id in ids.items():
        if member_id != leader:
            h.sync(now + DELAY, member_id, generation, instance=i)
    assignments = {m: f"part-of-{i}".encode() for i, m in ids.items()}
    assert isinstance(h.sync(now + DELAY, leader, generation, assignments), SyncResult)
    assert h.state() is GroupState.STABLE
    return ids, generation


def test_static_member_joins_without_member_id_required() -> None:
    h = Harness()
    ids, generation = static_group(h, ["a", "b"])
    group = h.core.group(GROUP)
    assert group is not None
    assert group.static_members == {"a": ids["a"], "b": ids["b"]}
    assert generation == 1


def test_restarted_static_follower_gets_its_assignment_back_without_rebalance() -> None:
    h = Harness()
    ids, generation = static_group(h, ["a", "b"])
    leader = h.core.group(GROUP).leader  # type: ignore[union-attr]
    follower = next(i for i, m in ids.items() if m != leader)
    now = DELAY + 1000
    rejoined = h.join(now, client=follower, instance=follower)
    assert isinstance(rejoined, JoinResult)
    assert rejoined.error == ErrorCode.NONE
    assert rejoined.generation == generation
    assert rejoined.member_id != ids[follower]
    assert h.state() is GroupState.STABLE
    synced = h.sync(now, rejoined.member_id, generation, instance=follower)
    assert isinstance(synced, SyncResult)
    assert synced.assignment == f"part-of-{follower}".encode()
    # The old incarnation is fenced everywhere.
    assert h.core.heartbeat(now, GROUP, ids[follower], generation, follower) == (
        ErrorCode.FENCED_INSTANCE_ID
    )
    old_sync = h.sync(now, ids[follower], generation, instance=follower)
    assert isinstance(old_sync, SyncResult)
    assert old_sync.error == ErrorCode.FENCED_INSTANCE_ID
    assert h.core.check_commit(now, GROUP, ids[follower], generation, follower) == (
        ErrorCode.FENCED_INSTANCE_ID
    )
    stale = h.join(now, ids[follower], client=follower, instance=follower)
    assert isinstance(stale, JoinResult)
    assert stale.error == ErrorCode.FENCED_INSTANCE_ID
    # The others were not disturbed.
    assert h.core.heartbeat(now, GROUP, leader, generation) == ErrorCode.NONE  # type: ignore[arg-type]


def test_restarted_static_leader_stays_leader_under_its_new_id() -> None:
    h = Harness()
    ids, generation = static_group(h, ["a", "b"])
    group = h.core.group(GROUP)
    assert group is not None
    old_leader = group.leader
    instance = next(i for i, m in ids.items() if m == old_leader)
    rejoined = h.join(DELAY + 5, client=instance, instance=instance)
    assert isinstance(rejoined, JoinResult)
    assert rejoined.error == ErrorCode.NONE
    assert rejoined.leader == rejoined.member_id == group.leader
    assert {m for m, _, _ in rejoined.members} == set(group.members)
    assert {i for _, i, _ in rejoined.members} == {"a", "b"}
    assert group.state is GroupState.STABLE and group.generation == generation


def test_static_rejoin_with_a_new_assignor_rebalances() -> None:
    h = Harness()
    _ids, generation = static_group(h, ["a"])
    held = h.join(DELAY + 5, client="a", instance="a", protocols=(("roundrobin", b"x"),))
    assert isinstance(held, Held)
    # The only member rejoined, so the new round completes at once.
    assert h.state() is GroupState.COMPLETING_REBALANCE
    result = h.join_answer(held)
    assert result.generation == generation + 1
    assert result.protocol == "roundrobin"


def test_absent_static_member_keeps_its_place_through_a_rebalance() -> None:
    h = Harness()
    long_session = 2 * REBALANCE  # static members run long sessions, to outlive restarts
    ids, generation = static_group(h, ["a", "b"], session=long_session)
    now = DELAY + 10
    # A dynamic member arrives; b is down (not rejoining) but its session still runs.
    newcomer = h.new_member(now, client="d")
    a_rejoin = h.join(now, ids["a"], client="a", instance="a", session=long_session)
    assert isinstance(a_rejoin, Held)
    h.tick(now + REBALANCE)  # the round ends at the rebalance timeout without b
    group = h.core.group(GROUP)
    assert group is not None
    assert ids["b"] in group.members, "a static member is not dropped for not rejoining"
    answer = h.join_answer(a_rejoin)
    assert answer.generation == generation + 1
    leader_answer = answer if answer.leader == answer.member_id else h.join_answer(newcomer)
    assert ids["b"] in {m for m, _, _ in leader_answer.members}
    # Its session (renewed when the round completed) then ends it.
    h.tick(now + REBALANCE + long_session)
    assert ids["b"] not in group.members
    assert "b" not in group.static_members


def test_group_of_absent_static_members_waits_rather_than_forming_an_empty_generation() -> None:
    h = Harness()
    ids, generation = static_group(h, ["a", "b"], session=2 * REBALANCE)
    now = DELAY + 10
    held = h.join(now, ids["a"], client="a", instance="a", session=2 * REBALANCE)
    # a (the leader) asked for a rebalance...
    assert isinstance(held, Held)
    h.core.leave(now + 1, GROUP, [ids["a"]], ["a"])  # ...then leaves; b never answers
    h.collect()
    group = h.core.group(GROUP)
    assert group is not None
    h.tick(now + REBALANCE)
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.generation == generation
    h.tick(now + 10 * REBALANCE)
    assert h.state() is GroupState.EMPTY and not group.members


def test_leave_by_instance_id() -> None:
    h = Harness()
    _ids, _ = static_group(h, ["a", "b"])
    now = DELAY + 1
    errors = h.core.leave(now, GROUP, ["", "wrong-id", ""], ["a", "b", "zz"])
    assert errors == [
        ErrorCode.NONE,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    group = h.core.group(GROUP)
    assert group is not None
    assert set(group.static_members) == {"b"}
    assert group.state is GroupState.PREPARING_REBALANCE


def test_known_member_id_with_unknown_instance_is_unknown() -> None:
    h = Harness()
    ids, _ = static_group(h, ["a"])
    result = h.join(DELAY + 1, ids["a"], client="a", instance="other")
    assert isinstance(result, JoinResult)
    assert result.error == ErrorCode.UNKNOWN_MEMBER_ID


def test_replacing_a_member_awaiting_its_join_fences_the_held_join() -> None:
    h = Harness()
    ids, _ = static_group(h, ["a", "b"])
    now = DELAY + 1
    held = h.join(now, ids["a"], client="a", instance="a")  # the leader asks to rebalance
    assert isinstance(held, Held)
    replaced = h.join(now + 1, client="a", instance="a")
    assert isinstance(replaced, Held)
    old = h.join_answer(held)
    assert old.error == ErrorCode.FENCED_INSTANCE_ID
