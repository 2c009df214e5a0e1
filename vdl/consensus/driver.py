"""The Trio driver of one Raft group: persists, sends and applies what its `RaftNode` asks.

One task per group runs the loop: take the inputs that arrived (ticks, messages, durable
reports, liveness changes), then drain every `Ready` exactly as `ready.py` prescribes:

1. `messages` go to the outbox at once (the leader replicates while its own write is in
   flight, VDL 5.2.5.1);
2. truncations and entries are written to the group's LogStore without syncing; a changed
   term or vote is written to the MetaStore (synced) before the loop goes on;
3. committed entries are applied to the state machine;
4. `advance`;
5. the Ready's `messages_after_persist` travel with the write they wait for, as etcd
   raft's asynchronous storage writes carry their responses (raft/rawnode.go): the mark
   handed to the node's Flusher carries them, the Flusher syncs the store together with
   every other dirty store (group commit), and in the report of the sync that covers them
   they leave at once, whatever the loop is doing, oldest first. What the core must hear
   (`on_persisted` for the last durable entry) is the loop's input: its next turn steps
   it, or, while the loop is parked and the group runs inline, the report's callback
   itself, so a leader's commit waits for no scheduling of the driver task either.

Ticks come from the node's `NodeClock` (`clock.py`), which ticks only the groups that are
awake: a quiesced group's loop stays parked, with no timer of its own, until a proposal, a
message or a liveness change the clock reports (`liveness_changed`) wakes it.

Proposals (`propose`) go straight into the core from the caller's task, so every proposal
made between two loop turns travels in one Ready: one store append, one flush, one
AppendEntries per follower. While the loop is parked with nothing pending, the first
proposal's Ready (AppendEntries and an append, nothing that awaits) is handled right in
`propose`, and in a stream's group so is the first message from each peer (`_step_now`)
and a commit that a durability report allows: the commit path then waits for no
scheduling of the driver task. A stream's group applies by index (`AppliesByIndex`):
committed payloads are never read back from the store for it.

Snapshots (a follower needs entries retention deleted on the leader): the follower's loop
keeps the leader's InstallSnapshot aside, a task pulls the leader's log up to the
snapshot's index into a staging of its store (`snapshot_transfer.py`: closed segments as
files, then entries, all checked and synced on disk), and the loop then swaps the staged
log in for its store's, records the snapshot and only then steps the message, so the
core's restore finds the data in place. A leader whose follower never confirms a snapshot
(the pull failed) offers it again after `snapshot_timeout_s`. Retention (`compact`) never
deletes what is not applied, and records the term and membership where the log now starts.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import trio

from vdl.backends.api import (
    Buffer,
    ClosedSegments,
    Entry,
    LogStore,
    MetaStore,
    SnapshotStaging,
    StorageError,
)
from vdl.consensus.clock import NodeClock
from vdl.consensus.errors import ProposalDropped, SafetyViolation
from vdl.consensus.hard_state_store import load_hard_state, save_hard_state
from vdl.consensus.machine import AppliesByIndex, StateMachine
from vdl.consensus.membership import ConfChange, Config
from vdl.consensus.messages import InstallSnapshot, Message
from vdl.consensus.options import RaftOptions
from vdl.consensus.outbox import Outbox
from vdl.consensus.progress import ProgressState
from vdl.consensus.raft import RaftNode
from vdl.consensus.ready import Ready
from vdl.consensus.snapshot_transfer import (
    SnapshotData,
    SnapshotError,
    load_snapshot_meta,
    save_snapshot_meta,
)
from vdl.consensus.stage_timers import GroupStageTimers, NoStageTimers
from vdl.consensus.state import NO_NODE, Role, SnapshotMeta
from vdl.log.flusher import Flusher
from vdl.metrics.stages import STAGES

log = logging.getLogger(__name__)


# Node-wide counters of the node's metrics (vdl/admin/metrics.py exposes them).
_LEADER_CHANGES = STAGES.counter("raft_leader_changes")  # a group learned of a new leader
_ELECTIONS_WON = STAGES.counter("raft_elections_won")  # this node became a group's leader
_SNAPSHOT_FETCHES = STAGES.counter("raft_snapshot_fetches")  # a follower began a pull
_SNAPSHOTS_INSTALLED = STAGES.counter("raft_snapshots_installed")


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """What a group's Raft state looks like from this node (the admin views and metrics)."""

    group_id: int
    role: str  # leader, follower, candidate, pre-candidate
    term: int
    leader_id: int  # 0 when unknown
    commit_index: int
    applied_index: int
    last_index: int
    quiesced: bool
    voters: frozenset[int]
    # While leader: each follower's match index (its log agrees with ours up to it), and
    # the bytes of our log after it (None where the store cannot tell).
    match: dict[int, int]
    lag_bytes: dict[int, int | None]


