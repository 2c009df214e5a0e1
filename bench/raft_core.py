"""The Raft core alone: three `RaftNode`s in one process, commits per second.

No disk and no sockets, but every message is wire-encoded and decoded (as it would be
between processes), so the figure is the consensus algorithm plus its codec: what the
state machine itself can sustain, to compare with another Python Raft on the same payload.
Proposals come in rounds of `batch` entries (what the driver's group commit hands it);
each round is pumped until it is committed everywhere.
"""

from __future__ import annotations

import os
import random
import time
from collections import deque
from dataclasses import dataclass

from vdl.backends.api import Entry, StorageError
from vdl.consensus import Config, RaftNode, RaftOptions, Ready, wire
from vdl.consensus.messages import Message


class _MemoryLog:
    """Persisted entries of one node, in a list (the core's LogSource)."""

    def __init__(self) -> None:
        self.log: list[Entry] = []

    def first_index(self) -> int:
        return 1

    def last_index(self) -> int:
        return len(self.log)

    def term_at(self, index: int) -> int:
        if not 1 <= index <= len(self.log):
            raise StorageError(f"{index} not stored")
        return int(self.log[index - 1].term)

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        return self.log[lo - 1 : hi - 1]

    def write(self, rd: Ready) -> None:
        if rd.truncate_from is not None:
            del self.log[rd.truncate_from - 1 :]
        self.log.extend(rd.entries)


@dataclass(frozen=True, slots=True)
class CoreResult:
    commits: int
    seconds: float
    payload_bytes: int
    batch: int

    @property
    def per_s(self) -> float:
        return self.commits / self.seconds


def run_core(payload_bytes: int, seconds: float, batch: int = 256) -> CoreResult:
    options = RaftOptions(election_tick=10, heartbeat_tick=1, max_inflight=64)
    voters = frozenset({1, 2, 3})
    logs = {n: _MemoryLog() for n in voters}
    nodes = {
        n: RaftNode(n, logs[n], Config(voters), rng=random.Random(n), options=options)
        for n in voters
    }
    queue: deque[bytes] = deque()
    applied = 0

    def pump() -> None:
        nonlocal applied
        busy = True
        while busy:
            busy = False
            for n, node in nodes.items():
                while node.has_ready():
                    busy = True
                    rd = node.ready()
                    for m in rd.messages:
                        queue.append(wire.encode(m))
                    logs[n].write(rd)
                    if n == 1:
                        applied += len(rd.committed_entries)
                    node.advance(rd)
                    # Persisted at once (no disk here), then the after-persist messages.
                    for m in rd.messages_after_persist:
                        queue.append(wire.encode(m))
                    if rd.entries:
                        node.on_persisted(rd.entries[-1].index, rd.entries[-1].term)
            while queue:
                busy = True
                message: Message = wire.decode(memoryview(queue.popleft()))
                nodes[message.dst].step(message)

    nodes[1].campaign()
    pump()
    leader = nodes[1]
    payloads = [os.urandom(payload_bytes) for _ in range(batch)]
    applied = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        leader.propose(payloads)
        pump()
    elapsed = time.perf_counter() - start
    return CoreResult(applied, elapsed, payload_bytes, batch)
