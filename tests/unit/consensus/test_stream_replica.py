"""Log streams served by Raft groups: offsets, visibility, failover and truncation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.unit.consensus.driver_cluster import RAFT, MemoryNet
from tests.unit.consensus.stream_nodes import (
    StreamNode,
    append,
    high_watermark,
    leader_of,
    start_nodes,
    values_from,
    wait_until,
)
from vdl.consensus.messages import HeartbeatResponse
from vdl.log.error_codes import ErrorCode
from vdl.log.record_batch import parse_batch_header
from vdl.log.stream import Appended, StreamError

GROUP = 42


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.002)


def _epochs(node: StreamNode) -> list[int]:
    """Every stored batch's partitionLeaderEpoch, checked against its entry's term."""
    store = node.stream.store
    epochs = []
    for index, header in store.data_headers():
        epoch = parse_batch_header(header).partition_leader_epoch
        assert epoch == store.term_at(index)
        epochs.append(epoch)
    return epochs


async def test_appends_on_the_leader_commit_everywhere_at_the_same_offsets(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    net = MemoryNet()
    async with trio.open_nursery() as nursery:
        nodes = await start_nodes(nursery, tmp_path, net, GROUP)
        leader = await leader_of(nodes)
        follower = next(n for n in nodes.values() if n is not leader)
        with pytest.raises(StreamError) as info:
            append(follower.stream, b"no")
        assert info.value.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        appended = [append(leader.stream, b"v%d" % i) for i in range(20)]
        assert [a.base_offset for a in appended] == list(range(20))
        # Nothing is visible before a majority has it on disk.
        assert leader.stream.high_watermark == 0
        await leader.stream.wait_committed(appended[-1].last_offset)
        first_term = leader.driver.term
        await high_watermark(nodes.values(), 20)
        expected = [b"v%d" % i for i in range(20)]
        for node in nodes.values():
            assert values_from(node.stream) == expected
            assert node.stream.log_end_offset == 20
            assert _epochs(node) == [leader.driver.term] * 20
        for node in nodes.values():
            await node.stop()
        # After a restart of everyone the data and offsets are the same.
        for node in nodes.values():
            await node.start(nursery)
        leader = await leader_of(nodes)
        more = append(leader.stream, b"after")
        assert more.base_offset == 20
        await high_watermark(nodes.values(), 21)
        for node in nodes.values():
            assert values_from(node.stream) == [*expected, b"after"]
        # Each batch carries the term of its entry as its partitionLeaderEpoch.
        assert leader.driver.term > first_term
        assert _epochs(leader) == [first_term] * 20 + [leader.driver.term]
        for node in nodes.values():
            await node.stop()


async def test_a_deposed_leaders_uncommitted_appends_fail_and_are_replaced(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    net = MemoryNet()
    async with trio.open_nursery() as nursery:
        nodes = await start_nodes(nursery, tmp_path, net, GROUP)
        old = await leader_of(nodes)
        first = append(old.stream, b"committed")
        await old.stream.wait_committed(first.last_offset)
        await high_watermark(nodes.values(), 1)
        net.isolated.add(old.node_id)
        lost = [append(old.stream, b"lost%d" % i) for i in range(5)]
        failures: list[ErrorCode] = []

        async def wait(a: Appended) -> None:
            try:
                await old.stream.wait_committed(a.last_offset)
            except StreamError as exc:
                failures.append(exc.error)

        for a in lost:
            nursery.start_soon(wait, a)
        others = {i: n for i, n in nodes.items() if n is not old}
        new = await leader_of(others)
        kept = [append(new.stream, b"new%d" % i) for i in range(3)]
        assert kept[0].base_offset == 1
        await high_watermark(others.values(), 4)
        net.isolated.clear()
        await high_watermark([old], 4)
        with trio.fail_after(10):
            while len(failures) < 5:
                await trio.sleep(0.05)
        assert failures == [ErrorCode.NOT_LEADER_OR_FOLLOWER] * 5
        expected = [b"committed", b"new0", b"new1", b"new2"]
        for node in nodes.values():
            assert values_from(node.stream) == expected
            assert node.stream.log_end_offset == 4
        # The old leader, now a follower, keeps counting offsets from the new log.
        leader = await leader_of(nodes)
        nxt = append(leader.stream, b"next")
        assert nxt.base_offset == 4
        await high_watermark(nodes.values(), 5)
        for node in nodes.values():
            await node.stop()


async def test_leader_durable_waits_for_the_leaders_flush_not_the_majority(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    net = MemoryNet()
    # Without check-quorum the cut-off leader stays leader however long its own flush
    # takes in real time (the mock clock jumps while a real fsync runs in its thread).
    raft = dataclasses.replace(RAFT, check_quorum=False)
    async with trio.open_nursery() as nursery:
        nodes = await start_nodes(nursery, tmp_path, net, GROUP, raft=raft)
        leader = await leader_of(nodes)
        first = append(leader.stream, b"both")
        await leader.stream.wait_committed(first.last_offset)
        # Cut the followers off (not the leader: it must stay leader for a while).
        followers = [n for n in nodes.values() if n is not leader]
        net.isolated.update(n.node_id for n in followers)
        alone = append(leader.stream, b"alone")
        with trio.fail_after(30):
            await leader.stream.wait_durable(alone.last_offset)  # acks=1
        assert leader.stream.durable_end == 2
        assert leader.stream.high_watermark == 1  # not committed, so not readable
        with trio.move_on_after(0.3) as waited:
            await leader.stream.wait_committed(alone.last_offset)  # acks=all
        assert waited.cancelled_caught
        net.isolated.clear()
        with trio.fail_after(10):
            await leader.stream.wait_committed(alone.last_offset)
        await high_watermark(followers, 2)
        # A follower's entries from the leader count as durable there once flushed.
        assert all(n.stream.durable_end == 2 for n in followers)
        for node in nodes.values():
            await node.stop()


async def test_a_term_past_the_int32_epoch_range_still_takes_writes(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    net = MemoryNet()
    async with trio.open_nursery() as nursery:
        nodes = await start_nodes(nursery, tmp_path, net, GROUP)
        leader = await leader_of(nodes)
        first = append(leader.stream, b"before")
        await high_watermark(nodes.values(), first.last_offset + 1)
        # A peer's message with a term no int32 partitionLeaderEpoch holds (a fuzzer sent
        # such terms): the leader steps down to it and the group elects a leader past it.
        peer = next(n for n in nodes.values() if n is not leader)
        huge = 2**40
        leader.driver.deliver(HeartbeatResponse(peer.node_id, leader.node_id, huge))
        await wait_until(
            lambda: any(n.driver.is_leader and n.driver.term > huge for n in nodes.values()),
            "a leader past the huge term",
        )
        leader = await leader_of(nodes)
        after = append(leader.stream, b"after")
        await high_watermark(nodes.values(), after.last_offset + 1)
        for node in nodes.values():
            assert values_from(node.stream) == [b"before", b"after"]
            *_, (index, header) = node.stream.store.data_headers()
            assert node.stream.store.term_at(index) > huge
            # The epoch stays at the largest an int32 holds: never lower than before.
            assert parse_batch_header(header).partition_leader_epoch == 2**31 - 1
        for node in nodes.values():
            await node.stop()