@dataclass(frozen=True, slots=True)
class DriverOptions:
    tick_s: float = 0.1  # wall time of one Raft tick
    inbox_limit: int = 8192  # messages waiting for the loop; more are dropped
    max_uncommitted: int = 8192  # proposed but uncommitted entries before proposals fail
    commit_hint_ticks: int = 20  # how often a moved commit index is saved (a restart hint)
    snapshot_timeout_s: float = 30.0  # a snapshot not confirmed by then is offered again
    # While the loop is parked, the callers' tasks take its next step themselves: a
    # durability report releases the acks it allows and applies what commits, a peer's
    # message is stepped and its Ready handled, a proposal's AppendEntries leave at once,
    # each without waiting for a scheduling of the loop's task. Only for a machine whose
    # callbacks start nothing (a log stream's); without it every input goes through the
    # loop, which owns the group alone (as etcd raft's node.go run() owns its RawNode).
    inline: bool = False


# (leader, group, snapshot, staging): the leader's log up to the snapshot, into `staging`.
SnapshotFetcher = Callable[[int, int, SnapshotMeta, SnapshotStaging], Awaitable[SnapshotData]]


@dataclass(slots=True)
class _PendingPersist:
    """After-persist messages of one Ready, released once the store is durable to `index`
    (the last entry written when the Ready was handled, of `term`)."""

    index: int
    term: int
    messages: tuple[Message, ...]


