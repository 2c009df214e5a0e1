"""Log streams served by Raft groups, one per node, joined by the in-memory network: the
harness of the replicated-stream tests.

Each node opens a real segment store and metadata store in its own directory and builds its
stream exactly as a cluster node does (`raft_appender` builds the group's driver under the
stream), with its own flusher; stopping it closes the driver and the stream, and starting it
again reads back what they persisted.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import trio

from tests.unit.consensus.driver_cluster import OPTIONS, RAFT, MemoryNet, join_and_run
from vdl.backends.api import LogStore, LogStoreOptions
from vdl.backends.registry import open_log_store, open_meta_store
from vdl.consensus.driver import GroupDriver, SnapshotFetcher
from vdl.consensus.options import RaftOptions
from vdl.consensus.stream_replica import StreamMachine, raft_appender
from vdl.log.flusher import Flusher
from vdl.log.record_batch import Record, build_batch, iter_records, validate_produced_batch
from vdl.log.stream import Appended, LogStream

WAIT_S = 30
# As a cluster node runs a stream's group (vdl/cluster/manager.py).
STREAM_OPTIONS = dataclasses.replace(OPTIONS, inline=True)


class StreamNode:
    def __init__(
        self,
        node_id: int,
        root: Path,
        net: MemoryNet,
        group: int,
        *,
        raft: RaftOptions = RAFT,
        store: LogStoreOptions | None = None,
        fetch_snapshot: SnapshotFetcher | None = None,
    ) -> None:
        self.node_id = node_id
        self.dir = root / f"n{node_id}"
        self.net = net
        self.group = group
        self.raft = raft
        self.store_options = store or LogStoreOptions()
        self.fetch_snapshot = fetch_snapshot

    async def start(self, nursery: trio.Nursery) -> None:
        store = open_log_store("segment", self.dir / "log", self.store_options)
        self.meta = meta = open_meta_store(self.dir / "meta")
        flusher = Flusher()
        drivers: list[GroupDriver] = []

        def build_driver(store: LogStore, machine: StreamMachine, applied: int) -> GroupDriver:
            driver = GroupDriver(
                self.group,
                self.node_id,
                frozenset({1, 2, 3}),
                store,
                meta,
                flusher,
                self.net.outbox(self.node_id),
                machine,
                raft=self.raft,
                options=STREAM_OPTIONS,
                rng=random.Random(self.node_id),
                applied=applied,
                fetch_snapshot=self.fetch_snapshot,
            )
            drivers.append(driver)
            return driver

        appender = raft_appender(build_driver, meta, self.group)
        self.stream = LogStream("t-0", store, appender, lambda: 1_000)
        (self.driver,) = drivers
        self.scope, self.done = join_and_run(
            self.net, self.node_id, self.group, self.driver, flusher, nursery
        )

    async def stop(self) -> None:
        self.net.down.add(self.node_id)
        self.scope.cancel()
        await self.done.wait()
        await self.stream.close()
        self.meta.close()


async def start_nodes(
    nursery: trio.Nursery, root: Path, net: MemoryNet, group: int, **options: Any
) -> dict[int, StreamNode]:
    """Nodes 1, 2 and 3 of one group, started; `options` go to every `StreamNode`."""
    nodes = {i: StreamNode(i, root, net, group, **options) for i in (1, 2, 3)}
    for node in nodes.values():
        await node.start(nursery)
    return nodes


def append(stream: LogStream, value: bytes) -> Appended:
    batch = build_batch([Record(None, value, 1_000, [])])
    info = validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
    return stream.append(batch, info)


def values_from(stream: LogStream, offset: int = 0) -> list[bytes]:
    """The committed values from `offset` on."""
    out = []
    for batch in stream.read(offset, 1 << 30):
        for record in iter_records(bytes(batch)):
            if record.offset >= offset:
                assert record.value is not None
                out.append(record.value)
    return out


async def wait_until(condition: Callable[[], bool], what: str, limit_s: float = WAIT_S) -> None:
    with trio.move_on_after(limit_s):
        while not condition():
            await trio.sleep(0.05)
        return
    raise AssertionError(f"not within {limit_s} s: {what}")


async def leader_of(nodes: Mapping[int, StreamNode]) -> StreamNode:
    """The one leader among `nodes`, once there is exactly one."""
    leaders: list[StreamNode] = []

    def one() -> bool:
        leaders[:] = [n for n in nodes.values() if n.driver.is_leader]
        return len(leaders) == 1

    await wait_until(one, "one leader")
    return leaders[0]


async def high_watermark(nodes: Iterable[StreamNode], hw: int) -> None:
    """Until every stream of `nodes` shows offsets below `hw` to readers."""
    nodes = list(nodes)
    await wait_until(lambda: all(n.stream.high_watermark >= hw for n in nodes), f"hw {hw}")
