"""The Trio driver on a MockClock: timers fire, held requests complete, stop answers all."""

from __future__ import annotations

import itertools

import trio
import trio.testing

from tests.unit.groups.test_group_offsets import CountingMeta
from vdl.groups.coordinator import GroupConfig, JoinRequest, JoinResult, SyncResult
from vdl.groups.group import GroupState
from vdl.groups.service import GroupService, Waiter
from vdl.log.error_codes import ErrorCode

DELAY_MS = 3000
SESSION_MS = 6000


def make_service() -> GroupService:
    counter = itertools.count(1)
    return GroupService(
        CountingMeta(),
        GroupConfig(initial_rebalance_delay_ms=DELAY_MS),
        wall_clock_ms=lambda: 1234,
        new_member_id=lambda client: f"{client}-{next(counter)}",
    )


def request(member_id: str = "", client: str = "c") -> JoinRequest:
    return JoinRequest(
        group_id="g",
        member_id=member_id,
        client_id=client,
        client_host="",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=60_000,
        protocol_type="consumer",
        protocols=(("range", b""),),
        require_known_member_id=True,
    )


async def join(service: GroupService, client: str) -> JoinResult:
    first = service.join(request(client=client))
    assert isinstance(first, JoinResult)
    assert first.error == ErrorCode.MEMBER_ID_REQUIRED
    second = service.join(request(first.member_id, client))
    assert isinstance(second, Waiter)
    result = await second.wait()
    assert isinstance(result, JoinResult)
    return result


async def test_initial_delay_and_session_expiry_run_on_the_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # pytest-trio's autojump_clock is MockClock(autojump_threshold=0): time jumps to the
    # next deadline as soon as every task is blocked.
    service = make_service()
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        start = trio.current_time()
        results: list[JoinResult] = []

        async def member(client: str) -> None:
            results.append(await join(service, client))

        async with trio.open_nursery() as members:
            members.start_soon(member, "a")
            members.start_soon(member, "b")
        # Both joins were held for the initial delay and completed together.
        # (The driver wakes half a millisecond after a deadline, see GroupService.run.)
        assert DELAY_MS / 1000 <= trio.current_time() - start < DELAY_MS / 1000 + 0.001
        assert {r.generation for r in results} == {1}
        leader = results[0].leader
        follower = next(r.member_id for r in results if r.member_id != leader)
        held = service.sync("g", follower, 1, {})
        assert isinstance(held, Waiter)
        done = service.sync("g", leader, 1, {leader: b"L", follower: b"F"})
        assert done == SyncResult(ErrorCode.NONE, b"L", "consumer", "range")
        assert await held.wait() == SyncResult(ErrorCode.NONE, b"F", "consumer", "range")
        # Only the leader heartbeats; the follower's session runs out on the clock.
        synced_at = trio.current_time()
        while service.heartbeat("g", leader, 1) == ErrorCode.NONE:
            await trio.sleep(0.5)
        elapsed = trio.current_time() - synced_at
        assert SESSION_MS / 1000 <= elapsed <= SESSION_MS / 1000 + 0.5
        group = service.group("g")
        assert group is not None
        assert group.state is GroupState.PREPARING_REBALANCE
        assert list(group.members) == [leader]
        service.stop()


async def test_stop_answers_held_joins_and_ends_run() -> None:
    service = make_service()
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        first = service.join(request())
        assert isinstance(first, JoinResult)
        held = service.join(request(first.member_id))
        assert isinstance(held, Waiter)
        service.stop()
        result = await held.wait()
        assert isinstance(result, JoinResult)
        assert result.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    # run() returned by itself: the nursery closed without a cancel.


async def test_commit_stamps_wall_clock_and_fetches_back() -> None:
    service = make_service()
    assert service.check_commit("solo", "", -1) == ErrorCode.NONE
    service.commit_offsets("solo", {("t", 0): (10, "m", -1)})
    fetched = service.fetch_offsets("solo", None)
    assert [(tp, c.offset, c.commit_time_ms) for tp, c in fetched.items() if c] == [
        (("t", 0), 10, 1234)
    ]
    assert service.fetch_offsets("solo", [("t", 1)]) == {("t", 1): None}
