"""The node's clock for its Raft groups, and node liveness.

One task per node ticks every group that is awake; a quiesced group (see `raft.py`) is not
in the awake set and costs nothing per tick, so a node holding thousands of idle partitions
spends its time on the few that work (as CockroachDB quiesces idle ranges and TiKV
hibernates idle regions).

What wakes a quiesced group is a proposal, a message, or a change in node liveness: every
tick the node sends each peer one beat (`Beacon.beat`), which carries this process's
incarnation and the heartbeats its groups have for that peer, so the heartbeats of all
groups between two nodes travel as one message per node pair (as CockroachDB and Redpanda
coalesce them). A peer not heard from within `timeout_s` is down; a peer heard again, or
heard with another incarnation (it restarted), is up. Either change wakes the groups that
have the peer as a member: their followers time out and elect as usual if their leader is
gone, and their leaders heartbeat and, with check-quorum, step down if they no longer
reach a majority.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

import trio

from vdl.metrics.stages import STAGES

log = logging.getLogger(__name__)


class Beacon(Protocol):
    def beat(self) -> None:
        """Send every peer a liveness beat (with whatever heartbeats wait for it)."""
        ...


class Tickable(Protocol):
    def tick(self) -> None: ...

    def liveness_changed(self, peers: frozenset[int]) -> None:
        """Node liveness changed for `peers` (down, up or restarted)."""
        ...


class NodeLiveness:
    """Which peers this node hears from: a peer is up while its beats keep coming."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._heard: dict[int, tuple[float, int]] = {}  # peer -> (when, incarnation)
        self._view: dict[int, int] = {}  # peer -> incarnation while up
        self.up: frozenset[int] = frozenset()
        self.changes = 0  # moves whenever the view does (a cache key for what depends on it)

    def heard(self, peer: int, incarnation: int) -> None:
        self._heard[peer] = (trio.current_time(), incarnation)

    def forget(self, peer: int) -> None:
        self._heard.pop(peer, None)

    def is_up(self, peer: int) -> bool:
        return peer in self._view

    def check(self, *, punctual: bool = True) -> frozenset[int]:
        """Update the view; the peers whose state changed since the last check. Not
        `punctual` (this node's own loop was stalled, and the beats that came meanwhile
        may still wait in its sockets): peers may come up, but none goes down."""
        horizon = trio.current_time() - self.timeout_s
        view = {p: inc for p, (when, inc) in self._heard.items() if when >= horizon}
        if not punctual:
            for peer, incarnation in self._view.items():
                view.setdefault(peer, incarnation)
        changed = frozenset(
            p for p in view.keys() | self._view.keys() if view.get(p) != self._view.get(p)
        )
        for peer in sorted(changed):
            if peer not in view:
                log.warning("node %d is down: no beat for %.1f s", peer, self.timeout_s)
            elif peer in self._view:
                log.warning("node %d restarted", peer)
            else:
                log.info("node %d is up", peer)
        self._view = view
        if changed:
            self.up = frozenset(view)
            self.changes += len(changed)
        return changed

    def down(self, peers: Iterable[int]) -> frozenset[int]:
        """Those of `peers` this node does not hear from."""
        up = self.up
        return frozenset(p for p in peers if p not in up)


class NodeClock:
    """Ticks the awake groups of one node every `tick_s`; wakes groups on liveness changes."""

    def __init__(self, tick_s: float, *, liveness: NodeLiveness | None = None) -> None:
        self.tick_s = tick_s
        self.liveness = liveness or NodeLiveness(10 * tick_s)
        self._beacon: Beacon | None = None
        self._members: dict[Tickable, frozenset[int]] = {}
        self._awake: dict[Tickable, None] = {}  # insertion-ordered set
        # Moves whenever a group's leader, term, role, members or sleep changes (drivers
        # bump it): with no group awake and this unchanged, nothing about them changed.
        self.version = 0
        # Clock ticks, and ticks handed to groups (their ratio: the groups awake on average).
        self._ticks = STAGES.counter("vdl_raft_clock_ticks_total")
        self._group_ticks = STAGES.counter("vdl_raft_group_ticks_total")
        self._wakes = STAGES.counter("vdl_raft_liveness_wakeups_total")
        self._last_tick: float | None = None

    def attach(self, beacon: Beacon) -> None:
        self._beacon = beacon

    def add(self, group: Tickable, members: frozenset[int]) -> None:
        self._members[group] = members
        self._awake[group] = None
        self.version += 1

    def remove(self, group: Tickable) -> None:
        self._members.pop(group, None)
        self._awake.pop(group, None)
        self.version += 1

    def quiet_key(self) -> tuple[int, int] | None:
        """While every group sleeps: a value that stays the same until one wakes, changes
        or is added or removed, or node liveness moves; None while any is awake."""
        if self._awake:
            return None
        return (self.version, self.liveness.changes)

    def set_members(self, group: Tickable, members: frozenset[int]) -> None:
        if group in self._members:
            self._members[group] = members
            self.version += 1

    def set_awake(self, group: Tickable, awake: bool) -> None:
        if group not in self._members:
            return
        self.version += 1
        if awake:
            self._awake[group] = None
        else:
            self._awake.pop(group, None)

    @property
    def awake(self) -> int:
        return len(self._awake)

    @property
    def groups(self) -> int:
        return len(self._members)

    def down(self, peers: Iterable[int]) -> frozenset[int]:
        return self.liveness.down(peers)

    def tick_once(self) -> None:
        self._ticks.inc()
        if self._beacon is not None:
            self._beacon.beat()
        # A tick far behind its time means this node stalled (a burst of partitions to
        # open, a long GC): silence seen now may be ours, so nobody is declared down yet.
        now = trio.current_time()
        punctual = self._last_tick is None or now - self._last_tick < 3 * self.tick_s
        self._last_tick = now
        changed = self.liveness.check(punctual=punctual)
        if changed:
            for group, members in list(self._members.items()):
                hit = changed & members
                if hit:
                    self._wakes.inc()
                    group.liveness_changed(hit)
        awake = list(self._awake)
        self._group_ticks.inc(len(awake))
        for group in awake:
            group.tick()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await trio.sleep(self.tick_s)
            self.tick_once()
