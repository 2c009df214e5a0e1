"""Retention on replicated streams and snapshots for a follower that needs what it deleted:
the follower is down while the leader's retention removes the segments it would need; it
restarts, takes the leader's log as a snapshot, and carries on replicating."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.unit.consensus.driver_cluster import OPTIONS, RAFT, MemoryNet
from tests.unit.consensus.test_stream_replica import _append, _values
from vdl.backends.api import LogRetention, LogStoreOptions, SnapshotStaging
from vdl.backends.registry import open_log_store, open_meta_store
from vdl.consensus.driver import GroupDriver
from vdl.consensus.router import GroupRouter
from vdl.consensus.snapshot_transfer import SnapshotData, receive_snapshot, serve_snapshot
from vdl.consensus.snapshot_wire import REQUEST, decode_request
from vdl.consensus.state import SnapshotMeta
from vdl.consensus.stream_replica import StreamReplica, restart_commit_index
from vdl.log.flusher import Flusher
from vdl.log.record_batch import iter_records
from vdl.log.stream import LogStream

GROUP = 43
# Small segments, and retention that keeps only a few closed ones.
STORE = LogStoreOptions(segment_bytes=1500, retention=LogRetention(max_bytes=6000))


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.002)


class Replica:
    def __init__(self, node_id: int, root: Path, net: MemoryNet, all_: dict[int, Replica]):
        self.node_id = node_id
        self.dir = root / f"n{node_id}"
        self.net = net
        self.all = all_

    async def _fetch(
        self, leader: int, group: int, snapshot: SnapshotMeta, staging: SnapshotStaging
    ) -> SnapshotData:
        # Over a memory stream, from the leader's driver (the TCP pull is tested elsewhere).
        source = self.all[leader].driver
        follower_end, leader_end = trio.testing.memory_stream_pair()

        async def serve() -> None:
            request = await leader_end.receive_some(REQUEST.size)
            _, upto, takes_files = decode_request(bytes(request))
            await serve_snapshot(leader_end, source, upto, takes_files=takes_files)
            await leader_end.aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            data = await receive_snapshot(follower_end, group, snapshot, staging)
            await follower_end.aclose()
        return data

    async def start(self, nursery: trio.Nursery) -> None:
        store = open_log_store("segment", self.dir / "log", STORE)
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
            raft=RAFT,
            options=OPTIONS,
            rng=random.Random(self.node_id),
            applied=commit,
            fetch_snapshot=self._fetch,
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


def _from(stream: LogStream, offset: int) -> list[bytes]:
    out = []
    for batch in stream.read(offset, 1 << 30):
        for record in iter_records(bytes(batch)):
            if record.offset >= offset:
                assert record.value is not None
                out.append(record.value)
    return out


async def test_a_follower_behind_retention_catches_up_through_a_snapshot(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    net = MemoryNet()
    nodes: dict[int, Replica] = {}
    nodes.update({i: Replica(i, tmp_path, net, nodes) for i in (1, 2, 3)})
    async with trio.open_nursery() as nursery:
        for node in nodes.values():
            await node.start(nursery)
        leader = await _leader(nodes)
        for i in range(10):
            _append(leader.stream, b"early%d" % i)
        await _hw(list(nodes.values()), 10)
        lagging = next(n for n in nodes.values() if n is not leader)
        await lagging.stop()
        others = [n for n in nodes.values() if n is not lagging]
        for i in range(200):
            _append(leader.stream, b"late%d" % i)
        await _hw(others, 210)
        lagging_end = lagging.driver.core.log.last_index()
        for node in others:
            assert node.stream.apply_retention() > 0
        # The leader no longer holds what the lagging follower needs next.
        assert leader.driver.core.log.first_index() > lagging_end + 1
        start = leader.stream.log_start_offset
        assert start > 10
        await lagging.start(nursery)
        await _hw([lagging], 210)
        assert lagging.driver.snapshots_installed == 1
        assert lagging.driver.snapshot_files_installed > 0  # closed segments went as files
        assert lagging.stream.log_start_offset == start
        assert _from(lagging.stream, start) == _from(leader.stream, start)
        # Replication goes on after the snapshot, and everyone restarts from disk.
        more = [_append(leader.stream, b"after%d" % i) for i in range(5)]
        await leader.stream.wait_committed(more[-1].last_offset)
        await _hw(list(nodes.values()), 215)
        for node in nodes.values():
            await node.stop()
        for node in nodes.values():
            await node.start(nursery)
        leader = await _leader(nodes)
        _append(leader.stream, b"last")
        await _hw(list(nodes.values()), 216)
        expected = _from(leader.stream, start)
        assert expected[-1] == b"last" and len(expected) == 216 - start
        for node in nodes.values():
            assert _from(node.stream, start) == expected
        assert _values(nodes[1].stream)[-1] == b"last"
        for node in nodes.values():
            await node.stop()
