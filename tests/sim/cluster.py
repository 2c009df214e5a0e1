"""A deterministic simulation of a Raft cluster built from `RaftNode` cores.

Everything runs in one thread on a discrete clock; one seeded `random.Random` decides every
delay, loss, duplication, crash, partition and disk speed, so a seed replays exactly.

The simulated driver follows the contract in `vdl/consensus/ready.py`: messages are sent at
once, writes go to the node's "page cache" (`disk`), a flush makes an image of it durable
after a delay (slow disks make that long), and only then go out the after-persist messages
and `on_persisted`. A crash throws the page cache and the core away and restarts the node
from its durable image.

Groups quiesce when idle (`RaftOptions.quiesce`), so the workload has idle stretches, and
each node keeps a node-liveness view as a real node does: at each of its ticks it sees,
sometimes a few ticks late, which other nodes are up and reachable (and whether one
restarted); a change calls `wake()` on its core, and the nodes it holds for down are the
core's `dead_peers`.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vdl.backends.api import Entry, EntryType, StorageError
from vdl.consensus import (
    ConfChange,
    ConfChangeType,
    Config,
    ConsensusError,
    HardState,
    RaftNode,
    RaftOptions,
    Role,
    SnapshotMeta,
)
from vdl.consensus.messages import InstallSnapshot, Message

TICK = 10  # simulated time units per Raft tick


class SimFailure(AssertionError):
    pass


class SimDisk:
    """An in-memory log store (satisfies the core's LogSource) plus hard state."""

    def __init__(self) -> None:
        self.base_index = 0
        self.base_term = 0
        self.log: list[Entry] = []
        self.hard_state = HardState()
        self.snapshot: SnapshotMeta | None = None

    def clone(self) -> SimDisk:
        other = SimDisk()
        other.base_index, other.base_term = self.base_index, self.base_term
        other.log = list(self.log)
        other.hard_state = self.hard_state
        other.snapshot = self.snapshot
        return other

    def first_index(self) -> int:
        return self.base_index + 1

    def last_index(self) -> int:
        return self.base_index + len(self.log)

    def term_at(self, index: int) -> int:
        if not self.first_index() <= index <= self.last_index():
            raise StorageError(f"index {index} not stored")
        return self.log[index - self.base_index - 1].term

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        if lo < self.first_index() or hi > self.last_index() + 1:
            raise StorageError(f"entries [{lo}, {hi}) not stored")
        out = self.log[lo - self.base_index - 1 : hi - self.base_index - 1]
        if max_bytes is not None:
            total = 0
            for i, e in enumerate(out):
                total += len(e.payload) + 24
                if total > max_bytes and i > 0:
                    return out[:i]
        return out

    def append(self, entries: tuple[Entry, ...]) -> None:
        if entries[0].index != self.last_index() + 1:
            raise SimFailure(f"append at {entries[0].index} after {self.last_index()}")
        self.log.extend(entries)

    def truncate_suffix(self, from_index: int) -> None:
        if from_index <= self.base_index:
            raise SimFailure(f"truncation at {from_index} below base {self.base_index}")
        del self.log[from_index - self.base_index - 1 :]

    def install_snapshot(self, meta: SnapshotMeta) -> None:
        self.base_index, self.base_term = meta.index, meta.term
        self.log = []
        self.snapshot = meta

    def compact(self, meta: SnapshotMeta) -> None:
        """Retention: drop entries <= meta.index, recording what the core said to record."""
        upto = meta.index
        if upto <= self.base_index or upto >= self.last_index():
            return  # like the real store, the last entry (active segment) always stays
        if self.term_at(upto) != meta.term:
            raise SimFailure(f"retention point {meta} disagrees with the stored log")
        del self.log[: upto - self.base_index]
        self.base_index, self.base_term = upto, meta.term
        self.snapshot = meta


@dataclass
class FaultProfile:
    loss: float = 0.05
    duplicate: float = 0.02
    max_delay: int = 15  # network delay in time units (TICK = 10)
    fault_every: int = 300  # mean time between fault events
    crash_weight: int = 3
    partition_weight: int = 3
    slow_disk_weight: int = 2
    transfer_weight: int = 1
    compact_weight: int = 2
    membership_weight: int = 0
    propose_every: int = 25
    idle_chance: float = 0.05  # after a proposal, chance of an idle stretch (groups quiesce)
    idle_time: int = 600  # longest idle stretch
    # Proposals go to the leader of the newest term, as clients that follow leadership do:
    # a deposed leader is then woken by nothing but node liveness.
    newest_leader: bool = False


@dataclass
class SimNode:
    id: int
    disk: SimDisk
    durable: SimDisk
    core: RaftNode | None = None
    incarnation: int = 0
    flushing: tuple[SimDisk, list[Message], int, int] | None = None
    pending_after: list[Message] = field(default_factory=list)
    dirty: bool = False
    slow_disk: bool = False
    applied_index: int = 0
    led_term: int = -1  # last term this node was seen leading (to check each new leader once)
    # Node liveness as this node sees it: peer -> the peer's incarnation, or -1 if down.
    liveness: dict[int, int] = field(default_factory=dict)
    quiesces_seen: int = 0
    cut_off_since: int | None = None  # since when, as leader, it reaches no majority


class Checker:
    """Raft's safety properties, checked as the simulation runs."""

    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # term -> leader
        self.committed: dict[int, tuple[int, bytes, EntryType]] = {}  # index -> entry id

    def on_leader(self, node: SimNode) -> None:
        core = node.core
        assert core is not None
        other = self.leaders.setdefault(core.term, node.id)
        if other != node.id:
            raise SimFailure(f"election safety: {other} and {node.id} lead term {core.term}")
        # Leader completeness: every entry committed so far is in the new leader's log.
        log = core.log
        first = log.first_index()
        for index, (term, _, _) in self.committed.items():
            if index > log.last_index():
                raise SimFailure(
                    f"leader completeness: leader {node.id} (term {core.term}) lacks "
                    f"committed index {index}; its last is {log.last_index()}"
                )
            if index >= first and log.term_at(index) != term:
                raise SimFailure(
                    f"leader completeness: leader {node.id} has term {log.term_at(index)} "
                    f"at committed index {index}, committed term {term}"
                )

    def on_apply(self, node: SimNode, entry: Entry) -> None:
        if entry.index != node.applied_index + 1:
            raise SimFailure(
                f"node {node.id} applied {entry.index} after {node.applied_index} (gap)"
            )
        node.applied_index = entry.index
        ident = (entry.term, bytes(entry.payload), entry.type)
        known = self.committed.setdefault(entry.index, ident)
        if known != ident:
            raise SimFailure(
                f"state machine safety: node {node.id} applied {ident} at {entry.index}, "
                f"another node applied {known}"
            )

    def on_snapshot(self, node: SimNode, meta: SnapshotMeta) -> None:
        known = self.committed.get(meta.index)
        if known is not None and known[0] != meta.term:
            raise SimFailure(f"snapshot at {meta.index} has term {meta.term}, committed {known}")
        node.applied_index = max(node.applied_index, meta.index)

    def check_logs(self, nodes: list[SimNode]) -> None:
        """Log matching: same (index, term) in two logs means identical prefixes."""
        live = [n for n in nodes if n.core is not None]
        for i, a in enumerate(live):
            for b in live[i + 1 :]:
                assert a.core is not None and b.core is not None
                la, lb = a.core.log, b.core.log
                lo = max(la.first_index(), lb.first_index())
                hi = min(la.last_index(), lb.last_index())
                top = hi
                while top >= lo and la.term_at(top) != lb.term_at(top):
                    top -= 1
                if top < lo:
                    continue
                ea, eb = la.entries(lo, top + 1), lb.entries(lo, top + 1)
                if ea != eb:
                    bad = next(x.index for x, y in zip(ea, eb, strict=True) if x != y)
                    raise SimFailure(
                        f"log matching: nodes {a.id} and {b.id} agree at {top} but differ at {bad}"
                    )


class Simulation:
    def __init__(
        self,
        seed: int,
        n_voters: int = 3,
        *,
        n_spares: int = 0,
        faults: FaultProfile | None = None,
        options: RaftOptions | None = None,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = faults or FaultProfile()
        self.options = options or RaftOptions(
            election_tick=10, heartbeat_tick=2, max_inflight=4, max_append_bytes=256
        )
        self.initial_config = Config(frozenset(range(1, n_voters + 1)))
        self.nodes = [SimNode(i, SimDisk(), SimDisk()) for i in range(1, n_voters + n_spares + 1)]
        self.now = 0
        self._queue: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self.partition: dict[int, int] | None = None
        self.loss = self.faults.loss
        self.duplicate = self.faults.duplicate
        self.checker = Checker()
        self.proposals: dict[bytes, tuple[int, int, int]] = {}  # payload -> node, term, index
        self.acked: dict[bytes, int] = {}  # payload -> index, acknowledged to the client
        self._next_payload = 0
        self._events = 0
        self.chaos = True
        self.trace: list[str] = []
        self.stats: dict[str, int] = {
            "snapshots": 0,
            "crashes": 0,
            "partitions": 0,
            "quiesced": 0,
            "wakes": 0,
        }
        for node in self.nodes:
            self._start(node)
            self._schedule(self.rng.randrange(TICK), self._tick, node)

    # ---- scheduling --------------------------------------------------------------------

    def _schedule(self, delay: int, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now + delay, self._seq, fn, args))

    def run_until(self, end: int, stop: Callable[[], bool] | None = None) -> bool:
        while self._queue and self._queue[0][0] <= end:
            self.now, _, fn, args = heapq.heappop(self._queue)
            fn(*args)
            self._events += 1
            if self._events % 500 == 0:
                self.checker.check_logs(self.nodes)
                if stop is not None and stop():
                    return True
        self.now = end
        return stop() if stop is not None else False

    def log(self, text: str) -> None:
        self.trace.append(f"t={self.now} {text}")
        if len(self.trace) > 200:
            del self.trace[:100]

    # ---- nodes and their driver --------------------------------------------------------

    def _start(self, node: SimNode) -> None:
        disk = node.disk
        node.liveness = {}
        node.quiesces_seen = 0
        node.core = RaftNode(
            node.id,
            disk,
            self.initial_config,
            rng=random.Random(self.rng.getrandbits(64)),
            options=self.options,
            hard_state=disk.hard_state,
            snapshot=disk.snapshot,
            # Half the nodes are told only the index to apply (as a log stream's driver
            # is), and read what that covers from their own disk.
            apply_payloads=node.id % 2 == 1,
        )
        node.applied_index = disk.base_index

    def crash(self, node: SimNode) -> None:
        self.log(f"crash {node.id}")
        self.stats["crashes"] += 1
        node.core = None
        node.incarnation += 1
        node.flushing = None
        node.pending_after = []
        node.dirty = False
        node.disk = node.durable.clone()

    def restart(self, node: SimNode) -> None:
        self.log(f"restart {node.id}")
        self._start(node)
        self._drive(node)

    def _tick(self, node: SimNode) -> None:
        if node.core is not None:
            if self.rng.random() < 0.5:  # liveness is noticed some ticks late
                self._check_liveness(node)
            node.core.tick()
            self._drive(node)
            self._check_stale_leader(node)
        self._schedule(TICK, self._tick, node)

    def _check_stale_leader(self, node: SimNode) -> None:
        """Check-quorum's promise, quiesced or not: a leader cut off from a majority of
        its voters steps down within a few election timeouts."""
        core = node.core
        assert core is not None
        if core.role is not Role.LEADER or not self.options.check_quorum:
            node.cut_off_since = None
            return
        reached = {
            v
            for v in core.config.voters
            if v == node.id or (self.nodes[v - 1].core is not None and not self._cut(node.id, v))
        }
        if core.config.has_quorum(reached):
            node.cut_off_since = None
        elif node.cut_off_since is None:
            node.cut_off_since = self.now
        elif self.now - node.cut_off_since > 4 * self.options.election_tick * TICK:
            raise SimFailure(
                f"node {node.id} still leads term {core.term} (quiesced: {core.quiesced}) "
                f"cut off from a majority since t={node.cut_off_since}"
            )

    def _check_liveness(self, node: SimNode) -> None:
        core = node.core
        assert core is not None
        view = {
            o.id: o.incarnation if o.core is not None and not self._cut(node.id, o.id) else -1
            for o in self.nodes
            if o.id != node.id
        }
        if view != node.liveness:
            node.liveness = view
            core.dead_peers = frozenset(p for p, inc in view.items() if inc < 0)
            if core.quiesced:
                self.stats["wakes"] += 1
            core.wake()
            self._drive(node)

    def _drive(self, node: SimNode) -> None:
        core = node.core
        assert core is not None
        while core.has_ready():
            rd = core.ready()
            for m in rd.messages:
                self._send(m)
            disk = node.disk
            if rd.snapshot is not None:
                disk.install_snapshot(rd.snapshot)
                self.stats["snapshots"] += 1
                self.checker.on_snapshot(node, rd.snapshot)
            if rd.truncate_from is not None:
                disk.truncate_suffix(rd.truncate_from)
            if rd.entries:
                disk.append(rd.entries)
            if rd.hard_state is not None:
                disk.hard_state = rd.hard_state
            node.pending_after.extend(rd.messages_after_persist)
            if rd.needs_persist:
                node.dirty = True
            committed = rd.committed_entries
            if rd.apply_to and not committed:
                committed = tuple(disk.entries(core.log.applied + 1, rd.apply_to + 1))
                assert committed[-1].index == rd.apply_to
            for entry in committed:
                self.checker.on_apply(node, entry)
                self._maybe_ack(node, entry)
            core.advance(rd)
            if core.role is Role.LEADER and core.term != node.led_term:
                node.led_term = core.term
                self.log(f"node {node.id} leads term {core.term}")
                self.checker.on_leader(node)
        if core.quiesce_count != node.quiesces_seen:
            node.quiesces_seen = core.quiesce_count
            self.stats["quiesced"] += 1
            self.log(f"node {node.id} quiesced ({core.role.value})")
        self._maybe_flush(node)

    def _maybe_ack(self, node: SimNode, entry: Entry) -> None:
        proposal = self.proposals.get(bytes(entry.payload))
        if (
            proposal is not None
            and proposal[0] == node.id
            and proposal[1:]
            == (
                entry.term,
                entry.index,
            )
        ):
            self.acked[bytes(entry.payload)] = entry.index

    def _maybe_flush(self, node: SimNode) -> None:
        if node.flushing is not None or not node.dirty:
            return
        image = node.disk.clone()
        last = image.last_index()
        term = image.term_at(last) if last > image.base_index else image.base_term
        node.flushing = (image, node.pending_after, last, term)
        node.pending_after = []
        node.dirty = False
        delay = self.rng.randint(20, 120) if node.slow_disk else self.rng.randint(1, 6)
        self._schedule(delay, self._flush_done, node, node.incarnation)

    def _flush_done(self, node: SimNode, incarnation: int) -> None:
        if node.incarnation != incarnation or node.flushing is None or node.core is None:
            return
        image, messages, last, term = node.flushing
        node.flushing = None
        node.durable = image
        for m in messages:
            self._send(m)
        node.core.on_persisted(last, term)
        self._drive(node)

    # ---- network -----------------------------------------------------------------------

    def _cut(self, a: int, b: int) -> bool:
        return self.partition is not None and self.partition.get(a) != self.partition.get(b)

    def _send(self, m: Message) -> None:
        copies = 2 if self.rng.random() < self.duplicate else 1
        if self._cut(m.src, m.dst) or self.rng.random() < self.loss:
            copies = 0
        if copies == 0 and isinstance(m, InstallSnapshot):
            self._schedule(self.rng.randint(1, 30), self._snapshot_report, m, False)
        for _ in range(copies):
            self._schedule(self.rng.randint(1, self.faults.max_delay), self._deliver, m)

    def _deliver(self, m: Message) -> None:
        node = self.nodes[m.dst - 1]
        if node.core is None or self._cut(m.src, m.dst):
            if isinstance(m, InstallSnapshot):
                self._schedule(1, self._snapshot_report, m, False)
            return
        node.core.step(m)
        self._drive(node)
        if isinstance(m, InstallSnapshot):
            self._schedule(1, self._snapshot_report, m, True)

    def _snapshot_report(self, m: InstallSnapshot, ok: bool) -> None:
        leader = self.nodes[m.src - 1]
        if leader.core is not None and leader.core.term == m.term:
            leader.core.report_snapshot(m.dst, ok)
            self._drive(leader)

    # ---- workload and faults -----------------------------------------------------------

    def leaders(self) -> list[SimNode]:
        return [n for n in self.nodes if n.core is not None and n.core.role is Role.LEADER]

    def _propose(self) -> None:
        if not self.chaos:
            return
        leaders = self.leaders()
        if leaders:
            if self.faults.newest_leader:
                node = max(leaders, key=lambda n: n.core.term if n.core is not None else 0)
            else:
                node = self.rng.choice(leaders)
            assert node.core is not None
            count = self.rng.randint(1, 3)
            payloads = []
            for _ in range(count):
                self._next_payload += 1
                payloads.append(b"p%d" % self._next_payload)
            try:
                first, _ = node.core.propose(payloads)
            except ConsensusError:
                pass
            else:
                for i, p in enumerate(payloads):
                    self.proposals[p] = (node.id, node.core.term, first + i)
                self._drive(node)
        delay = self.rng.randint(1, 2 * self.faults.propose_every)
        if self.rng.random() < self.faults.idle_chance:
            delay = self.rng.randint(1, self.faults.idle_time)
        self._schedule(delay, self._propose)

    def _fault(self) -> None:
        if not self.chaos:
            return
        f = self.faults
        actions: list[tuple[int, Callable[[], None]]] = [
            (f.crash_weight, self._fault_crash),
            (f.partition_weight, self._fault_partition),
            (f.slow_disk_weight, self._fault_slow_disk),
            (f.transfer_weight, self._fault_transfer),
            (f.compact_weight, self._fault_compact),
            (f.membership_weight, self._fault_membership),
        ]
        total = sum(w for w, _ in actions)
        pick = self.rng.randrange(total)
        for weight, action in actions:
            if pick < weight:
                action()
                break
            pick -= weight
        self._schedule(self.rng.randint(1, 2 * f.fault_every), self._fault)

    def _fault_crash(self) -> None:
        down = [n for n in self.nodes if n.core is None]
        if down and self.rng.random() < 0.6:
            self.restart(self.rng.choice(down))
        else:
            up = [n for n in self.nodes if n.core is not None]
            if up:
                self.crash(self.rng.choice(up))

    def _fault_partition(self) -> None:
        if self.partition is not None and self.rng.random() < 0.5:
            self.log("heal partition")
            self.partition = None
            return
        self.partition = {n.id: self.rng.randrange(2) for n in self.nodes}
        self.stats["partitions"] += 1
        self.log(f"partition {self.partition}")

    def _fault_slow_disk(self) -> None:
        node = self.rng.choice(self.nodes)
        node.slow_disk = not node.slow_disk

    def _fault_transfer(self) -> None:
        for node in self.leaders():
            assert node.core is not None
            voters = sorted(node.core.config.voters - {node.id})
            if voters:
                target = self.rng.choice(voters)
                self.log(f"transfer {node.id} -> {target}")
                node.core.transfer_leader(target)
                self._drive(node)

    def _fault_compact(self) -> None:
        node = self.rng.choice(self.nodes)
        if node.core is None:
            return
        upto = node.core.log.applied - self.rng.randint(0, 5)
        if upto > node.disk.base_index and upto < node.durable.last_index():
            self.log(f"compact {node.id} to {upto}")
            meta = node.core.retention_point(upto)
            node.disk.compact(meta)
            node.durable.compact(meta)

    def _fault_membership(self) -> None:
        leaders = self.leaders()
        if not leaders:
            return
        node = leaders[0]
        core = node.core
        assert core is not None
        config = core.config
        everyone = {n.id for n in self.nodes}
        choices: list[ConfChange] = []
        for spare in sorted(everyone - config.members):
            choices.append(ConfChange(ConfChangeType.ADD_LEARNER, spare))
        for learner in sorted(config.learners):
            choices.append(ConfChange(ConfChangeType.PROMOTE, learner))
        if len(config.voters) > 3:
            for voter in sorted(config.voters):
                choices.append(ConfChange(ConfChangeType.REMOVE, voter))
        if not choices:
            return
        change = self.rng.choice(choices)
        try:
            core.propose_config_change(change)
        except ConsensusError:
            return
        self.log(f"config change {change}")
        self._drive(node)

    # ---- the whole run -------------------------------------------------------------------

    def run(self, chaos_time: int, heal_time: int) -> None:
        try:
            self._schedule(self.rng.randint(1, self.faults.propose_every), self._propose)
            self._schedule(self.rng.randint(1, self.faults.fault_every), self._fault)
            self.run_until(chaos_time)
            self.heal()
            if not self.run_until(self.now + heal_time, self.converged):
                raise SimFailure(f"no convergence after healing: {self.status()}")
            self.checker.check_logs(self.nodes)
            self.check_acked()
        except AssertionError as exc:
            trace = "\n".join(self.trace[-40:])
            raise SimFailure(f"seed {self.seed}: {exc}\nlast events:\n{trace}") from exc

    def heal(self) -> None:
        self.log("heal")
        self.chaos = False
        self.partition = None
        self.loss = 0.0
        self.duplicate = 0.0
        for node in self.nodes:
            node.slow_disk = False
            if node.core is None:
                self.restart(node)

    def final_members(self) -> list[SimNode]:
        leaders = self.leaders()
        if len(leaders) != 1:
            return []
        assert leaders[0].core is not None
        return [self.nodes[i - 1] for i in sorted(leaders[0].core.config.members)]

    def converged(self) -> bool:
        leaders = self.leaders()
        if len(leaders) != 1:
            return False
        core = leaders[0].core
        assert core is not None
        # The leader must have committed something of its own term (everything before it).
        if core.log.term_at(core.commit_index) != core.term:
            return False
        if self.acked and max(self.acked.values()) > core.commit_index:
            return False
        return all(n.applied_index >= core.commit_index for n in self.final_members())

    def check_acked(self) -> None:
        for payload, index in self.acked.items():
            known = self.checker.committed.get(index)
            if known is None or known[1] != payload:
                raise SimFailure(f"acknowledged {payload!r} at {index} but applied {known}")
        for node in self.final_members():
            if self.acked and node.applied_index < max(self.acked.values()):
                raise SimFailure(f"node {node.id} did not apply every acknowledged entry")

    def status(self) -> str:
        parts = []
        for n in self.nodes:
            if n.core is None:
                parts.append(f"{n.id}:down")
            else:
                c = n.core
                parts.append(
                    f"{n.id}:{c.role.value} t{c.term} last={c.log.last_index()} "
                    f"commit={c.commit_index} applied={n.applied_index} "
                    f"voters={sorted(c.config.voters)}"
                )
        return "; ".join(parts)
