"""Offset retention: the pure decision with explicit times, the coordinator's part (the
Empty stamp, the Dead hold) and the service's sweep on a MockClock over an in-memory store."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import trio
import trio.testing

from tests.unit.groups.harness import DELAY, GROUP, Harness, stable_group
from tests.unit.groups.test_group_offsets import CountingMeta
from vdl.groups.coordinator import GroupConfig, JoinRequest, JoinResult, SyncResult
from vdl.groups.group import Group, GroupState
from vdl.groups.group_record import GroupRecord, GroupRecordStore, decode_record, encode_record
from vdl.groups.offsets import CommittedOffset, OffsetStore, encode_value, offset_key
from vdl.groups.retention import (
    Expiry,
    GroupStanding,
    decide,
    droppable_record,
    stale_offset_keys,
    standing,
)
from vdl.groups.service import GroupService, Waiter
from vdl.log.error_codes import ErrorCode

MINUTE = 60_000
RETENTION = 10 * MINUTE
TOPICS: dict[str, list[str]] = {"t": [], "u": []}


def empty_group(
    since: int | None, commits: dict[tuple[str, int], int], generation: int | None = 3
) -> GroupStanding:
    return GroupStanding("g", False, since, commits, generation)


# -- the decision -----------------------------------------------------------------------------


def test_offsets_of_an_empty_group_expire_retention_after_it_became_empty() -> None:
    group = empty_group(1_000, {("t", 0): 100, ("t", 1): 900})
    assert decide(group, TOPICS, 1_000 + RETENTION - 1, RETENTION) is None
    assert decide(group, TOPICS, 1_000 + RETENTION, RETENTION) == Expiry(
        "g", (("t", 0, 100), ("t", 1, 900)), drop_group=True, record_generation=3
    )


def test_a_commit_made_after_the_group_became_empty_ages_from_its_commit() -> None:
    group = empty_group(1_000, {("t", 0): 100, ("t", 1): 5_000})
    expiry = decide(group, TOPICS, 1_000 + RETENTION, RETENTION)
    assert expiry == Expiry("g", (("t", 0, 100),), drop_group=False)
    later = decide(group, TOPICS, 5_000 + RETENTION, RETENTION)
    assert later is not None and later.drop_group and len(later.offsets) == 2


def test_standalone_offsets_expire_one_by_one_from_their_commit_times() -> None:
    group = GroupStanding("g", False, None, {("t", 0): 0, ("u", 0): 7 * MINUTE})
    assert decide(group, TOPICS, RETENTION - 1, RETENTION) is None
    first = decide(group, TOPICS, RETENTION, RETENTION)
    assert first == Expiry("g", (("t", 0, 0),), drop_group=False)
    both = decide(group, TOPICS, 7 * MINUTE + RETENTION, RETENTION)
    assert both == Expiry("g", (("t", 0, 0), ("u", 0, 7 * MINUTE)), True, None)


def test_a_group_with_members_never_loses_offsets() -> None:
    group = GroupStanding("g", True, None, {("t", 0): 0}, 9)
    assert decide(group, TOPICS, 100 * RETENTION, RETENTION) is None


def test_a_declared_ydb_consumer_keeps_its_offsets_on_that_topic() -> None:
    group = empty_group(0, {("t", 0): 0, ("u", 0): 0}, None)
    topics = {"t": ["g", "other"], "u": ["other"]}
    # Offsets on `u` (where g is not declared) expire, so the group stays (it has offsets).
    assert decide(group, topics, 100 * RETENTION, RETENTION) == Expiry(
        "g", (("u", 0, 0),), drop_group=False
    )
    declared_everywhere = {"t": ["g"], "u": ["g"]}
    assert decide(group, declared_everywhere, 100 * RETENTION, RETENTION) is None


def test_offsets_of_a_deleted_topic_go_even_with_members() -> None:
    group = GroupStanding("g", True, None, {("gone", 0): 50, ("t", 0): 50}, 4)
    assert decide(group, TOPICS, 60, RETENTION) == Expiry("g", (("gone", 0, 50),), False)


def test_an_empty_group_without_offsets_goes_at_once() -> None:
    assert decide(empty_group(5, {}), TOPICS, 5, RETENTION) == Expiry("g", (), True, 3)
    # Nothing stored for it: only the coordinator's memory changes.
    assert decide(empty_group(5, {}, None), TOPICS, 5, RETENTION) == Expiry("g", (), True, None)
    assert Expiry("g", (), True, None).stores_nothing
    assert not Expiry("g", (), True, 3).stores_nothing


def test_standing_follows_the_coordinator_then_the_record() -> None:
    offsets = {("t", 0): CommittedOffset(5, commit_time_ms=77)}
    record = GroupRecord("g", 4, "consumer", None, None, (), empty_since_ms=1_000)
    assert standing("g", None, record, offsets) == GroupStanding(
        "g", False, 1_000, {("t", 0): 77}, 4
    )
    # The coordinator knows better than a record stored after it forgot the group.
    held = Harness()
    stable_group(held, 1)
    stale = held.core.take_records()[0]
    assert standing("g", None, stale, {}) == GroupStanding("g", False, None, {}, stale.generation)
    live = held.core.group(GROUP)
    assert live is not None
    assert standing("g", live, stale, offsets) is not None
    assert standing("g", live, stale, offsets).has_members  # type: ignore[union-attr]
    # An id handed out with MEMBER_ID_REQUIRED is a member about to join.
    pending = Group("g", pending={"m": 99})
    assert standing("g", pending, None, {}).has_members  # type: ignore[union-attr]
    assert standing("g", Group("g", state=GroupState.DEAD), None, {}) is None


def test_only_what_is_still_as_decided_is_removed() -> None:
    meta = CountingMeta()
    OffsetStore(meta).commit(
        "g",
        {
            ("t", 0): CommittedOffset(1, commit_time_ms=100),
            ("t", 1): CommittedOffset(2, commit_time_ms=300),
        },
    )
    record = GroupRecord("g", 4, "consumer", None, None, (), empty_since_ms=50)
    meta.put(b"groups/state/g", encode_record(record))
    expiry = Expiry("g", (("t", 0, 100), ("t", 1, 200), ("t", 2, 100)), True, 4)
    # t-1 was committed again after the decision; t-2 is gone already.
    assert stale_offset_keys(expiry, meta.get) == [offset_key("g", "t", 0)]
    assert droppable_record(expiry, meta.get) == b"groups/state/g"
    # A newer record stays; an older one goes (DeleteGroups decides on the newest generation).
    assert droppable_record(Expiry("g", (), True, 3), meta.get) is None
    assert droppable_record(Expiry("g", (), True, 5), meta.get) == b"groups/state/g"
    assert droppable_record(Expiry("g", (), False, None), meta.get) is None


# -- the coordinator ----------------------------------------------------------------------------


def test_becoming_empty_is_stamped_with_the_wall_clock_and_survives_a_load() -> None:
    h = Harness()
    ids, _ = stable_group(h, 1)
    (stable,) = h.core.take_records(wall_ms=111)
    assert stable.members and stable.empty_since_ms is None
    h.core.leave(DELAY + 1, GROUP, ids)
    (empty,) = h.core.take_records(wall_ms=222)
    assert empty.empty_since_ms == 222
    assert decode_record(encode_record(empty)).empty_since_ms == 222
    group = h.core.group(GROUP)
    assert group is not None and group.empty_since_ms == 222
    other = Harness()
    other.core.load(0, empty)
    loaded = other.core.group(GROUP)
    assert loaded is not None and loaded.empty_since_ms == 222
    # Joining again clears it; the next Empty gets a new stamp.
    held = other.new_member(1)
    assert loaded.empty_since_ms is None
    other.tick(1 + DELAY)
    other.core.leave(2 + DELAY, GROUP, [other.join_answer(held).member_id])
    (again,) = other.core.take_records(wall_ms=333)
    assert again.empty_since_ms == 333


def test_an_expiring_group_takes_no_joins_or_commits_until_released() -> None:
    h = Harness()
    assert h.core.begin_expiry(GROUP)  # unknown: held too
    refused = h.join(0)
    assert isinstance(refused, JoinResult)
    assert refused.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.core.check_commit(0, GROUP, "", -1) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    h.core.end_expiry(GROUP, forget=False)
    assert h.state() is GroupState.EMPTY
    assert h.core.begin_expiry(GROUP)
    h.core.end_expiry(GROUP, forget=True)
    assert h.core.group(GROUP) is None
    stable_group(h, 1, now=10)
    assert not h.core.begin_expiry(GROUP), "a group with members is never held"
    assert h.state() is GroupState.STABLE


# -- the service ----------------------------------------------------------------------------

EPOCH = 1_700_000_000_000
SESSION = 6_000
INTERVAL = MINUTE


def wall_clock() -> int:
    return EPOCH + math.floor(trio.current_time() * 1000)


def make_service(meta: CountingMeta, clock: Callable[[], int] = wall_clock) -> GroupService:
    counter = itertools.count(1)
    return GroupService(
        meta,
        GroupConfig(initial_rebalance_delay_ms=DELAY),
        wall_clock_ms=clock,
        new_member_id=lambda client: f"{client}-{next(counter)}",
    )


async def join_and_sync(service: GroupService) -> JoinResult:
    joined = service.join(
        JoinRequest(GROUP, "", "c", "", SESSION, SESSION, "consumer", (("range", b""),), False)
    )
    assert isinstance(joined, Waiter)
    result = await joined.wait()
    assert isinstance(result, JoinResult) and result.error == ErrorCode.NONE
    synced = service.sync(GROUP, result.member_id, result.generation, {result.member_id: b"a"})
    assert isinstance(synced, SyncResult) and synced.error == ErrorCode.NONE
    return result


def commit(service: GroupService, member: str, generation: int, topic: str = "t") -> None:
    assert service.check_commit(GROUP, member, generation) == ErrorCode.NONE
    assert service.commit_offsets(GROUP, {(topic, 0): (42, "", -1)}) is None


async def wait_until(condition: Callable[[], bool], limit_s: float) -> float:
    """Virtual seconds until `condition` holds (fails past `limit_s`)."""
    start = trio.current_time()
    with trio.fail_after(limit_s):
        while not condition():
            await trio.sleep(1)
    return trio.current_time() - start


async def test_a_group_that_left_loses_its_offsets_and_then_goes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    meta = CountingMeta()
    service = make_service(meta)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        await nursery.start(service.run_retention, lambda: TOPICS, RETENTION, INTERVAL)
        member = await join_and_sync(service)
        commit(service, member.member_id, member.generation)
        service.leave(GROUP, [member.member_id])
        left_at = wall_clock()
        stored = GroupRecordStore(meta).get(GROUP)
        assert stored is not None and stored.empty_since_ms == left_at
        batches = meta.batches
        waited = await wait_until(lambda: service.group(GROUP) is None, 2 * RETENTION / 1000)
        # Gone at the first sweep after the retention, not before.
        assert RETENTION / 1000 <= waited <= (RETENTION + INTERVAL) / 1000 + 1
        assert service.fetch_offsets(GROUP, None) == {}
        assert GroupRecordStore(meta).get(GROUP) is None
        assert meta.batches == batches + 1, "one batch for the sweep"
        service.stop()
        nursery.cancel_scope.cancel()


async def test_a_group_with_a_live_member_keeps_its_offsets(
    autojump_clock: trio.testing.MockClock,
) -> None:
    meta = CountingMeta()
    service = make_service(meta)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        await nursery.start(service.run_retention, lambda: TOPICS, RETENTION, INTERVAL)
        member = await join_and_sync(service)
        commit(service, member.member_id, member.generation)
        beating = trio.CancelScope()

        async def heartbeat() -> None:
            with beating:
                while True:
                    error = service.heartbeat(GROUP, member.member_id, member.generation)
                    assert error == ErrorCode.NONE
                    await trio.sleep(1)

        nursery.start_soon(heartbeat)
        await trio.sleep(3 * RETENTION / 1000)
        assert service.fetch_offsets(GROUP, [("t", 0)])[("t", 0)] is not None
        # Silent now: the session ends, the group is Empty, and the retention runs from then.
        beating.cancel()
        waited = await wait_until(lambda: service.group(GROUP) is None, 2 * RETENTION / 1000)
        assert (SESSION + RETENTION) / 1000 <= waited <= (SESSION + RETENTION + INTERVAL) / 1000 + 1
        assert service.fetch_offsets(GROUP, None) == {}
        service.stop()
        nursery.cancel_scope.cancel()


async def test_the_empty_stamp_outlives_a_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    meta = CountingMeta()
    first = make_service(meta)
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        member = await join_and_sync(first)
        commit(first, member.member_id, member.generation)
        first.leave(GROUP, [member.member_id])
        left_at = wall_clock()
        first.stop()
        nursery.cancel_scope.cancel()
    await trio.sleep(RETENTION / 2000)
    second = make_service(meta)
    assert second.load() == 1
    # Counted from when the group became Empty, not from the restart.
    await trio.sleep((left_at + RETENTION - wall_clock() - 1) / 1000)
    assert await second.sweep(TOPICS, RETENTION) == []
    await trio.sleep(0.001)
    (expiry,) = await second.sweep(TOPICS, RETENTION)
    assert expiry.drop_group and expiry.offsets == (("t", 0, left_at),)
    assert second.group(GROUP) is None and GroupRecordStore(meta).get(GROUP) is None
    second.stop()


async def test_declared_ydb_consumers_and_deleted_topics(
    autojump_clock: trio.testing.MockClock,
) -> None:
    meta = CountingMeta()
    service = make_service(meta)
    # YDB commits reach the store without the coordinator (vdl.net.ydb.offsets).
    OffsetStore(meta).commit("billing", {("orders", 0): CommittedOffset(7, commit_time_ms=EPOCH)})
    OffsetStore(meta).commit("billing", {("other", 0): CommittedOffset(8, commit_time_ms=EPOCH)})
    OffsetStore(meta).commit("kafka", {("gone", 0): CommittedOffset(9, commit_time_ms=EPOCH)})
    topics = {"orders": ["billing"], "other": []}
    await trio.sleep(10 * RETENTION / 1000)
    await service.sweep(topics, RETENTION)
    assert set(service.fetch_offsets("billing", None)) == {("orders", 0)}
    assert service.fetch_offsets("kafka", None) == {}
    service.stop()


class HeldReplicator:
    """Stands in for the metadata group: each expiry waits until released, then is
    applied to the store as every node would."""

    def __init__(self, meta: CountingMeta) -> None:
        self.meta = meta
        self.release = trio.Event()
        self.proposed: list[Expiry] = []
        self.error = ErrorCode.NONE

    def submit(self, group: str, offsets: object) -> object:
        raise AssertionError("no commits in this test")

    async def expire(self, expiry: Expiry) -> ErrorCode:
        self.proposed.append(expiry)
        await self.release.wait()
        if self.error == ErrorCode.NONE:
            deletes = stale_offset_keys(expiry, self.meta.get)
            record = droppable_record(expiry, self.meta.get)
            self.meta.write_batch({}, deletes + ([record] if record else []))
        return self.error


async def replicated_sweep(error: ErrorCode) -> tuple[GroupState | None, CountingMeta]:
    meta = CountingMeta()
    service = make_service(meta)
    replicator = HeldReplicator(meta)
    replicator.error = error
    service.replicator = replicator  # type: ignore[assignment]
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        member = await join_and_sync(service)
        meta.put(offset_key(GROUP, "t", 0), encode_value(CommittedOffset(1, commit_time_ms=EPOCH)))
        service.leave(GROUP, [member.member_id])
        await trio.sleep(2 * RETENTION / 1000)
        nursery.start_soon(service.sweep, TOPICS, RETENTION)
        await wait_until(lambda: bool(replicator.proposed), 5)
        # While the expiry is on its way, the group is Dead: no joins, no commits.
        group = service.group(GROUP)
        assert group is not None and group.state is GroupState.DEAD
        refused = service.join(
            JoinRequest(GROUP, "", "c", "", SESSION, SESSION, "consumer", (("range", b""),), False)
        )
        assert isinstance(refused, JoinResult)
        assert refused.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert service.check_commit(GROUP, "", -1) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        replicator.release.set()
        await trio.sleep(0.1)
        after = service.group(GROUP)
        state = None if after is None else after.state
        service.stop()
        nursery.cancel_scope.cancel()
    return state, meta


async def test_on_a_cluster_the_group_is_held_then_forgotten(
    autojump_clock: trio.testing.MockClock,
) -> None:
    state, meta = await replicated_sweep(ErrorCode.NONE)
    assert state is None
    assert GroupRecordStore(meta).get(GROUP) is None
    assert OffsetStore(meta).fetch_all(GROUP) == {}


async def test_on_a_cluster_a_failed_expiry_leaves_the_group_empty(
    autojump_clock: trio.testing.MockClock,
) -> None:
    state, meta = await replicated_sweep(ErrorCode.NOT_COORDINATOR)
    assert state is GroupState.EMPTY
    assert GroupRecordStore(meta).get(GROUP) is not None
    assert OffsetStore(meta).fetch_all(GROUP) != {}


async def test_on_a_cluster_each_group_is_decided_again_before_its_proposal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    meta = CountingMeta()
    service = make_service(meta)
    replicator = HeldReplicator(meta)
    service.replicator = replicator  # type: ignore[assignment]
    old = encode_value(CommittedOffset(1, commit_time_ms=EPOCH))
    meta.put(offset_key("a", "t", 0), old)
    meta.put(offset_key(GROUP, "t", 0), old)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        await trio.sleep(2 * RETENTION / 1000)
        assert [e.group_id for e in service.decide_expiries(TOPICS, RETENTION)] == ["a", GROUP]
        nursery.start_soon(service.sweep, TOPICS, RETENTION)
        await wait_until(lambda: bool(replicator.proposed), 5)
        # While the first group's expiry is on its way, a member joins the second.
        joining = service.join(
            JoinRequest(GROUP, "", "c", "", SESSION, SESSION, "consumer", (("range", b""),), False)
        )
        assert isinstance(joining, Waiter)
        replicator.release.set()
        await wait_until(lambda: service.group("a") is None, 5)
        await trio.sleep(1)
        assert [e.group_id for e in replicator.proposed] == ["a"]
        assert OffsetStore(meta).fetch_all(GROUP) != {}
        service.stop()
        nursery.cancel_scope.cancel()
