"""A tiny in-memory store and a lockstep network for scripted Raft scenarios."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from vdl.backends.api import Entry, EntryType, StorageError
from vdl.consensus import Config, HardState, RaftNode, RaftOptions, Ready, Role, SnapshotMeta
from vdl.consensus.messages import Message


class MemStorage:
    """Persisted entries of one node; `base` is the index before the first stored one."""

    def __init__(self, entries: Iterable[Entry] = (), base: int = 0) -> None:
        self.base = base
        self.log: list[Entry] = list(entries)
        self.hard_state = HardState()
        self.snapshot: SnapshotMeta | None = None

    def first_index(self) -> int:
        return self.base + 1

    def last_index(self) -> int:
        return self.base + len(self.log)

    def term_at(self, index: int) -> int:
        if not self.first_index() <= index <= self.last_index():
            raise StorageError(f"{index} not stored")
        return self.log[index - self.base - 1].term

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        if lo < self.first_index() or hi > self.last_index() + 1:
            raise StorageError(f"[{lo}, {hi}) not stored")
        return self.log[lo - self.base - 1 : hi - self.base - 1]

    def write(self, rd: Ready) -> None:
        if rd.snapshot is not None:
            self.base = rd.snapshot.index
            self.log = []
            self.snapshot = rd.snapshot
        if rd.truncate_from is not None:
            del self.log[rd.truncate_from - self.base - 1 :]
        if rd.entries:
            assert rd.entries[0].index == self.last_index() + 1
            self.log.extend(rd.entries)
        if rd.hard_state is not None:
            self.hard_state = rd.hard_state

    def compact(self, upto: int) -> None:
        del self.log[: upto - self.base]
        self.base = upto


def entries_of(*terms: int, start: int = 1) -> list[Entry]:
    return [Entry(t, start + i, EntryType.DATA, b"x%d" % (start + i)) for i, t in enumerate(terms)]


# Quiescence off: these tests step cores by hand, with no node liveness to wake them
# (test_quiescence.py covers it).
OPTS = RaftOptions(election_tick=10, heartbeat_tick=1, max_inflight=8, quiesce=False)


def make_node(
    node_id: int,
    voters: Iterable[int],
    storage: MemStorage | None = None,
    *,
    learners: Iterable[int] = (),
    options: RaftOptions = OPTS,
    seed: int = 0,
    hard_state: HardState | None = None,
) -> RaftNode:
    storage = storage or MemStorage()
    return RaftNode(
        node_id,
        storage,
        Config(frozenset(voters), frozenset(learners)),
        rng=random.Random(seed * 100 + node_id),
        options=options,
        hard_state=hard_state or storage.hard_state,
        snapshot=storage.snapshot,
    )


class Net:
    """Nodes whose Readys are persisted at once and whose messages are delivered in order.

    `drop(m)` returning True loses a message; `down` nodes neither send nor receive.
    """

    def __init__(self, ids: Iterable[int], *, options: RaftOptions = OPTS, seed: int = 0) -> None:
        ids = list(ids)
        self.storages = {i: MemStorage() for i in ids}
        self.nodes = {
            i: make_node(i, ids, self.storages[i], options=options, seed=seed) for i in ids
        }
        self.down: set[int] = set()
        self.drop: Callable[[Message], bool] = lambda m: False
        self.applied: dict[int, list[Entry]] = {i: [] for i in ids}
        self.sent: list[Message] = []

    def add(self, node: RaftNode, storage: MemStorage) -> None:
        self.nodes[node.id] = node
        self.storages[node.id] = storage
        self.applied.setdefault(node.id, [])

    def isolate(self, node_id: int) -> None:
        self.drop = lambda m: node_id in (m.src, m.dst)

    def heal(self) -> None:
        self.drop = lambda m: False

    def process(self, node_id: int) -> list[Message]:
        """Persist and apply one node's Readys at once; return its outgoing messages."""
        node = self.nodes[node_id]
        out: list[Message] = []
        while node.has_ready():
            rd = node.ready()
            self.storages[node_id].write(rd)
            out.extend(rd.messages)
            out.extend(rd.messages_after_persist)
            self.applied[node_id].extend(rd.committed_entries)
            node.advance(rd)
            if rd.entries:
                node.on_persisted(rd.entries[-1].index, rd.entries[-1].term)
            elif rd.snapshot is not None:
                node.on_persisted(rd.snapshot.index, rd.snapshot.term)
        return out

    def deliver(self, messages: list[Message], max_rounds: int = 10_000) -> None:
        queue = list(messages)
        rounds = 0
        while queue:
            rounds += 1
            assert rounds < max_rounds, "message storm"
            m = queue.pop(0)
            self.sent.append(m)
            if m.src in self.down or m.dst in self.down or self.drop(m) or m.dst not in self.nodes:
                continue
            self.nodes[m.dst].step(m)
            queue.extend(self.process(m.dst))

    def settle(self) -> None:
        """Process every node and deliver until quiet."""
        out: list[Message] = []
        for i in sorted(self.nodes):
            if i not in self.down:
                out.extend(self.process(i))
        self.deliver(out)

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            for i in sorted(self.nodes):
                if i not in self.down:
                    self.nodes[i].tick()
            self.settle()

    def elect(self, node_id: int) -> RaftNode:
        self.nodes[node_id].campaign()
        self.settle()
        node = self.nodes[node_id]
        assert node.role is Role.LEADER, node.role
        return node

    def leader(self) -> RaftNode | None:
        leaders = [n for i, n in self.nodes.items() if i not in self.down and n.role is Role.LEADER]
        return max(leaders, key=lambda n: n.term) if leaders else None


def role(node: RaftNode) -> Role:
    """The node's role, read through a call so type checkers do not over-narrow it."""
    return node.role
