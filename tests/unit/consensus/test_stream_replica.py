"""Log streams served by Raft groups: offsets, visibility, failover and truncation."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.unit.consensus.driver_cluster import OPTIONS, RAFT, MemoryNet
from vdl.backends.api import LogStoreOptions
from vdl.backends.registry import open_log_store, open_meta_store
from vdl.consensus.driver import GroupDriver
from vdl.consensus.options import RaftOptions
from vdl.consensus.router import GroupRouter
from vdl.consensus.stream_replica import StreamReplica, restart_commit_index
from vdl.log.error_codes import ErrorCode
from vdl.log.flusher import Flusher
from vdl.log.record_batch import Record, build_batch, iter_records, validate_produced_batch
from vdl.log.stream import Appended, LogStream, StreamError

GROUP = 42


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.002)


class Replica:
    def __init__(self, node_id: int, root: Path, net: MemoryNet, raft: RaftOptions = RAFT) -> None:
        self.node_id = node_id
        self.dir = root / f"n{node_id}"
        self.net = net
        self.raft = raft

    async def start(self, nursery: trio.Nursery) -> None:
        store = open_log_store("segment", self.dir / "log", LogStoreOptions())
        self.meta = open_meta_store(self.dir / "meta")
        flusher = Flusher()
        self.stream = LogStream("t-0", store, flusher, lambda: 1_000)
        self.replica = StreamReplica(self.stream, GROUP)
        commit = restart_commit_index(self.meta, GROUP, store)
        self.driver = GroupDriver(
            GROUP,
            self.node_id,
            frozenset({1, 2, 3}),
            store,
            self.meta,
            flusher,
            self.net.outbox(self.node_id),
            self.replica,
            raft=self.raft,
            options=OPTIONS,
            rng=random.Random(self.node_id),
            applied=commit,
        )
        self.replica.start(self.driver, commit)
        router = GroupRouter()
        router.add(GROUP, self.driver)
        self.net.routers[self.node_id] = router
        self.net.down.discard(self.node_id)
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        driver, scope, done = self.driver, self.scope, self.done

        async def run() -> None:
            with scope:
                async with trio.open_nursery() as inner:
                    await inner.start(flusher.run)
                    await inner.start(driver.run)
            await driver.close()
            done.set()

        nursery.start_soon(run)

    async def stop(self) -> None:
        self.net.down.add(self.node_id)
        self.scope.cancel()
        await self.done.wait()
        await self.stream.close()
        self.meta.close()


def _append(stream: LogStream, value: bytes) -> Appended:
    batch = build_batch([Record(None, value, 1_000, [])])
    info = validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
    return stream.append(batch, info)


def _values(stream: LogStream) -> list[bytes]:
    out = []
    for batch in stream.read(0, 1 << 30):
        for record in iter_records(bytes(batch)):
            assert record.value is not None
            out.append(record.value)
    return out


async def _leader(nodes: dict[int, Replica]) -> Replica:
    with trio.fail_after(30):
        while True:
            leaders = [n for n in nodes.values() if n.driver.is_leader]
            if len(leaders) == 1:
                return leaders[0]
            await trio.sleep(0.05)


async def _hw(nodes: list[Replica], hw: int) -> None:
    with trio.fail_after(30):
        while not all(n.stream.high_watermark >= hw for n in nodes):
            await trio.sleep(0.05)


async def test_appends_on_the_leader_commit_everywhere_at_the_same_offsets(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    net = MemoryNet()
    nodes = {i: Replica(i, tmp_path, net) for i in (1, 2, 3)}
    async with trio.open_nursery() as nursery:
        for node in nodes.values():
            await node.start(nursery)
        leader = await _leader(nodes)
        follower = next(n for n in nodes.values() if n is not leader)
        with pytest.raises(StreamError) as info:
            _append(follower.stream, b"no")
        assert info.value.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        appended = [_append(leader.stream, b"v%d" % i) for i in range(20)]
        assert [a.base_offset for a in appended] == list(range(20))
        # Nothing is visible before a majority has it on disk.
        assert leader.stream.high_watermark == 0
        await leader.stream.wait_committed(appended[-1].last_offset)
        await _hw(list(nodes.values()), 20)
        expected = [b"v%d" % i for i in range(20)]
        for node in nodes.values():
            assert _values(node.stream) == expected
            assert node.stream.log_end_offset == 20
        for node in nodes.values():
            await node.stop()
        # After a restart of everyone the data and offsets are the same.
        for node in nodes.values():
            await node.start(nursery)
        leader = await _leader(nodes)
        more = _append(leader.stream, b"after")
        assert more.base_offset == 20
        await _hw(list(nodes.values()), 21)
        for node in nodes.values():
            assert _values(node.stream) == [*expected, b"after"]
        for node in nodes.values():
            await node.stop()


async def test_a_deposed_leaders_uncommitted_appends_fail_and_are_replaced(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    net = MemoryNet()
    nodes = {i: Replica(i, tmp_path, net) for i in (1, 2, 3)}
    async with trio.open_nursery() as nursery:
        for node in nodes.values():
            await node.start(nursery)
        old = await _leader(nodes)
        first = _append(old.stream, b"committed")
        await old.stream.wait_committed(first.last_offset)
        await _hw(list(nodes.values()), 1)
        net.isolated.add(old.node_id)
        lost = [_append(old.stream, b"lost%d" % i) for i in range(5)]
        failures: list[ErrorCode] = []

        async def wait(a: Appended) -> None:
            try:
                await old.stream.wait_committed(a.last_offset)
            except StreamError as exc:
                failures.append(exc.error)

        for a in lost:
            nursery.start_soon(wait, a)
        others = {i: n for i, n in nodes.items() if n is not old}
        new = await _leader(others)
        kept = [_append(new.stream, b"new%d" % i) for i in range(3)]
        assert kept[0].base_offset == 1
        await _hw(list(others.values()), 4)
        net.isolated.clear()
        await _hw([old], 4)
        with trio.fail_after(10):
            while len(failures) < 5:
                await trio.sleep(0.05)
        assert failures == [ErrorCode.NOT_LEADER_OR_FOLLOWER] * 5
        expected = [b"committed", b"new0", b"new1", b"new2"]
        for node in nodes.values():
            assert _values(node.stream) == expected
            assert node.stream.log_end_offset == 4
        # The old leader, now a follower, keeps counting offsets from the new log.
        leader = await _leader(nodes)
        nxt = _append(leader.stream, b"next")
        assert nxt.base_offset == 4
        await _hw(list(nodes.values()), 5)
        for node in nodes.values():
            await node.stop()


async def test_leader_durable_waits_for_the_leaders_flush_not_the_majority(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    net = MemoryNet()
    # Without check-quorum the cut-off leader stays leader however long its own flush
    # takes in real time (the mock clock jumps while a real fsync runs in its thread).
    raft = dataclasses.replace(RAFT, check_quorum=False)
    nodes = {i: Replica(i, tmp_path, net, raft) for i in (1, 2, 3)}
    async with trio.open_nursery() as nursery:
        for node in nodes.values():
            await node.start(nursery)
        leader = await _leader(nodes)
        first = _append(leader.stream, b"both")
        await leader.stream.wait_committed(first.last_offset)
        # Cut the followers off (not the leader: it must stay leader for a while).
        followers = [n for n in nodes.values() if n is not leader]
        net.isolated.update(n.node_id for n in followers)
        alone = _append(leader.stream, b"alone")
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
        await _hw(followers, 2)
        # A follower's entries from the leader count as durable there once flushed.
        assert all(n.stream.durable_end == 2 for n in followers)
        for node in nodes.values():
            await node.stop()
