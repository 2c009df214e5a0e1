"""Group drivers of several nodes in one trio run, joined by an in-memory network.

Each node has real stores (segment log, RocksDB metadata) in its own directory, its own
Flusher, and its own NodeClock whose liveness beats travel on the same network, so restarts
read back exactly what the driver persisted and idle groups quiesce and wake as on nodes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio

from vdl.backends.api import Entry, EntryType, LogStore, LogStoreOptions, MetaStore
from vdl.backends.registry import open_log_store, open_meta_store
from vdl.consensus import RaftOptions
from vdl.consensus.clock import NodeClock
from vdl.consensus.driver import DriverOptions, GroupDriver
from vdl.consensus.messages import Message
from vdl.consensus.router import GroupRouter
from vdl.log.flusher import Flusher
from vdl.log.record_batch import Record, build_batch

GROUP = 7
RAFT = RaftOptions(election_tick=10, heartbeat_tick=1, max_inflight=8)
OPTIONS = DriverOptions(tick_s=0.05)


class MemoryNet:
    """Delivers at once, except to nodes that are down or cut off."""

    def __init__(self) -> None:
        self.routers: dict[int, GroupRouter] = {}
        self.down: set[int] = set()
        self.isolated: set[int] = set()
        self.sent = 0
        self.clocks: dict[int, NodeClock] = {}

    def outbox(self, src: int) -> _NodeOutbox:
        return _NodeOutbox(self, src, random.getrandbits(62))

    def cut(self, src: int, dst: int) -> bool:
        return bool({src, dst} & self.down or {src, dst} & self.isolated)

    def beat(self, src: int, incarnation: int) -> None:
        for dst, clock in self.clocks.items():
            if dst != src and not self.cut(src, dst):
                clock.liveness.heard(src, incarnation)

    def route(self, src: int, group_id: int, message: Message) -> None:
        dst = message.dst
        if self.cut(src, dst):
            return
        router = self.routers.get(dst)
        if router is not None:
            self.sent += 1
            router.deliver(group_id, message)


@dataclass
class _NodeOutbox:
    net: MemoryNet
    src: int

    incarnation: int = 0

    def send(self, group_id: int, message: Message) -> None:
        self.net.route(self.src, group_id, message)

    def beat(self) -> None:
        self.net.beat(self.src, self.incarnation)


@dataclass
class Recorder:
    """A state machine that remembers everything it is told."""

    applied: list[Entry] = field(default_factory=list)
    written: list[Entry] = field(default_factory=list)
    truncated: list[int] = field(default_factory=list)
    leaders: list[tuple[int, int, bool]] = field(default_factory=list)
    persisted: int = 0
    restored: list[int] = field(default_factory=list)

    def on_written(self, entries: Sequence[Entry]) -> None:
        self.written.extend(entries)

    def on_truncated(self, from_index: int) -> None:
        self.truncated.append(from_index)

    def apply(self, entries: Sequence[Entry]) -> None:
        self.applied.extend(entries)

    def on_role_change(self, leader_id: int, term: int, is_leader: bool) -> None:
        self.leaders.append((leader_id, term, is_leader))

    def on_persisted(self, index: int) -> None:
        self.persisted = max(self.persisted, index)

    def on_restored(self, index: int) -> None:
        self.restored.append(index)

    def data(self) -> list[bytes]:
        return [bytes(e.payload) for e in self.applied if e.type == EntryType.DATA]


def payload(index: int, text: bytes) -> bytes:
    # Segment stores index DATA entries by record offset; the raft index is a fine offset.
    return build_batch([Record(None, text, 0, [])], base_offset=index)


@dataclass
class TestNode:
    node_id: int
    directory: Path
    net: MemoryNet
    voters: frozenset[int]
    store: LogStore | None = None
    meta: MetaStore | None = None
    driver: GroupDriver | None = None
    machine: Recorder = field(default_factory=Recorder)
    scope: trio.CancelScope | None = None
    done: trio.Event = field(default_factory=trio.Event)
    flusher: Flusher = field(default_factory=Flusher)

    async def start(self, nursery: trio.Nursery) -> None:
        self.store = open_log_store("segment", self.directory / "log", LogStoreOptions())
        self.meta = open_meta_store(self.directory / "meta")
        self.machine = Recorder()
        flusher = Flusher()
        self.flusher = flusher
        outbox = self.net.outbox(self.node_id)
        clock = NodeClock(OPTIONS.tick_s)
        clock.attach(outbox)
        self.net.clocks[self.node_id] = clock
        self.driver = GroupDriver(
            GROUP,
            self.node_id,
            self.voters,
            self.store,
            self.meta,
            flusher,
            outbox,
            self.machine,
            raft=RAFT,
            options=OPTIONS,
            rng=random.Random(self.node_id),
            clock=clock,
        )
        self.scope, self.done = join_and_run(
            self.net, self.node_id, GROUP, self.driver, flusher, nursery, clock
        )
        await trio.sleep(0)

    async def stop(self) -> None:
        """Like a process exit: the tasks end and the stores close."""
        assert self.scope is not None and self.store is not None and self.meta is not None
        self.net.down.add(self.node_id)
        self.scope.cancel()
        await self.done.wait()
        self.store.close()
        self.meta.close()
        self.net.routers.pop(self.node_id, None)
        self.net.clocks.pop(self.node_id, None)
        self.driver = None


class DriverCluster:
    def __init__(self, root: Path, size: int = 3) -> None:
        self.net = MemoryNet()
        voters = frozenset(range(1, size + 1))
        self.nodes = {i: TestNode(i, root / f"n{i}", self.net, voters) for i in voters}

    async def start(self, nursery: trio.Nursery) -> None:
        for node in self.nodes.values():
            await node.start(nursery)

    async def stop(self) -> None:
        for node in self.nodes.values():
            if node.driver is not None:
                await node.stop()

    def leaders(self) -> list[TestNode]:
        return [n for n in self.nodes.values() if n.driver is not None and n.driver.is_leader]

    async def wait_leader(self, timeout: float = 30.0) -> TestNode:
        with trio.fail_after(timeout):
            while True:
                leaders = self.leaders()
                if len(leaders) == 1:
                    return leaders[0]
                await trio.sleep(0.05)

    async def wait_leader_is(self, node_id: int, timeout: float = 30.0) -> None:
        """Until `node_id` is the one leader."""
        with trio.fail_after(timeout):
            while [n.node_id for n in self.leaders()] != [node_id]:
                await trio.sleep(0.05)

    async def propose(self, text: bytes, timeout: float = 30.0) -> int:
        """Propose through whoever leads (retrying across elections); the entry's index."""
        with trio.fail_after(timeout):
            while True:
                leader = await self.wait_leader()
                driver = leader.driver
                assert driver is not None
                try:
                    index, _ = driver.propose([payload(driver.next_index(), text)])
                    return index
                except Exception:
                    await trio.sleep(0.05)

    async def wait_applied(self, index: int, nodes: Sequence[int], timeout: float = 30.0) -> None:
        with trio.fail_after(timeout):
            while not all(
                self.nodes[n].machine.applied and self.nodes[n].machine.applied[-1].index >= index
                for n in nodes
            ):
                await trio.sleep(0.05)


def join_and_run(
    net: MemoryNet,
    node_id: int,
    group: int,
    driver: GroupDriver,
    flusher: Flusher,
    nursery: trio.Nursery,
    clock: NodeClock | None = None,
) -> tuple[trio.CancelScope, trio.Event]:
    """Route the network's messages for `node_id` to `driver` and run its flusher, driver
    (and clock) in `nursery` until the scope returned is cancelled; the event is set once
    the driver has closed after that."""
    router = GroupRouter()
    router.add(group, driver)
    net.routers[node_id] = router
    net.down.discard(node_id)
    scope, done = trio.CancelScope(), trio.Event()

    async def run() -> None:
        with scope:
            async with trio.open_nursery() as inner:
                await inner.start(flusher.run)
                await inner.start(driver.run)
                if clock is not None:
                    await inner.start(clock.run)
        await driver.close()
        done.set()

    nursery.start_soon(run)
    return scope, done
