"""One Raft group member as a pure state machine.

Inputs: `step(message)`, `tick()`, `propose(...)`, `propose_config_change(...)`,
`campaign()`, `transfer_leader(...)`, `report_snapshot(...)`, `on_persisted(...)`.
Output: `ready()` returns a `Ready` (see `vdl.consensus.ready` for the driver's duties),
acknowledged with `advance(ready)`. Nothing here touches a socket, a file or a clock; time
is the number of `tick()` calls and the only randomness is the `random.Random` passed in.

Choices worth knowing:
- Pipeline (VDL 5.2.5.1): the leader's AppendEntries go out before its own write is durable
  (`Ready.messages`), and the leader counts itself towards a commit only up to
  `on_persisted`. Followers answer appends in `Ready.messages_after_persist`, so an
  acknowledgement always means "durable here".
- Proposals only append to the in-memory tail; AppendEntries are built when `ready()` is
  called, so every proposal between two Readys travels in one message per follower.
- A commit that moves is not broadcast on its own: followers learn it from the next
  AppendEntries or heartbeat (every `heartbeat_tick`). Only the leader answers clients, and
  an extra heartbeat and answer per follower per commit nearly doubled the messages (and
  the CPU) of every acks=all write.
- Membership takes effect when a CONFIG entry is appended (see `membership.py`).
- Pre-vote and check-quorum are on by default; while a node hears from a leader (within an
  election timeout) it ignores vote requests, unless they come from a leader transfer.
- Quiescence (as CockroachDB quiesces idle ranges): a leader whose followers all hold,
  durably, everything it has, and know it committed, says so in one last heartbeat
  (`quiesce`) and stops ticking; a follower that holds exactly that log stops too. Ticks
  are then no-ops, so a driver may skip them. A leader wakes on any proposal or message
  (but its followers' answers to that heartbeat) and on `wake()`, which the driver calls
  when node liveness sees a member go down, come back or restart: it heartbeats at once,
  and with check-quorum steps down if it no longer reaches a majority. A follower wakes on
  its leader's messages, a newer term, or `wake()` when liveness holds its leader for down
  (then the live voters campaign in turns); anything else it answers asleep, in lease, as
  waking the group is the leader's business. A leader only quiesces while
  it reaches every follower not in `dead_peers` (the driver's liveness view) and those
  with it form a majority, so check-quorum's guarantee holds through quiescence: a leader
  cut off from its majority is woken by liveness and steps down an election timeout later.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from vdl.backends.api import Buffer, Entry, EntryType
from vdl.consensus.errors import (
    ConfigChangeRejected,
    NotLeader,
    ProposalDropped,
)
from vdl.consensus.log_view import LogSource, RaftLog
from vdl.consensus.membership import (
    ConfChange,
    ConfChangeType,
    Config,
    ConfigHistory,
    decode_config,
    encode_config,
)
from vdl.consensus.messages import (
    LEADER_MESSAGES,
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    RequestVote,
    TimeoutNow,
    VoteResponse,
)
from vdl.consensus.options import RaftOptions
from vdl.consensus.progress import Progress, ProgressState
from vdl.consensus.ready import Ready
from vdl.consensus.state import NO_NODE, HardState, Role, SnapshotMeta


def _no_handle(_: SnapshotMeta) -> bytes:
    return b""


class RaftNode:
    def __init__(
        self,
        node_id: int,
        storage: LogSource,
        config: Config,
        *,
        rng: random.Random,
        options: RaftOptions | None = None,
        hard_state: HardState | None = None,
        snapshot: SnapshotMeta | None = None,
        config_index: int = 0,
        applied: int | None = None,
        snapshot_handle: Callable[[SnapshotMeta], bytes] = _no_handle,
        apply_payloads: bool = True,
    ) -> None:
        """Start (or restart) a node from what its driver persisted.

        `config` is the membership in force at `config_index` (the bootstrap configuration
        with 0, or the last committed one the driver recorded); CONFIG entries stored after
        it are replayed so that uncommitted changes are in force again. With `snapshot`, the
        snapshot's configuration and index take that role. `applied` is where the driver's
        readers already are (default: the log's start); committed entries after it are
        delivered again. Without `apply_payloads`, Readys name the last index to apply
        (`apply_to`) but carry no `committed_entries`, so none are read back from storage.
        """
        if node_id <= 0:
            raise ValueError("node ids must be positive")
        self.id = node_id
        self._opts = options or RaftOptions()
        self._rng = rng
        self._snapshot_handle = snapshot_handle
        self._apply_payloads = apply_payloads
        hs = hard_state or HardState()
        self._log = RaftLog(storage, snapshot, hs.commit, applied)
        if snapshot is not None:
            self._confs = ConfigHistory(snapshot.config, snapshot.index)
        else:
            self._confs = ConfigHistory(config, config_index)
        self._replay_config_entries(max(self._confs.last_index + 1, self._log.first_index()))

        self.term = hs.term
        self.vote = hs.vote
        self.role = Role.FOLLOWER
        self.leader_id = NO_NODE
        self._progress: dict[int, Progress] = {}
        self._votes: dict[int, bool] = {}
        self._transferee = NO_NODE
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_timeout = self._opts.election_tick
        self._msgs: list[Message] = []
        self._msgs_after: list[Message] = []
        self._bcast_entries = False
        self._awaiting_advance = False
        self._prev_hard_state = hs
        self.quiesced = False
        # Members node liveness holds for down (set by the driver): a leader may quiesce
        # without hearing from them, as long as the rest make a majority.
        self.dead_peers: frozenset[int] = frozenset()
        self.quiesce_count = 0  # times this node quiesced (tests, metrics)
        self._become_follower(self.term, NO_NODE)

    def _replay_config_entries(self, lo: int) -> None:
        hi = self._log.last_index() + 1
        while lo < hi:
            batch = self._log.entries(lo, hi, 4 * 1024 * 1024)
            for entry in batch:
                if entry.type == EntryType.CONFIG:
                    self._confs.append(entry.index, decode_config(entry.payload))
            lo = batch[-1].index + 1

    # ---- read-only views -------------------------------------------------------------

    @property
    def config(self) -> Config:
        return self._confs.current

    @property
    def commit_index(self) -> int:
        return self._log.committed

    @property
    def log(self) -> RaftLog:
        """The log view (for drivers' diagnostics and tests; do not mutate)."""
        return self._log

    @property
    def progress(self) -> Mapping[int, Progress]:
        """Per-follower progress while leader (empty otherwise); do not mutate."""
        return self._progress

    @property
    def lead_transferee(self) -> int:
        return self._transferee

    def retention_point(self, index: int) -> SnapshotMeta:
        """What the driver must record before retention deletes the entries up to `index`
        (at most the applied index), and pass back as `snapshot` when it restarts the node:
        the log then starts after a prefix whose last term and membership are known."""
        if index > self._log.applied:
            raise ValueError(f"index {index} is not applied yet (applied {self._log.applied})")
        term = self._log.term_at(index)
        if term is None:
            raise ValueError(f"term at {index} is unknown")
        return SnapshotMeta(index, term, self._confs.at(index))

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self._log.committed)

    # ---- inputs ----------------------------------------------------------------------

    def tick(self) -> None:
        if self.quiesced:
            return
        if self.role is Role.LEADER:
            self._tick_leader()
        else:
            self._tick_election()

    def wake(self) -> None:
        """Node liveness changed for a member of this group (down, up, restarted): tick
        again if quiesced; a leader heartbeats at once (a restarted follower learns of it)."""
        if not self.quiesced:
            return
        if self.role is not Role.LEADER and self.leader_id not in self.dead_peers:
            # Another member came or went: that is the leader's to act on. Ticking here
            # while the leader sleeps on would only end in a campaign against a live leader
            # (which a restarted member, knowing no leader yet, may well grant).
            return
        self._unquiesce()
        if self.role is Role.LEADER:
            for peer in sorted(self._progress):
                self._send_heartbeat(peer)
        else:
            # Liveness already waited an election timeout of silence from the leader: its
            # lease is over here. Rather than a random timeout each (two followers that
            # campaign together split the vote and wait again), the live voters take turns
            # half a timeout apart, in an order all of them derive alike from the term.
            tick = self._opts.election_tick
            self._election_elapsed = max(self._election_elapsed, tick)
            live = sorted(self.config.voters - self.dead_peers - {self.leader_id})
            if self.id in live:
                rank = (live.index(self.id) - self.term) % len(live)
                self._randomized_timeout = self._election_elapsed + 1 + rank * (tick // 2)

    def campaign(self) -> None:
        """Start an election now, as if the election timeout had fired."""
        self._unquiesce()
        if self.role is not Role.LEADER and self._promotable():
            self._start_campaign()

    def propose(
        self, payloads: Sequence[Buffer], entry_type: EntryType = EntryType.DATA
    ) -> tuple[int, int]:
        """Append entries on the leader; returns their (first, last) index in this term.

        They are committed once some Ready's committed_entries hold the same index with
        `term` equal to the term at proposal time; a different entry there means lost.
        """
        self._unquiesce()
        self._check_can_propose()
        if not payloads:
            raise ValueError("nothing to propose")
        if entry_type == EntryType.CONFIG:
            raise ValueError("use propose_config_change for membership changes")
        first = self._log.last_index() + 1
        entries = [Entry(self.term, first + i, entry_type, p) for i, p in enumerate(payloads)]
        self._append_to_log(entries)
        self._bcast_entries = True
        return first, first + len(entries) - 1

    def propose_config_change(self, change: ConfChange) -> int:
        """Append one single-server membership change; returns its index."""
        self._unquiesce()
        self._check_can_propose()
        if self._confs.last_index > self._log.committed:
            raise ConfigChangeRejected("another membership change is still uncommitted")
        try:
            new_config = self.config.apply(change)
        except ValueError as exc:
            raise ConfigChangeRejected(str(exc)) from exc
        if change.type is ConfChangeType.PROMOTE:
            pr = self._progress.get(change.node_id)
            # A voter that is far behind would stall commits until it caught up.
            if pr is None or pr.match < self._log.committed:
                raise ConfigChangeRejected(f"learner {change.node_id} has not caught up yet")
        index = self._log.last_index() + 1
        self._append_to_log([Entry(self.term, index, EntryType.CONFIG, encode_config(new_config))])
        self._bcast_entries = True
        return index

    def transfer_leader(self, target: int) -> None:
        """Hand leadership to `target` once it has our whole log (aborts after an election
        timeout). Proposals are refused meanwhile so that it can catch up."""
        self._unquiesce()
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader_id)
        if target == self.id:
            return
        if target not in self.config.voters:
            raise ValueError(f"node {target} is not a voter")
        self._transferee = target
        self._election_elapsed = 0  # the transfer gets one election timeout to finish
        if self._progress[target].match == self._log.last_index():
            self._send(TimeoutNow(self.id, target, self.term))
        else:
            self._send_append(target)

    def report_snapshot(self, peer: int, ok: bool) -> None:
        """The driver finished (or gave up) moving the snapshot data to `peer`."""
        self._unquiesce()
        pr = self._progress.get(peer)
        if self.role is not Role.LEADER or pr is None or pr.state is not ProgressState.SNAPSHOT:
            return
        if not ok:
            pr.pending_snapshot = 0
        pr.become_probe()
        # Wait for the follower's answer (or a heartbeat response) before probing again.
        pr.probe_sent = True

    def report_unreachable(self, peer: int) -> None:
        """The driver could not deliver to `peer`: stop streaming and probe again."""
        pr = self._progress.get(peer)
        if self.role is Role.LEADER and pr is not None and pr.state is ProgressState.REPLICATE:
            pr.become_probe()

    def on_persisted(self, index: int, term: int) -> None:
        """Everything up to the entry (index, term) is durable locally (see ready.py)."""
        if self._log.stable_to(index, term) and self.role is Role.LEADER:
            self._maybe_commit()

    def step(self, m: Message) -> None:
        if m.dst != self.id:
            raise ValueError(f"message for node {m.dst} stepped into node {self.id}")
        if self.quiesced and self._wakes(m):
            self._unquiesce()
        if m.term > self.term:
            if isinstance(m, RequestVote):
                if not m.transfer and self._in_lease():
                    return  # we hear from a live leader: do not let this node depose it
                if not m.pre_vote:
                    self._become_follower(m.term, NO_NODE)
            elif isinstance(m, VoteResponse) and m.pre_vote and m.granted:
                pass  # carries the term we would campaign at, not a newer leader's
            else:
                leader = m.src if isinstance(m, LEADER_MESSAGES) else NO_NODE
                self._become_follower(m.term, leader)
        elif m.term < self.term:
            self._step_stale(m)
            return

        if isinstance(m, RequestVote):
            self._handle_vote_request(m)
        elif self.role is Role.LEADER:
            self._step_leader(m)
        elif self.role is Role.FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    # ---- output ----------------------------------------------------------------------

    def has_ready(self) -> bool:
        return bool(
            self._msgs
            or self._msgs_after
            or (self.role is Role.LEADER and self._bcast_entries)
            or self._log.unstable.has_ready()
            or self._log.has_applicable()
            or self.hard_state() != self._prev_hard_state
        )

    def ready(self) -> Ready:
        """Collect the work accumulated since the last Ready (call `advance` before the
        next one)."""
        if self._awaiting_advance:
            raise RuntimeError("advance() the previous Ready first")
        self._flush_broadcast()
        hs = self.hard_state()
        changed_hs = hs if hs != self._prev_hard_state else None
        self._prev_hard_state = hs
        snapshot, truncate_from, entries = self._log.unstable.take_ready()
        if self._apply_payloads:
            committed = self._log.take_applicable(self._opts.max_apply_bytes)
            apply_to = committed[-1].index if committed else 0
        else:
            committed = []
            apply_to = self._log.take_applicable_index()
        rd = Ready(
            hard_state=changed_hs,
            snapshot=snapshot,
            truncate_from=truncate_from,
            entries=tuple(entries),
            messages=tuple(self._msgs),
            messages_after_persist=tuple(self._msgs_after),
            committed_entries=tuple(committed),
            apply_to=apply_to,
            commit_index=self._log.committed,
        )
        self._msgs = []
        self._msgs_after = []
        self._awaiting_advance = True
        return rd

    def advance(self, rd: Ready) -> None:
        self._awaiting_advance = False
        if rd.apply_to:
            self._log.applied = max(self._log.applied, rd.apply_to)

    # ---- roles -----------------------------------------------------------------------

    def _promotable(self) -> bool:
        return self.id in self.config.voters

    def _in_lease(self) -> bool:
        return (
            self._opts.check_quorum
            and self.leader_id != NO_NODE
            and self._election_elapsed < self._opts.election_tick
        )

    def _wakes(self, m: Message) -> bool:
        """Whether `m` wakes this quiesced node. A leader wakes on anything but its
        followers' answers to the quiescing heartbeat. A follower wakes on its leader's
        messages and on a newer term; a pre-vote or a stale message from anyone else is
        answered asleep (in lease: refused), as the leader is alive and would speak if
        there were anything to say."""
        if self.role is Role.LEADER:
            return not (isinstance(m, HeartbeatResponse) and m.term == self.term)
        if m.src == self.leader_id:
            return True
        if isinstance(m, RequestVote):
            # Only a leader transfer's vote passes the lease (see step).
            return m.transfer and m.term > self.term
        return m.term > self.term

    def _unquiesce(self) -> None:
        if not self.quiesced:
            return
        self.quiesced = False
        if self.role is Role.LEADER:
            # A fresh check-quorum period: whoever answers from now on counts.
            self._election_elapsed = 0
            self._heartbeat_elapsed = 0
            for pr in self._progress.values():
                pr.recent_active = False

    def _can_quiesce(self) -> bool:
        """The leader has nothing to replicate, everyone it reaches holds all of its log
        durably (so learns from this heartbeat that all of it is committed), and those it
        reaches make a majority."""
        if not self._opts.quiesce or self._transferee != NO_NODE:
            return False
        log = self._log
        last = log.last_index()
        if log.committed != last or log.stable_index() != last:
            return False
        reached = {self.id}
        for peer, pr in self._progress.items():
            if peer in self.dead_peers:
                continue
            if (
                pr.state is not ProgressState.REPLICATE
                or pr.match != last
                or len(pr.inflights)
                or not pr.recent_active
            ):
                return False
            reached.add(peer)
        return self.config.has_quorum(reached)

    def _reset(self, term: int) -> None:
        self.quiesced = False
        if term != self.term:
            self.term = term
            self.vote = NO_NODE
        self.leader_id = NO_NODE
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_timeout = self._opts.election_tick + self._rng.randrange(
            self._opts.election_tick
        )
        self._votes = {}
        self._transferee = NO_NODE
        self._progress = {}
        self._bcast_entries = False

    def _become_follower(self, term: int, leader: int) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.leader_id = leader

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.role = Role.LEADER
        self.leader_id = self.id
        self._sync_progress()
        # An entry of our own term: only it can commit the entries of earlier terms.
        index = self._log.last_index() + 1
        self._append_to_log([Entry(self.term, index, EntryType.NOOP, b"")])
        self._bcast_entries = True

    def _sync_progress(self) -> None:
        """Make the follower table match the configuration in force."""
        config = self.config
        next_index = self._log.last_index() + 1
        for node in config.members:
            if node == self.id:
                continue
            pr = self._progress.get(node)
            if pr is None:
                pr = Progress(next_index, self._opts.max_inflight)
                self._progress[node] = pr
            pr.learner = node in config.learners
        for node in [n for n in self._progress if n not in config.members]:
            del self._progress[node]
        if self._transferee not in config.voters:
            self._transferee = NO_NODE

    # ---- elections -------------------------------------------------------------------

    def _tick_election(self) -> None:
        self._election_elapsed += 1
        if self._promotable() and self._election_elapsed >= self._randomized_timeout:
            self._election_elapsed = 0
            self._start_campaign()

    def _start_campaign(self) -> None:
        self._run_election(pre_vote=self._opts.pre_vote, transfer=False)

    def _run_election(self, *, pre_vote: bool, transfer: bool) -> None:
        if pre_vote:
            # Ask first whether we could win, without touching any term: a node cut off
            # from the others thus cannot inflate terms and later depose a healthy leader.
            self.role = Role.PRE_CANDIDATE
            self.leader_id = NO_NODE
            self._votes = {}
            self._randomized_timeout = self._opts.election_tick + self._rng.randrange(
                self._opts.election_tick
            )
            term = self.term + 1
        else:
            self._reset(self.term + 1)
            self.role = Role.CANDIDATE
            self.vote = self.id
            term = self.term
        self._votes[self.id] = True
        if self._tally_votes():
            return
        last_index, last_term = self._log.last_index(), self._log.last_term()
        for peer in sorted(self.config.voters - {self.id}):
            request = RequestVote(self.id, peer, term, last_index, last_term, pre_vote, transfer)
            # A real vote request must wait until our own vote for ourselves is durable.
            self._send(request, after_persist=not pre_vote)

    def _tally_votes(self) -> bool:
        """Act on the votes so far; True if the election is decided."""
        result = self.config.vote_result(self._votes)
        if result is None:
            return False
        if result is False:
            self._become_follower(self.term, NO_NODE)
        elif self.role is Role.PRE_CANDIDATE:
            self._run_election(pre_vote=False, transfer=False)
        else:
            self._become_leader()
        return True

    def _handle_vote_request(self, m: RequestVote) -> None:
        if m.pre_vote:
            can_vote = (
                m.term > self.term
                or self.vote == m.src
                or (self.vote == NO_NODE and self.leader_id == NO_NODE)
            )
        else:
            can_vote = self.vote == m.src or (self.vote == NO_NODE and self.leader_id == NO_NODE)
        granted = can_vote and self._log.is_up_to_date(m.last_index, m.last_term)
        if granted and not m.pre_vote:
            self.vote = m.src
            self._election_elapsed = 0
        term = m.term if granted else self.term
        self._send(
            VoteResponse(self.id, m.src, term, granted, m.pre_vote), after_persist=not m.pre_vote
        )

    def _step_candidate(self, m: Message) -> None:
        if isinstance(m, LEADER_MESSAGES):
            # Someone already won this term.
            self._become_follower(m.term, m.src)
            self._step_follower(m)
        elif isinstance(m, VoteResponse):
            if m.pre_vote != (self.role is Role.PRE_CANDIDATE):
                return
            if m.pre_vote and m.granted and m.term != self.term + 1:
                return  # a grant from an earlier pre-campaign
            self._votes.setdefault(m.src, m.granted)
            self._tally_votes()

    def _step_stale(self, m: Message) -> None:
        """A message from an older term."""
        if isinstance(m, (AppendEntries, Heartbeat)) and (
            self._opts.check_quorum or self._opts.pre_vote
        ):
            # A leader cut off for a while does not hear of the newer term otherwise,
            # because pre-vote keeps the rest of us from ever sending it a vote request.
            self._send(AppendResponse(self.id, m.src, self.term, 0))
        elif isinstance(m, RequestVote) and m.pre_vote:
            self._send(VoteResponse(self.id, m.src, self.term, False, pre_vote=True))

    # ---- follower --------------------------------------------------------------------

    def _step_follower(self, m: Message) -> None:
        if isinstance(m, LEADER_MESSAGES):
            self._election_elapsed = 0
            self.leader_id = m.src
            if isinstance(m, AppendEntries):
                self._handle_append(m)
            elif isinstance(m, Heartbeat):
                log = self._log
                self._commit_to(min(m.commit, log.last_index()))
                self._send(HeartbeatResponse(self.id, m.src, self.term))
                if m.quiesce and m.commit == log.last_index() == log.committed:
                    # We hold exactly the leader's log, all committed: nothing can happen
                    # in this group until someone proposes, or a member goes away.
                    self.quiesced = True
                    self.quiesce_count += 1
            else:
                self._handle_snapshot(m)
        elif isinstance(m, TimeoutNow) and self._promotable():
            self._run_election(pre_vote=False, transfer=True)

    def _handle_append(self, m: AppendEntries) -> None:
        log = self._log
        # Entries up to the commit point are the same on every node, so a prev at or below
        # it always matches (even if its term is no longer readable here).
        if m.prev_index <= log.committed or log.term_at(m.prev_index) == m.prev_term:
            conflict = log.find_conflict(m.entries)
            if conflict < len(m.entries):
                self._append_to_log(list(m.entries[conflict:]))
            last_new = m.prev_index + len(m.entries)
            self._commit_to(min(m.commit, last_new))
            ack = AppendResponse(self.id, m.src, self.term, max(last_new, log.committed))
            self._send(ack, after_persist=True)
            return
        hint_index, hint_term = self._reject_hint(m.prev_index)
        reject = AppendResponse(
            self.id, m.src, self.term, m.prev_index, True, hint_index, hint_term
        )
        self._send(reject, after_persist=True)

    def _reject_hint(self, prev_index: int) -> tuple[int, int]:
        log = self._log
        if prev_index > log.last_index():
            return log.last_index() + 1, 0
        term = log.term_at(prev_index)
        if term is None:
            return log.committed + 1, 0
        first = prev_index
        while first - 1 > log.committed and log.term_at(first - 1) == term:
            first -= 1
        return first, term

    def _handle_snapshot(self, m: InstallSnapshot) -> None:
        snap = m.snapshot
        log = self._log
        if snap.index <= log.committed:
            index = log.committed
        elif log.term_at(snap.index) == snap.term:
            # We already hold that prefix; the snapshot only tells us it is committed.
            index = snap.index
            self._commit_to(snap.index)
        else:
            log.restore(snap)
            self._confs = ConfigHistory(snap.config, snap.index)
            index = snap.index
        self._send(AppendResponse(self.id, m.src, self.term, index), after_persist=True)

    # ---- leader ----------------------------------------------------------------------

    def _check_can_propose(self) -> None:
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader_id)
        if self._transferee != NO_NODE:
            raise ProposalDropped(f"leadership is being transferred to {self._transferee}")

    def _tick_leader(self) -> None:
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        if self._election_elapsed >= self._opts.election_tick:
            self._election_elapsed = 0
            if self._opts.check_quorum and not self._quorum_active():
                self._become_follower(self.term, NO_NODE)
                return
            self._transferee = NO_NODE  # a transfer not done within a timeout is abandoned
        if self._heartbeat_elapsed >= self._opts.heartbeat_tick:
            self._heartbeat_elapsed = 0
            quiesce = self._can_quiesce()
            for peer in sorted(self._progress):
                self._send_heartbeat(peer, quiesce=quiesce)
            if quiesce:
                self.quiesced = True
                self.quiesce_count += 1

    def _quorum_active(self) -> bool:
        active = {self.id}
        for peer, pr in self._progress.items():
            if pr.recent_active:
                active.add(peer)
            pr.recent_active = False
        return self.config.has_quorum(active)

    def _step_leader(self, m: Message) -> None:
        pr = self._progress.get(m.src)
        if pr is None:
            return
        if isinstance(m, AppendResponse):
            pr.recent_active = True
            self._handle_append_response(m, pr)
        elif isinstance(m, HeartbeatResponse):
            pr.recent_active = True
            pr.probe_sent = False
            if pr.state is ProgressState.REPLICATE and pr.inflights.full():
                # Something in the window was probably lost; let one more message through.
                pr.inflights.free_first()
            if pr.match < self._log.last_index():
                self._send_append(m.src, send_if_empty=True)

    def _handle_append_response(self, m: AppendResponse, pr: Progress) -> None:
        if m.reject:
            if pr.on_reject(m.index, self._next_from_hint(m)):
                self._send_append(m.src)
            return
        if pr.on_ack(m.index):
            if pr.state is ProgressState.PROBE or (
                pr.state is ProgressState.SNAPSHOT and pr.match >= pr.pending_snapshot
            ):
                pr.become_replicate()
            if self._maybe_commit() and self.role is not Role.LEADER:
                return  # that commit removed us
            if m.src == self._transferee and pr.match == self._log.last_index():
                self._send(TimeoutNow(self.id, m.src, self.term))
        while self._send_append(m.src):
            pass

    def _next_from_hint(self, m: AppendResponse) -> int:
        """Where to resume after a rejection, skipping a whole conflicting term at once."""
        if m.hint_term == 0:
            return m.hint_index
        # The follower holds hint_term from hint_index up to the rejected index. If we hold
        # that term at j in that range, we match up to j; otherwise all of it conflicts.
        j = min(m.index, self._log.last_index())
        while j >= m.hint_index:
            term = self._log.term_at(j)
            if term is None or term < m.hint_term:
                break
            if term == m.hint_term:
                return j + 1
            j -= 1
        return m.hint_index

    def _maybe_commit(self) -> bool:
        match = {peer: pr.match for peer, pr in self._progress.items()}
        match[self.id] = self._log.stable_index()  # the leader counts once flushed
        index = self.config.committed_index(match)
        # Only entries of our own term are committed by counting (Raft 5.4.2).
        if index > self._log.committed and self._log.term_at(index) == self.term:
            self._commit_to(index)
            return True
        return False

    def _commit_to(self, index: int) -> None:
        if not self._log.commit_to(index):
            return
        if (
            self.role is Role.LEADER
            and self.id not in self.config.voters
            and self._confs.last_index <= self._log.committed
        ):
            # Our own removal is committed: the others carry on without us (thesis 4.2.2).
            self._become_follower(self.term, NO_NODE)

    def _flush_broadcast(self) -> None:
        if self.role is Role.LEADER and self._bcast_entries:
            for peer in sorted(self._progress):
                while self._send_append(peer):
                    pass
        self._bcast_entries = False

    def _send_heartbeat(self, peer: int, *, quiesce: bool = False) -> None:
        # Never more than the follower is known to hold: it must not commit entries it
        # may have from another leader.
        commit = min(self._progress[peer].match, self._log.committed)
        self._send(Heartbeat(self.id, peer, self.term, commit, quiesce))

    def _send_append(self, peer: int, *, send_if_empty: bool = False) -> bool:
        pr = self._progress[peer]
        if pr.is_paused():
            return False
        log = self._log
        last = log.last_index()
        prev_term = log.term_at(pr.next - 1)
        if prev_term is None or (pr.next <= last and pr.next < log.first_index()):
            return self._send_snapshot(peer, pr)
        entries = log.entries(pr.next, last + 1, self._opts.max_append_bytes)
        if not entries and not send_if_empty:
            return False
        message = AppendEntries(
            self.id, peer, self.term, pr.next - 1, prev_term, log.committed, tuple(entries)
        )
        self._send(message)
        pr.sent(entries[-1].index if entries else None)
        return True

    def _send_snapshot(self, peer: int, pr: Progress) -> bool:
        # The snapshot covers what is committed *and* on our own disk (it is sent as files).
        index = self._log.applicable_hi()
        term = self._log.term_at(index)
        if term is None or index < pr.match:
            return False
        meta = SnapshotMeta(index, term, self._confs.at(index))
        self._send(InstallSnapshot(self.id, peer, self.term, meta, self._snapshot_handle(meta)))
        pr.become_snapshot(index)
        return True

    # ---- shared helpers --------------------------------------------------------------

    def _append_to_log(self, entries: list[Entry]) -> None:
        first = entries[0].index
        truncating = first <= self._log.last_index()
        self._log.append(entries)
        changed = self._confs.truncate(first) if truncating else False
        for entry in entries:
            if entry.type == EntryType.CONFIG:
                self._confs.append(entry.index, decode_config(entry.payload))
                changed = True
        if changed and self.role is Role.LEADER:
            self._sync_progress()
            self._maybe_commit()

    def _send(self, message: Message, *, after_persist: bool = False) -> None:
        (self._msgs_after if after_persist else self._msgs).append(message)
