"""The Trio driver of one Raft group: persists, sends and applies what its `RaftNode` asks.

One task per group runs the loop: take the inputs that arrived (ticks, messages, durable
reports), then drain every `Ready` exactly as `ready.py` prescribes:

1. `messages` go to the outbox at once (the leader replicates while its own write is in
   flight, VDL 5.2.5.1);
2. truncations and entries are written to the group's LogStore without syncing; a changed
   term or vote is written to the MetaStore (synced) before the loop goes on;
3. committed entries are applied to the state machine;
4. `advance`;
5. the Ready's `messages_after_persist` wait in a FIFO with the store's last index at that
   moment; the node's Flusher syncs the store together with every other dirty store (group
   commit) and calls `on_durable(index)`; batches up to `index` then leave, oldest first,
   and the core hears `on_persisted` for the last durable entry.

Proposals (`propose`) go straight into the core from the caller's task, so every proposal
made between two loop turns travels in one Ready: one store append, one flush, one
AppendEntries per follower.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import trio

from vdl.backends.api import Buffer, LogStore, MetaStore
from vdl.consensus.errors import ProposalDropped
from vdl.consensus.hard_state_store import load_hard_state, save_hard_state
from vdl.consensus.machine import StateMachine
from vdl.consensus.membership import Config
from vdl.consensus.messages import Message
from vdl.consensus.options import RaftOptions
from vdl.consensus.outbox import Outbox
from vdl.consensus.raft import RaftNode
from vdl.consensus.ready import Ready
from vdl.consensus.state import Role
from vdl.log.flusher import Flusher

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DriverOptions:
    tick_s: float = 0.1  # wall time of one Raft tick
    inbox_limit: int = 8192  # messages waiting for the loop; more are dropped
    max_uncommitted: int = 8192  # proposed but uncommitted entries before proposals fail
    commit_hint_ticks: int = 20  # how often a moved commit index is saved (a restart hint)


@dataclass(slots=True)
class _PendingPersist:
    """After-persist messages of one Ready, released once the store is durable to `index`."""

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
    ) -> None:
        """`applied` is where `machine` already is (e.g. a stream's commit point rebuilt
        from the hint); committed entries after it are applied again. None: the log start."""
        self.group_id = group_id
        self.node_id = node_id
        self._store = store
        self._meta = meta
        self._flusher = flusher
        self._outbox = outbox
        self._machine = machine
        self._opts = options or DriverOptions()
        # Whatever the store holds at start counts as durable (see log_view.py).
        store.sync()
        self._saved = load_hard_state(meta, group_id)
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
        )
        self._inbox: deque[Message] = deque()
        self._ticks = 0
        self._wakeup = trio.Event()
        self._pending: deque[_PendingPersist] = deque()
        self._durable_index = store.last_index()
        self._in_ready = False
        self._meta_lock = trio.Lock()
        # Own proposals not yet written (index -> term), to tell them from a leader's.
        self._proposed: dict[int, int] = {}
        # Highest index the machine has heard of (proposed here or written from a leader).
        self._announced = store.last_index()
        self._heard: dict[int, float] = {}
        self._role_seen: tuple[int, int, bool] = (-1, -1, False)
        self._changed = trio.Event()
        self.dropped_messages = 0

    # ---- Flushable -------------------------------------------------------------------

    @property
    def store(self) -> LogStore:
        return self._store

    def on_durable(self, index: int) -> None:
        # Only note it here: the core is touched by the driver's own task alone.
        if index > self._durable_index:
            self._durable_index = index
        self._wakeup.set()

    # ---- inputs from other tasks -------------------------------------------------------

    def deliver(self, message: Message) -> None:
        if len(self._inbox) >= self._opts.inbox_limit:
            self.dropped_messages += 1
            return
        self._inbox.append(message)
        self._wakeup.set()

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
        term = core.term
        for index in range(first, last + 1):
            self._proposed[index] = term
        self._announced = max(self._announced, last)
        self._wakeup.set()
        return first, last

    def campaign(self) -> None:
        self.core.campaign()
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

    def in_contact(self) -> frozenset[int]:
        """This node and the voters heard from within an election timeout (the ISR)."""
        horizon = trio.current_time() - self._opts.tick_s * self._election_tick
        alive = {n for n, t in self._heard.items() if t >= horizon and n in self.voters}
        return frozenset(alive | {self.node_id})

    async def wait_changed(self) -> None:
        """Wait for the next change of leader, role or term (tests, metadata waits)."""
        await self._changed.wait()

    # ---- the loop --------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._ticker)
            task_status.started()
            await self._drain()  # a restarted node applies what it already knows committed
            while True:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                await self._drain()

    async def _ticker(self) -> None:
        count = 0
        while True:
            await trio.sleep(self._opts.tick_s)
            self._ticks += 1
            self._wakeup.set()
            count += 1
            if count % self._opts.commit_hint_ticks == 0:
                await self._save_hard_state(force=False)

    async def _drain(self) -> None:
        core = self.core
        self._release_durable()
        ticks, self._ticks = self._ticks, 0
        for _ in range(ticks):
            core.tick()
        inbox, self._inbox = self._inbox, deque()
        now = trio.current_time()
        for message in inbox:
            self._heard[message.src] = now
            if message.dst != self.node_id:
                continue
            core.step(message)
        while core.has_ready():
            await self._handle_ready(core.ready())
        self._release_durable()
        self._note_role()

    async def _handle_ready(self, rd: Ready) -> None:
        core = self.core
        self._in_ready = True
        try:
            for message in rd.messages:
                self._outbox.send(self.group_id, message)
            if rd.snapshot is not None:
                # Retention of replicated logs (and so snapshots) is not wired yet.
                raise RuntimeError(f"group {self.group_id}: snapshots are not supported")
            wrote = await self._write(rd)
            if rd.hard_state is not None and (rd.hard_state.term, rd.hard_state.vote) != (
                self._saved.term,
                self._saved.vote,
            ):
                # Term and vote must be on disk before any answer that depends on them.
                await self._save_hard_state(force=True)
            if rd.committed_entries:
                self._machine.apply(rd.committed_entries)
            core.advance(rd)
        finally:
            self._in_ready = False
        if rd.needs_persist:
            last = self._store.last_index()
            term = self._store.term_at(last) if last >= self._store.first_index() else 0
            self._pending.append(_PendingPersist(last, term, rd.messages_after_persist))
        if wrote:
            self._flusher.mark_dirty(self)

    async def _write(self, rd: Ready) -> bool:
        """Apply the Ready's truncation and entries to the store; True if anything changed."""
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
        if rd.truncate_from is not None:
            await self._truncate_store(rd.truncate_from)
        if cut is not None:
            # After the store's truncation: the machine may rebuild state from the store.
            self._machine.on_truncated(cut)
            for index in [i for i in self._proposed if i >= cut]:
                del self._proposed[index]
            self._announced = cut - 1
        if not entries:
            return rd.truncate_from is not None
        self._store.append(entries)
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
        await self._flusher.release(self)
        await trio.to_thread.run_sync(self._store.sync)
        self._durable_index = max(self._durable_index, self._store.last_index())
        self._release_durable()
        self._store.truncate_suffix(from_index)
        self._durable_index = min(self._durable_index, from_index - 1)

    def _release_durable(self) -> None:
        durable = self._durable_index
        last: _PendingPersist | None = None
        while self._pending and self._pending[0].index <= durable:
            batch = self._pending.popleft()
            for message in batch.messages:
                self._outbox.send(self.group_id, message)
            last = batch
        if last is not None and last.index > 0:
            self.core.on_persisted(last.index, last.term)
            self._wakeup.set()  # the leader may commit, or more may be ready

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
            self._role_seen = seen
            self._machine.on_role_change(core.leader_id, core.term, seen[2])
            self._changed.set()
            self._changed = trio.Event()

    # ---- shutdown --------------------------------------------------------------------

    async def close(self) -> None:
        """After `run` is cancelled: save the commit hint, wait out an in-flight sync."""
        with trio.CancelScope(shield=True):
            await self._save_hard_state(force=False)
            await self._flusher.release(self)
