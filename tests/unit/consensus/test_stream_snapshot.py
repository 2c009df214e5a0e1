"""Retention on replicated streams and snapshots for a follower that needs what it deleted:
the follower is down while the leader's retention removes the segments it would need; it
restarts, takes the leader's log as a snapshot, and carries on replicating."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from tests.unit.consensus.driver_cluster import MemoryNet
from tests.unit.consensus.stream_nodes import (
    StreamNode,
    append,
    high_watermark,
    leader_of,
    values_from,
)
from vdl.backends.api import LogRetention, LogStoreOptions, SnapshotStaging
from vdl.consensus.snapshot_transfer import SnapshotData, receive_snapshot, serve_snapshot
from vdl.consensus.snapshot_wire import REQUEST, decode_request
from vdl.consensus.state import SnapshotMeta

GROUP = 43
# Small segments, and retention that keeps only a few closed ones.
STORE = LogStoreOptions(segment_bytes=1500, retention=LogRetention(max_bytes=6000))


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.002)


async def _fetch_from(
    nodes: dict[int, StreamNode],
    leader: int,
    group: int,
    snapshot: SnapshotMeta,
    staging: SnapshotStaging,
) -> SnapshotData:
    # Over a memory stream, from the leader's driver (the TCP pull is tested elsewhere).
    source = nodes[leader].driver
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


async def test_a_follower_behind_retention_catches_up_through_a_snapshot(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    net = MemoryNet()
    nodes: dict[int, StreamNode] = {}

    async def fetch(
        leader: int, group: int, snapshot: SnapshotMeta, staging: SnapshotStaging
    ) -> SnapshotData:
        return await _fetch_from(nodes, leader, group, snapshot, staging)

    for i in (1, 2, 3):
        nodes[i] = StreamNode(i, tmp_path, net, GROUP, store=STORE, fetch_snapshot=fetch)
    async with trio.open_nursery() as nursery:
        for node in nodes.values():
            await node.start(nursery)
        leader = await leader_of(nodes)
        for i in range(10):
            append(leader.stream, b"early%d" % i)
        await high_watermark(nodes.values(), 10)
        lagging = next(n for n in nodes.values() if n is not leader)
        await lagging.stop()
        others = [n for n in nodes.values() if n is not lagging]
        for i in range(200):
            append(leader.stream, b"late%d" % i)
        await high_watermark(others, 210)
        lagging_end = lagging.driver.core.log.last_index()
        for node in others:
            assert node.stream.apply_retention() > 0
        # The leader no longer holds what the lagging follower needs next.
        assert leader.driver.core.log.first_index() > lagging_end + 1
        start = leader.stream.log_start_offset
        assert start > 10
        await lagging.start(nursery)
        await high_watermark([lagging], 210)
        assert lagging.driver.snapshots_installed == 1
        assert lagging.driver.snapshot_files_installed > 0  # closed segments went as files
        assert lagging.stream.log_start_offset == start
        assert values_from(lagging.stream, start) == values_from(leader.stream, start)
        # Replication goes on after the snapshot, and everyone restarts from disk.
        more = [append(leader.stream, b"after%d" % i) for i in range(5)]
        await leader.stream.wait_committed(more[-1].last_offset)
        await high_watermark(nodes.values(), 215)
        for node in nodes.values():
            await node.stop()
        for node in nodes.values():
            await node.start(nursery)
        leader = await leader_of(nodes)
        append(leader.stream, b"last")
        await high_watermark(nodes.values(), 216)
        expected = values_from(leader.stream, start)
        assert expected[-1] == b"last" and len(expected) == 216 - start
        for node in nodes.values():
            assert values_from(node.stream, start) == expected
        assert values_from(nodes[1].stream)[-1] == b"last"
        for node in nodes.values():
            await node.stop()