class GroupDriver:
    def __init__(
        self,
        group_id: int,
        node_id: int,
        voters: frozenset[int],
        store: LogStore,
        meta: MetaStore,
        flusher: Flusher,
        outbox: Outbox,
        machine: StateMachine,
        *,
        raft: RaftOptions | None = None,
        options: DriverOptions | None = None,
        rng: random.Random | None = None,
        applied: int | None = None,
        fetch_snapshot: SnapshotFetcher | None = None,
        clock: NodeClock | None = None,
    ) -> None:
        """`applied` is where `machine` already is (e.g. a stream's commit point rebuilt
        from the hint); committed entries after it are applied again. None: the log start.
        `clock` is the node's (shared by all its groups); without one the driver runs a
        clock of its own, which hears of no node liveness (a group alone on its node)."""
        self.group_id = group_id
        self.node_id = node_id
        self._store = store
        self._meta = meta
        self._flusher = flusher
        self._outbox = outbox
        self._machine = machine
        # A machine that only needs the commit point is told the index, and the core then
        # never reads committed payloads back from the store for it.
        self._index_machine = machine if isinstance(machine, AppliesByIndex) else None
        # A stream's group records the stages of a produce (vdl/metrics/stages.py).
        self._stages = NoStageTimers() if self._index_machine is None else GroupStageTimers()
        self._opts = options or DriverOptions()
        self._own_clock = clock is None
        self._clock = clock or NodeClock(self._opts.tick_s)
        # Whatever the store holds at start counts as durable (see log_view.py).
        store.sync()
        self._saved = load_hard_state(meta, group_id)
        snapshot = load_snapshot_meta(meta, group_id)
        if snapshot is not None and not (
            store.first_index() - 1 <= snapshot.index <= store.last_index()
        ):
            # Written before a retention or install that did not complete: it does not
            # describe where this log starts.
            snapshot = None
        raft = raft or RaftOptions()
        self._election_tick = raft.election_tick
        self.core = RaftNode(
            node_id,
            store,
            Config(voters),
            rng=rng or random.Random(),
            options=raft,
            hard_state=self._saved,
            applied=applied,
            snapshot=snapshot,
            apply_payloads=self._index_machine is None,
        )
        # Messages in arrival order, each with the ticks counted before it came: a turn
        # steps ticks and messages in the order they happened (see _drain).
        self._inbox: deque[tuple[int, Message]] = deque()
        self._ticks = 0
        self._hint_ticks = 0
        self._liveness_changed = False
        self._awake = True  # as the clock knows it
        self._contact: tuple[tuple[int, int], frozenset[int]] | None = None
        self._quiet_spells = 0  # times the group fell quiet (see settled)
        self._retention_saved: SnapshotMeta | None = None  # last point compact() recorded
        self._members_seen = self.core.config.members
        self._wakeup = trio.Event()
        # Marks handed to the flusher whose messages have not left yet, and the last
        # durable point the core has not heard of yet (see _released).
        self._carried = 0
        self._persisted: _PendingPersist | None = None
        self._durable_index = store.last_index()
        self._in_ready = False
        # Since the loop's last turn: a proposal's Ready was handled outside the loop, and
        # the peers a message was stepped from outside it (see propose and _step_now).
        self._sent_now = False
        self._stepped_now: set[int] = set()
        # True while run() waits for the next turn: no turn is half-done, so anything the
        # loop would do first (releasing what a sync made durable) may be done at once.
        self._parked = False
        self._meta_lock = trio.Lock()
        # Own proposals not yet written (index -> term), to tell them from a leader's.
        self._proposed: dict[int, int] = {}
        # Highest index the machine has heard of (proposed here or written from a leader).
        self._announced = store.last_index()
        self._heard: dict[int, float] = {}
        self._role_seen: tuple[int, int, bool] = (-1, -1, False)
        self._changed = trio.Event()
        self.dropped_messages = 0
        self.turns = 0  # passes of the loop (each costs a scheduling of the driver task)
        self._fetch = fetch_snapshot
        self._nursery: trio.Nursery | None = None
        self._fetching = 0  # snapshot index being pulled (0: none)
        self._fetched: tuple[InstallSnapshot, SnapshotData, SnapshotStaging] | None = None
        self._installed: SnapshotMeta | None = None
        self._snapshots_sent: dict[int, float] = {}  # follower -> when last offered
        self.snapshots_installed = 0
        self.snapshot_files_installed = 0  # segment files taken as they are, in all

    # ---- Flushable -------------------------------------------------------------------

    @property
    def store(self) -> LogStore:
        return self._store

    def on_durable(self, index: int) -> None:
        if index > self._durable_index:
            self._durable_index = index
        if not self._parked:
            # Mid-turn (a Ready being handled, a truncation or snapshot install waiting on
            # the flusher) the turn releases it itself, at the point where it is safe, and
            # always once more before it parks (see _drain).
            return
        if not self._opts.inline:
            if self._persisted is not None or self.core.has_ready():
                self._wakeup.set()  # otherwise the report needs no turn
            return
        # Exactly what the next turn would start with.
        self._step_persisted()
        core = self.core
        if core.has_ready() and not self._wakeup.is_set():
            # The leader commits, or entries became applicable: a stream applies them
            # right here (that only moves its commit point and wakes its waiters), so
            # the acks=all answer does not wait for a scheduling of the driver task.
            self._turn_now(apply=True)
        if core.has_ready():
            # Otherwise the report needs no turn: a wake-up would be an empty pass.
            self._wakeup.set()

    # ---- inputs from other tasks -------------------------------------------------------

    def deliver(self, message: Message) -> None:
        self._stages.delivered(message)
        if (
            self._parked
            and not self._wakeup.is_set()
            and not self._in_ready  # a transport that delivers within our own send
            and self._opts.inline
            and message.src not in self._stepped_now
            and not isinstance(message, InstallSnapshot)
        ):
            self._step_now(message)
            return
        if len(self._inbox) >= self._opts.inbox_limit:
            self.dropped_messages += 1
            return
        self._inbox.append((self._ticks, message))
        self._wakeup.set()

    def _step_now(self, message: Message) -> None:
        """Step a message and handle its Ready right here, from the reader's task: a
        follower's append is written (and its flush starts) and a leader's commit applied
        without waiting for a scheduling of the driver task, which on a busy event loop
        comes after every other runnable task.

        The loop is parked with no wake-up pending, so its inbox is empty and nothing else
        is ready: stepping now is what its next turn would do first. One message per peer
        per turn of the loop: the rest of a burst waits for the loop and shares its Ready
        (one store append, one AppendEntries per follower). Only for a stream's group,
        whose machine calls (announce written entries, move the commit point, note the
        leader) start nothing (`DriverOptions.inline`)."""
        core = self.core
        self._stepped_now.add(message.src)
        self._heard[message.src] = trio.current_time()
        if message.dst == self.node_id:
            self._step(message)
        if core.has_ready():
            self._turn_now(apply=True)
            if core.has_ready():
                # A truncation, a term or vote to save, or more to apply: the loop's job.
                self._wakeup.set()
        self._note_role()

    def next_index(self) -> int:
        """The index the next proposal will get (to build payloads that embed it)."""
        return self.core.log.last_index() + 1

    def propose(self, payloads: Sequence[Buffer]) -> tuple[int, int]:
        """Append entries as leader; (first, last) index. Raises NotLeader/ProposalDropped.

        Whether they commit shows in the machine: `apply` of these indexes, or
        `on_truncated` at or below them."""
        core = self.core
        if self._in_ready:
            # The loop is waiting on a write inside a Ready (a term change of a one-voter
            # group); the caller retries, as after any leadership change.
            raise ProposalDropped("the group is persisting its state")
        if core.log.last_index() - core.commit_index >= self._opts.max_uncommitted:
            raise ProposalDropped("too many uncommitted entries; replicas are behind")
        first, last = core.propose(payloads)
        self._sync_awake()
        term = core.term
        for index in range(first, last + 1):
            self._proposed[index] = term
        self._announced = max(self._announced, last)
        if self._opts.inline and self._parked and not self._wakeup.is_set() and not self._sent_now:
            # The loop is idle: send the AppendEntries now rather than after a scheduling
            # of the driver task. Only once per turn of the loop: proposals that follow
            # before the loop runs again share one Ready, as they would have without this.
            # The machine hears nothing of it (its own proposal is not announced, and
            # nothing new is applicable), so the proposer's caller is not re-entered.
            if self._turn_now(apply=False):
                self._sent_now = True
                if core.has_ready():
                    self._wakeup.set()  # not expected; but the loop must not park on it
                return first, last
        self._wakeup.set()
        return first, last

    def propose_config_change(self, change: ConfChange) -> int:
        """Append one membership change as leader; its index. Raises NotLeader,
        ConfigChangeRejected (invalid, another pending, a learner not caught up)."""
        if self._in_ready:
            raise ProposalDropped("the group is persisting its state")
        index = self.core.propose_config_change(change)
        self._sync_awake()
        # Our own entry: the write must not take it for a leader's replacing entry.
        self._proposed[index] = self.core.term
        self._announced = max(self._announced, index)
        self._wakeup.set()
        return index

    def campaign(self) -> None:
        self.core.campaign()
        self._sync_awake()
        self._wakeup.set()

    def transfer_leader(self, target: int) -> None:
        """Hand leadership to `target` (sent on the loop's next turn, which this wakes)."""
        self.core.transfer_leader(target)
        self._sync_awake()
        self._wakeup.set()

    # ---- views -----------------------------------------------------------------------

    @property
    def leader_id(self) -> int:
        return self.core.leader_id

    @property
    def is_leader(self) -> bool:
        return self.core.role is Role.LEADER

    @property
    def term(self) -> int:
        return self.core.term

    @property
    def commit_index(self) -> int:
        return self.core.commit_index

    @property
    def voters(self) -> frozenset[int]:
        return self.core.config.voters

    @property
    def config(self) -> Config:
        return self.core.config

    def match(self) -> dict[int, int]:
        """While leader: how far each follower's log matches ours."""
        return {node: pr.match for node, pr in self.core.progress.items()}

    def status(self) -> GroupStatus:
        core = self.core
        leader = core.role is Role.LEADER
        match = (
            {n: pr.match for n, pr in core.progress.items() if n != self.node_id} if leader else {}
        )
        return GroupStatus(
            group_id=self.group_id,
            role=core.role.value,
            term=core.term,
            leader_id=core.leader_id,
            commit_index=core.commit_index,
            applied_index=core.log.applied,
            last_index=core.log.last_index(),
            quiesced=core.quiesced,
            voters=core.config.voters,
            match=match,
            lag_bytes={n: self._store.bytes_after(m) for n, m in match.items()},
        )

    def in_contact(self) -> frozenset[int]:
        """This node and the voters heard from within an election timeout (the ISR); in
        a quiesced group, where nobody speaks, the voters node liveness holds for up."""
        voters = self.voters
        settled = self.settled()
        if settled is not None:
            cached = self._contact
            if cached is not None and cached[0] == settled:
                return cached[1]
            up = self._clock.liveness.up
            contact = frozenset(v for v in voters if v == self.node_id or v in up)
            self._contact = (settled, contact)
            return contact
        horizon = trio.current_time() - self._opts.tick_s * self._election_tick
        alive = {n for n, t in self._heard.items() if t >= horizon and n in voters}
        return frozenset(alive | {self.node_id})

    @property
    def quiesced(self) -> bool:
        return self.core.quiesced

    def settled(self) -> tuple[int, int] | None:
        """While the group is quiesced: a value that stays the same as long as nothing
        about it (role, term, members, who is in contact) can change, for callers that
        cache what they derive from it; None while it is awake."""
        if not self.core.quiesced or self._awake:
            return None
        return (self._quiet_spells, self._clock.liveness.changes)

    # ---- inputs from the node's clock ----------------------------------------------------

    def tick(self) -> None:
        self._ticks += 1
        self._hint_ticks += 1
        self._wakeup.set()

    def liveness_changed(self, peers: frozenset[int]) -> None:
        self._liveness_changed = True
        self._wakeup.set()

    def _sync_awake(self) -> None:
        """Tell the clock whether to tick this group, and of membership changes."""
        core = self.core
        awake = not core.quiesced
        if awake != self._awake:
            self._awake = awake
            self._clock.set_awake(self, awake)
            if not awake:
                self._quiet_spells += 1
                # No tick will come to save the commit hint later: one more turn does.
                self._hint_ticks = self._opts.commit_hint_ticks
                self._wakeup.set()
        members = core.config.members
        if members != self._members_seen:
            self._members_seen = members
            self._clock.set_members(self, members)

    async def wait_changed(self) -> None:
        """Wait for the next change of leader, role or term (tests, metadata waits)."""
        await self._changed.wait()

    # ---- the loop --------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        clock = self._clock
        clock.add(self, self.core.config.members)
        self._awake = True
        self.core.dead_peers = clock.down(self.core.config.members - {self.node_id})
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self._own_clock:
                    nursery.start_soon(clock.run)
                task_status.started()
                await self._drain()  # a restarted node applies what it already knows committed
                while True:
                    self._parked = True
                    try:
                        await self._wakeup.wait()
                    finally:
                        self._parked = False
                    self._wakeup = trio.Event()
                    await self._drain()
        finally:
            clock.remove(self)

    async def _drain(self) -> None:
        core = self.core
        self.turns += 1
        self._sent_now = False
        self._stepped_now.clear()
        self._step_persisted()
        if self._fetched is not None:
            offer, data, staging = self._fetched
            self._fetched = None
            await self._install_snapshot(offer, data, staging)
        # Ticks and messages in the order they came. A turn that starts late (the last
        # one awaited a sync, or the event loop was busy) finds several of each; ticking
        # them all first would judge a leader's quorum or a follower's election timeout
        # before stepping the acks and heartbeats that arrived in that time, and depose a
        # leader whose followers answered all along.
        ticks, self._ticks = self._ticks, 0
        inbox, self._inbox = self._inbox, deque()
        ticked = 0
        now = trio.current_time()
        for before, message in inbox:
            for _ in range(before - ticked):
                core.tick()
            ticked = max(ticked, before)
            self._heard[message.src] = now
            if message.dst != self.node_id:
                continue
            if isinstance(message, InstallSnapshot) and self._needs_data(message):
                self._start_fetch(message)
                continue
            self._step(message)
        for _ in range(ticks - ticked):
            core.tick()
        if ticks:
            self._retry_snapshots()
        if self._liveness_changed:
            self._liveness_changed = False
            core.dead_peers = self._clock.down(core.config.members - {self.node_id})
            core.wake()
        while True:
            while core.has_ready():
                await self._handle_ready(core.ready())
            # What became durable meanwhile (reports that came mid-turn, or a Ready whose
            # store was durable already): it may let the leader commit or make entries
            # applicable, and the loop parks only once nothing is ready, which is what
            # lets `on_durable` skip the wake-up when it finds nothing ready.
            self._step_persisted()
            if not core.has_ready():
                break
        if self._hint_ticks >= self._opts.commit_hint_ticks:
            # The commit point as a restart hint, now and then (see _sync_awake).
            self._hint_ticks = 0
            await self._save_hard_state(force=False)
        self._note_role()

    def _step(self, message: Message) -> None:
        """Step a peer's message; one the core refuses as breaking Raft's rules (it would
        overwrite committed entries, say) is dropped with one line, and the group carries
        on: the core checks before it changes anything."""
        try:
            self.core.step(message)
        except (SafetyViolation, ValueError) as exc:
            self.dropped_messages += 1
            log.error(
                "group %d: dropping %s from node %d: %s",
                self.group_id,
                type(message).__name__,
                message.src,
                exc,
            )

    async def _handle_ready(self, rd: Ready) -> None:
        core = self.core
        self._in_ready = True
        try:
            self._send(rd)
            if rd.snapshot is not None:
                if rd.snapshot != self._installed:
                    raise RuntimeError(f"group {self.group_id}: a snapshot without its data")
                self._installed = None
                self._machine.on_restored(rd.snapshot.index)
            if rd.truncate_from is not None:
                await self._truncate_store(rd.truncate_from)
            wrote = self._write(rd)
            if rd.hard_state is not None and (rd.hard_state.term, rd.hard_state.vote) != (
                self._saved.term,
                self._saved.vote,
            ):
                # Term and vote must be on disk before any answer that depends on them.
                await self._save_hard_state(force=True)
            self._apply(rd)
            core.advance(rd)
        finally:
            self._in_ready = False
        self._after_ready(rd, wrote)

    def _turn_now(self, *, apply: bool) -> bool:
        """Handle the next Ready right here, outside the loop, if nothing in it awaits (no
        truncation, snapshot or term and vote to save) and it applies nothing unless
        `apply`; False (nothing done) otherwise.

        Only while the loop is parked with no wake-up pending: the loop parks only once
        nothing is ready, and every input since then would have set the wake-up, so the
        Ready holds just what the caller itself caused (a proposal's AppendEntries and
        entries, or a commit that a durability report allowed)."""
        core = self.core
        log_view = core.log
        unstable = log_view.unstable
        if (
            self._in_ready
            or unstable.truncate_from is not None
            or (unstable.snapshot is not None and not unstable.snapshot_handed)
            or (core.term, core.vote) != (self._saved.term, self._saved.vote)
            or (not apply and log_view.has_applicable())
        ):
            return False
        rd = core.ready()
        self._in_ready = True
        try:
            self._send(rd)
            wrote = self._write(rd)
            self._apply(rd)
            core.advance(rd)
        finally:
            self._in_ready = False
        self._after_ready(rd, wrote)
        self._step_persisted()  # a Ready whose store was durable already owes nothing more
        return True

    def _apply(self, rd: Ready) -> None:
        if rd.apply_to:
            if self._index_machine is not None:
                self._index_machine.apply_to(rd.apply_to)
            else:
                self._machine.apply(rd.committed_entries)

    def _send(self, rd: Ready) -> None:
        for message in rd.messages:
            if isinstance(message, InstallSnapshot):
                self._snapshots_sent[message.dst] = trio.current_time()
            self._outbox.send(self.group_id, message)
            self._stages.sent(message)

    def _after_ready(self, rd: Ready, wrote: bool) -> None:
        if not rd.needs_persist:
            if wrote:
                self._flusher.mark_dirty(self)
            return
        last = self._store.last_index()
        term = self._store.term_at(last) if last >= self._store.first_index() else 0
        owed = _PendingPersist(last, term, rd.messages_after_persist)
        if not wrote and self._carried == 0 and last <= self._durable_index:
            # Durable already, and nothing earlier still waits: nothing to wait for.
            self._released(owed)
            return
        self._carried += 1
        self._flusher.mark_dirty(self, partial(self._carried_through, owed))

    def _carried_through(self, owed: _PendingPersist) -> None:
        self._carried -= 1
        self._released(owed)

    def _released(self, owed: _PendingPersist) -> None:
        """Everything written up to `owed.index` is durable: its messages leave now (from
        the flusher's report, whatever the loop is doing); the core hears of it in the
        loop's next step (`_step_persisted`)."""
        for message in owed.messages:
            self._outbox.send(self.group_id, message)
        self._persisted = owed

    def _write(self, rd: Ready) -> bool:
        """Append the Ready's entries to the store (after its truncation, if any, is done)
        and tell the machine what changed; True if the store changed."""
        entries = rd.entries
        cut = rd.truncate_from
        own = 0
        for entry in entries:
            if self._proposed.pop(entry.index, None) == entry.term:
                own += 1
                continue
            if entry.index <= self._announced:
                # A leader's entry where the machine knew another one (possibly our own
                # proposal, never written): that one is gone.
                cut = entry.index if cut is None else min(cut, entry.index)
            break
        if cut is not None:
            # After the store's truncation: the machine may rebuild state from the store.
            self._machine.on_truncated(cut)
            for index in [i for i in self._proposed if i >= cut]:
                del self._proposed[index]
            self._announced = cut - 1
        if not entries:
            return rd.truncate_from is not None
        self._store.append(entries)
        self._stages.written(entries[-1].index, self.core.role is Role.LEADER)
        foreign = entries[own:]
        for entry in foreign:
            self._proposed.pop(entry.index, None)
        if foreign:
            self._machine.on_written(foreign)
        self._announced = max(self._announced, entries[-1].index)
        return True

    async def _truncate_store(self, from_index: int) -> None:
        # Make everything written so far durable first and answer for it: an ack already
        # owed for an entry about to be cut must not be sent after the cut (it would claim
        # an entry this node no longer has). Only followers truncate, and rarely.
        owed = await self._flusher.release(self)
        await trio.to_thread.run_sync(self._store.sync)
        self._durable_index = max(self._durable_index, self._store.last_index())
        for then in owed:
            then()
        self._step_persisted()
        self._store.truncate_suffix(from_index)
        self._stages.truncated(from_index)
        self._durable_index = min(self._durable_index, from_index - 1)

    def _step_persisted(self) -> None:
        self._stages.durable(self._durable_index)
        last, self._persisted = self._persisted, None
        if last is not None and last.index > 0:
            # The leader may commit now, or entries become applicable: whoever called
            # this looks at `has_ready` next.
            self.core.on_persisted(last.index, last.term)
            self._machine.on_persisted(last.index)

    # ---- snapshots and retention ---------------------------------------------------------

    def _needs_data(self, m: InstallSnapshot) -> bool:
        core = self.core
        snap = m.snapshot
        return (
            m.term >= core.term
            and snap.index > core.commit_index
            and core.log.term_at(snap.index) != snap.term
        )

    def _start_fetch(self, m: InstallSnapshot) -> None:
        if self._fetch is None or self._nursery is None:
            log.warning("group %d: cannot take a snapshot without a transport", self.group_id)
            return
        if self._fetching >= m.snapshot.index:
            return  # a pull of at least that much is under way
        self._fetching = m.snapshot.index
        _SNAPSHOT_FETCHES.inc()
        self._nursery.start_soon(self._fetch_task, m, self._fetch)

    async def _fetch_task(self, m: InstallSnapshot, fetch: SnapshotFetcher) -> None:
        staging = self._store.stage_snapshot()
        try:
            data = await fetch(m.src, self.group_id, m.snapshot, staging)
        except (SnapshotError, StorageError, OSError) as exc:
            # The leader offers the snapshot again after its timeout.
            log.warning("group %d: snapshot from node %d failed: %s", self.group_id, m.src, exc)
            await _discard(staging)
            return
        except Exception:
            # Whatever the leader's bytes make go wrong costs this pull, never the node.
            log.exception("group %d: snapshot from node %d failed", self.group_id, m.src)
            await _discard(staging)
            return
        except BaseException:
            await _discard(staging)
            raise
        finally:
            self._fetching = 0
        if self._fetched is not None:
            await _discard(self._fetched[2])  # an older pull, superseded
        self._fetched = (m, data, staging)
        self._wakeup.set()

    async def _install_snapshot(
        self, m: InstallSnapshot, data: SnapshotData, staging: SnapshotStaging
    ) -> None:
        core = self.core
        snap = m.snapshot
        if not self._needs_data(m):
            # Caught up meanwhile, or a newer leader: let the core answer as it would.
            await _discard(staging)
            if m.term >= core.term:
                self._step(m)
            return
        # No sync of the old content may report durability after the swap; what was owed
        # for content no sync has taken refers to entries about to be gone.
        await self._flusher.release(self)
        self._carried = 0
        try:
            self._store.install_snapshot(staging)
        except StorageError as exc:
            log.warning("group %d: installing a snapshot failed: %s", self.group_id, exc)
            await _discard(staging)
            return
        await trio.to_thread.run_sync(self._store.sync)
        await trio.to_thread.run_sync(save_snapshot_meta, self._meta, self.group_id, snap)
        _SNAPSHOTS_INSTALLED.inc()
        self._retention_saved = snap
        # The core's restore from the snapshot supersedes any durable point of the old content.
        self._persisted = None
        self._proposed.clear()
        self._durable_index = snap.index
        self._announced = snap.index
        self._installed = snap
        self.snapshots_installed += 1
        self.snapshot_files_installed += data.files
        log.info(
            "group %d: installed a snapshot of %d..%d from node %d: "
            "%d segment files (%d bytes), then %d entries",
            self.group_id,
            data.first_index,
            snap.index,
            m.src,
            data.files,
            data.file_bytes,
            data.entries,
        )
        self._step(m)

    def _retry_snapshots(self) -> None:
        core = self.core
        now = trio.current_time()
        for peer, sent in list(self._snapshots_sent.items()):
            pr = core.progress.get(peer)
            if pr is None or pr.state is not ProgressState.SNAPSHOT:
                del self._snapshots_sent[peer]
            elif now - sent >= self._opts.snapshot_timeout_s:
                del self._snapshots_sent[peer]
                core.report_snapshot(peer, ok=False)
                self._wakeup.set()

    def snapshot_start(self) -> tuple[int, int]:
        return self._store.first_index(), self._store.first_offset()

    def snapshot_files(self, upto: int) -> ClosedSegments:
        return self._store.closed_segments(upto)

    def snapshot_entries(self, lo: int, upto: int, max_bytes: int) -> Iterator[list[Entry]]:
        """Stored entries `lo`..`upto`, in chunks (serving a snapshot)."""
        while lo <= upto:
            try:
                chunk = self._store.entries(lo, upto + 1, max_bytes)
            except StorageError as exc:
                raise SnapshotError(f"entry {lo} cannot be read: {exc}") from None
            if not chunk:
                raise SnapshotError(f"entry {lo} is gone")
            yield chunk
            lo = chunk[-1].index + 1

    def compact(self, now_ms: int, drop_before: int | None = None) -> int:
        """Retention: delete what the store's limits allow (and whole segments before index
        `drop_before`, below a DeleteRecords log start), never what is not applied, and
        record where the log now starts (term and membership there) for restarts."""
        core = self.core
        applied = core.log.applied
        store = self._store
        if applied < store.first_index():
            return 0
        try:
            bound = core.retention_point(applied)
        except ValueError:
            return 0  # the term there is unknown (a restart lost the record): keep it all
        # First a point the deletion cannot pass, in case of a crash while it runs...
        self._save_retention_point(bound)
        removed = store.apply_retention(now_ms, keep_from=applied + 1, drop_before=drop_before)
        try:
            # ...then exactly where the log starts now.
            point = core.retention_point(store.first_index() - 1)
        except ValueError:
            return removed
        self._save_retention_point(point)
        return removed

    def _save_retention_point(self, point: SnapshotMeta) -> None:
        # An idle group's points do not move between passes: no write for them.
        if point != self._retention_saved:
            save_snapshot_meta(self._meta, self.group_id, point)
            self._retention_saved = point

    async def _save_hard_state(self, *, force: bool) -> None:
        async with self._meta_lock:
            hs = self.core.hard_state()
            if not force and hs == self._saved:
                return
            await trio.to_thread.run_sync(save_hard_state, self._meta, self.group_id, hs)
            self._saved = hs

    def _note_role(self) -> None:
        core = self.core
        seen = (core.leader_id, core.term, core.role is Role.LEADER)
        if seen != self._role_seen:
            if self._role_seen[2] and not seen[2] and seen[1] == self._role_seen[1]:
                # Not deposed by a newer term: check-quorum, or our own removal.
                log.warning(
                    "group %d: stepped down in term %d (no quorum heard from within an "
                    "election timeout, or removed from the group)",
                    self.group_id,
                    core.term,
                )
            elif core.leader_id != NO_NODE and seen[:2] != self._role_seen[:2]:
                log.info("group %d: node %d leads in term %d", self.group_id, *seen[:2])
                _LEADER_CHANGES.inc()
            if seen[2] and not self._role_seen[2]:
                _ELECTIONS_WON.inc()
            self._role_seen = seen
            self._clock.version += 1
            self._machine.on_role_change(core.leader_id, core.term, seen[2])
            self._changed.set()
            self._changed = trio.Event()
        self._sync_awake()

    # ---- shutdown --------------------------------------------------------------------

    async def close(self) -> None:
        """After `run` is cancelled: save the commit hint, wait out an in-flight sync."""
        with trio.CancelScope(shield=True):
            await self._save_hard_state(force=False)
            await self._flusher.release(self)  # what it owed, nobody hears of any more
            self._carried = 0
            if self._fetched is not None:
                await _discard(self._fetched[2])
                self._fetched = None


async def _discard(staging: SnapshotStaging) -> None:
    with trio.CancelScope(shield=True):
        await trio.to_thread.run_sync(staging.discard)
