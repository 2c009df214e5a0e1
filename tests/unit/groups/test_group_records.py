"""Group records: taken at the right moments, stored, and loaded by the next coordinator."""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing

from tests.unit.groups.harness import DELAY, GROUP, SESSION, Harness, stable_group
from tests.unit.groups.test_group_offsets import CountingMeta
from vdl.groups.coordinator import GroupConfig, JoinRequest, JoinResult, SyncResult
from vdl.groups.group import GroupState
from vdl.groups.group_record import (
    GroupRecord,
    GroupRecordStore,
    MemberRecord,
    decode_record,
    encode_record,
)
from vdl.groups.service import GroupService, Waiter
from vdl.log.error_codes import ErrorCode


def test_record_taken_when_the_assignment_is_settled() -> None:
    h = Harness()
    ids, generation = stable_group(h, 2)
    records = h.core.take_records()
    assert len(records) == 1
    record = records[0]
    assert (record.group_id, record.generation, record.protocol) == (GROUP, generation, "range")
    assert {m.member_id: m.assignment for m in record.members} == {m: m.encode() for m in ids}
    assert h.core.take_records() == [], "taken once"


def test_no_record_while_rebalancing_and_one_when_empty() -> None:
    h = Harness()
    ids, generation = stable_group(h, 1)
    h.core.take_records()
    h.core.leave(DELAY + 1, GROUP, ids)
    records = h.core.take_records()
    assert [(r.generation, r.members) for r in records] == [(generation + 1, ())]


def test_record_taken_when_a_static_member_is_replaced() -> None:
    h = Harness()
    held = h.join(0, client="s", instance="s")
    h.tick(DELAY)
    first = h.join_answer(held)
    h.sync(DELAY, first.member_id, first.generation, {first.member_id: b"p0"})
    h.core.take_records()
    again = h.join(DELAY + 1, client="s", instance="s")
    assert isinstance(again, JoinResult) and again.error == ErrorCode.NONE
    (record,) = h.core.take_records()
    assert [(m.member_id, m.group_instance_id, m.assignment) for m in record.members] == [
        (again.member_id, "s", b"p0")
    ]
    assert record.leader == again.member_id


def sample_record() -> GroupRecord:
    return GroupRecord(
        group_id="orders-app",
        generation=7,
        protocol_type="consumer",
        protocol="range",
        leader="m1",
        members=(
            MemberRecord(
                "m1",
                None,
                "c1",
                "/127.0.0.1",
                10_000,
                30_000,
                "consumer",
                (("range", b"\x00\x01"), ("roundrobin", b"")),
                b"\x00\x02\xff",
            ),
            MemberRecord(
                "m2", "inst-2", "c2", "", 45_000, 300_000, "consumer", (("range", b"meta"),), b""
            ),
        ),
    )


def test_record_encoding_round_trips() -> None:
    record = sample_record()
    assert decode_record(encode_record(record)) == record


@pytest.mark.parametrize("raw", [b"[]", b"{}", b'{"group": "g"}', b"not json"])
def test_malformed_record_is_an_error(raw: bytes) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        decode_record(raw)


def test_loaded_group_carries_on_in_its_generation() -> None:
    h = Harness()
    record = sample_record()
    assert h.core.load(1000, record)
    group = h.core.group("orders-app")
    assert group is not None
    assert group.state is GroupState.STABLE and group.generation == 7
    assert group.static_members == {"inst-2": "m2"}
    assert h.core.heartbeat(1001, "orders-app", "m1", 7) == ErrorCode.NONE
    assert h.core.heartbeat(1001, "orders-app", "m2", 6) == ErrorCode.ILLEGAL_GENERATION
    synced = h.core.sync(1001, "orders-app", "m1", 7, {})
    assert isinstance(synced, SyncResult) and synced.assignment == b"\x00\x02\xff"
    assert h.core.check_commit(1001, "orders-app", "m2", 7, "inst-2") == ErrorCode.NONE
    # A member that stops heartbeating expires by its session.
    h.tick(1001 + 10_000)
    assert "m1" not in group.members
    assert not h.core.load(2000, record), "a group already held is newer than any record"


def test_loaded_empty_group_keeps_its_generation() -> None:
    h = Harness()
    h.core.load(0, GroupRecord("g", 4, "consumer", None, None, ()))
    group = h.core.group("g")
    assert group is not None and group.state is GroupState.EMPTY and group.generation == 4
    held = h.new_member(1)
    h.tick(1 + DELAY)
    assert h.join_answer(held).generation == 5


def _service(meta: CountingMeta) -> GroupService:
    counter = itertools.count(1)
    return GroupService(
        meta,
        GroupConfig(initial_rebalance_delay_ms=DELAY),
        wall_clock_ms=lambda: 0,
        new_member_id=lambda client: f"{client}-{next(counter)}",
    )


async def test_a_new_coordinator_on_the_same_store_keeps_the_members(
    autojump_clock: trio.testing.MockClock,
) -> None:
    meta = CountingMeta()
    first = _service(meta)
    joined = first.join(
        JoinRequest(GROUP, "", "c", "", SESSION, SESSION, "consumer", (("range", b""),), False)
    )
    assert isinstance(joined, Waiter)
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        result = await joined.wait()
        assert isinstance(result, JoinResult) and result.error == ErrorCode.NONE
        synced = first.sync(GROUP, result.member_id, result.generation, {result.member_id: b"a"})
        assert isinstance(synced, SyncResult) and synced.error == ErrorCode.NONE
        first.unload()  # leadership moved away
        assert next(iter(GroupRecordStore(meta).records())).generation == result.generation
        second = _service(meta)
        assert second.load() == 1
        error = second.heartbeat(GROUP, result.member_id, result.generation)
        assert error == ErrorCode.NONE
        again = second.sync(GROUP, result.member_id, result.generation, {})
        assert isinstance(again, SyncResult) and again.assignment == b"a"
        first.stop()
        second.stop()
        nursery.cancel_scope.cancel()
