"""Scripted Raft scenarios: an in-memory cluster driven one command at a time.

The idea is etcd raft's interaction tests (`rafttest.InteractionEnv` with the `datadriven`
format): a text file lists commands, each followed by `----` and the output it must
print, so a scenario reads as a transcript and a change in behaviour shows as a diff.

Every step of the driver contract (`vdl.consensus.ready`) is a separate command, so a
script decides when each node handles its Ready, when its write becomes durable and when
each message arrives:

- `process-ready` hands `Ready.messages` to the network at once, writes the entries (the
  in-memory store holds them, but they are not durable yet) and holds
  `messages_after_persist`;
- `durable` makes the written Readys durable in order: it releases their held messages to
  the network and then calls `on_persisted`;
- `deliver-msgs` steps queued messages into their receivers.

Commands (ids are node ids; `(1,2)` is a list):

    add-nodes N voters=(1,2,3) [learners=()] [election=10] [heartbeat=1] [inflight=8]
              [prevote=true] [checkquorum=true] [quiesce=true]
    campaign ID | tick ID[,ID...]|all [N] | propose ID DATA... | transfer ID TARGET
    wake ID [dead=(ID...)]
    process-ready [ID...] | durable ID [INDEX] | deliver-msgs [ID...] [drop=(ID...)]
    stabilize [ID...] | status [ID...] | log ID | isolate ID | heal | log-level info|none

At log level `info` (the default), a command also prints every change it caused in a
node's role, term, leader, commit index or quiescence, as `INFO` lines; at `none` every
command prints just `ok` (for the set-up part of a script).
"""

from __future__ import annotations

import random
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from vdl.backends.api import Entry, EntryType
from vdl.consensus import Config, RaftNode, RaftOptions, Ready, Role
from vdl.consensus.errors import ConfigChangeRejected, NotLeader, ProposalDropped
from vdl.consensus.messages import (
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

from .helpers import MemStorage

# ---- formatting ------------------------------------------------------------------------


def fmt_entry(e: Entry) -> str:
    """`index@term` and what it carries: `2@1 noop`, `3@1 config`, `4@1 "data"`."""
    if e.type == EntryType.NOOP:
        what = "noop"
    elif e.type == EntryType.CONFIG:
        what = "config"
    else:
        what = '"' + bytes(e.payload).decode("utf-8", "backslashreplace") + '"'
    return f"{e.index}@{e.term} {what}"


def fmt_entries(entries: tuple[Entry, ...] | list[Entry]) -> str:
    return "[" + ", ".join(fmt_entry(e) for e in entries) + "]"


def fmt_msg(m: Message) -> str:
    head = f"{m.src}->{m.dst}"
    if isinstance(m, AppendEntries):
        s = f"{head} app term={m.term} prev={m.prev_index}@{m.prev_term} commit={m.commit}"
        return s + (" " + fmt_entries(m.entries) if m.entries else "")
    if isinstance(m, AppendResponse):
        s = f"{head} app-resp term={m.term} index={m.index}"
        if m.reject:
            s += f" reject hint={m.hint_index}@{m.hint_term}"
        return s
    if isinstance(m, Heartbeat):
        return f"{head} heartbeat term={m.term} commit={m.commit}" + (
            " quiesce" if m.quiesce else ""
        )
    if isinstance(m, HeartbeatResponse):
        return f"{head} heartbeat-resp term={m.term}"
    if isinstance(m, RequestVote):
        kind = "pre-vote" if m.pre_vote else "vote"
        s = f"{head} {kind} term={m.term} last={m.last_index}@{m.last_term}"
        return s + (" transfer" if m.transfer else "")
    if isinstance(m, VoteResponse):
        kind = "pre-vote-resp" if m.pre_vote else "vote-resp"
        return f"{head} {kind} term={m.term} " + ("granted" if m.granted else "rejected")
    if isinstance(m, TimeoutNow):
        return f"{head} timeout-now term={m.term}"
    if isinstance(m, InstallSnapshot):
        snap = m.snapshot
        return f"{head} snapshot term={m.term} snap={snap.index}@{snap.term}"
    raise TypeError(f"unknown message {m!r}")


def fmt_ready(rd: Ready) -> list[str]:
    out: list[str] = []
    if rd.hard_state is not None:
        hs = rd.hard_state
        out.append(f"hard state: term={hs.term} vote={hs.vote} commit={hs.commit}")
    if rd.snapshot is not None:
        out.append(f"snapshot: {rd.snapshot.index}@{rd.snapshot.term}")
    if rd.truncate_from is not None:
        out.append(f"truncate from: {rd.truncate_from}")
    if rd.entries:
        out.append("entries: " + fmt_entries(rd.entries))
    if rd.committed_entries:
        out.append("apply: " + fmt_entries(rd.committed_entries))
    if rd.messages:
        out.append("messages:")
        out.extend("  " + fmt_msg(m) for m in rd.messages)
    if rd.messages_after_persist:
        out.append("after persist:")
        out.extend("  " + fmt_msg(m) for m in rd.messages_after_persist)
    return out


# ---- command parsing -------------------------------------------------------------------


@dataclass
class Command:
    name: str
    args: list[str] = field(default_factory=list)
    kwargs: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, line: str) -> Command:
        words = shlex.split(line)
        if not words:
            raise ValueError("empty command")
        cmd = cls(words[0])
        for w in words[1:]:
            key, eq, value = w.partition("=")
            if eq and re.fullmatch(r"[a-z-]+", key):
                cmd.kwargs[key] = value
            else:
                cmd.args.append(w)
        return cmd

    def ids(self, key: str) -> list[int]:
        """`key=(1,2,3)` as a list of ints ([] when absent or `()`)."""
        raw = self.kwargs.get(key, "()").strip("()")
        return [int(x) for x in raw.split(",") if x.strip()]

    def flag(self, key: str, default: bool) -> bool:
        if key not in self.kwargs:
            return default
        return self.kwargs[key] in ("true", "1", "yes")

    def integer(self, key: str, default: int) -> int:
        return int(self.kwargs[key]) if key in self.kwargs else default


# ---- the environment -------------------------------------------------------------------


@dataclass
class PendingWrite:
    """A Ready written but not yet durable: what becomes durable with it."""

    last: tuple[int, int] | None  # (index, term) of its last entry or snapshot
    after_persist: tuple[Message, ...]


@dataclass
class Snap:
    role: Role
    term: int
    leader: int
    commit: int
    quiesced: bool


class InteractionEnv:
    def __init__(self) -> None:
        self.nodes: dict[int, RaftNode] = {}
        self.storages: dict[int, MemStorage] = {}
        self.pending: dict[int, list[PendingWrite]] = {}
        self.applied: dict[int, int] = {}
        self.queue: list[Message] = []
        self.isolated: set[int] = set()
        self.log_info = True
        self._out: list[str] = []
        self._indent = ""
        self._snaps: dict[int, Snap] = {}

    # -- output helpers

    def _emit(self, line: str) -> None:
        self._out.append(self._indent + line)

    def _snap(self, node: RaftNode) -> Snap:
        return Snap(node.role, node.term, node.leader_id, node.commit_index, node.quiesced)

    def _log_changes(self) -> None:
        """INFO lines for what changed in each node since the last look."""
        for i in sorted(self.nodes):
            node = self.nodes[i]
            before, now = self._snaps.get(i), self._snap(node)
            self._snaps[i] = now
            if before is None or not self.log_info:
                continue
            if (before.role, before.term) != (now.role, now.term):
                self._emit(f"INFO {i} became {now.role.value} at term {now.term}")
            if before.leader != now.leader and now.leader not in (0, i):
                self._emit(f"INFO {i} follows leader {now.leader} at term {now.term}")
            if before.commit != now.commit:
                self._emit(f"INFO {i} commit {before.commit} -> {now.commit}")
            if before.quiesced != now.quiesced:
                self._emit(f"INFO {i} " + ("quiesced" if now.quiesced else "woke"))

    # -- running

    def handle(self, line: str) -> str:
        """Run one command line; its output (`ok` if it printed nothing)."""
        self._out = []
        cmd = Command.parse(line)
        handler: Callable[[Command], None] | None = getattr(
            self, "cmd_" + cmd.name.replace("-", "_"), None
        )
        if handler is None:
            raise ValueError(f"unknown command {cmd.name!r}")
        handler(cmd)
        self._log_changes()
        if not self.log_info:
            return "ok"
        return "\n".join(self._out) if self._out else "ok"

    def _node(self, raw: str) -> RaftNode:
        node_id = int(raw)
        if node_id not in self.nodes:
            raise ValueError(f"no node {node_id}")
        return self.nodes[node_id]

    def _targets(self, cmd: Command) -> list[int]:
        return [int(a) for a in cmd.args] if cmd.args else sorted(self.nodes)

    # -- commands

    def cmd_add_nodes(self, cmd: Command) -> None:
        count = int(cmd.args[0])
        voters = cmd.ids("voters")
        learners = cmd.ids("learners")
        options = RaftOptions(
            election_tick=cmd.integer("election", 10),
            heartbeat_tick=cmd.integer("heartbeat", 1),
            max_inflight=cmd.integer("inflight", 8),
            pre_vote=cmd.flag("prevote", True),
            check_quorum=cmd.flag("checkquorum", True),
            quiesce=cmd.flag("quiesce", True),
        )
        first = max(self.nodes, default=0) + 1
        for node_id in range(first, first + count):
            storage = MemStorage()
            node = RaftNode(
                node_id,
                storage,
                Config(frozenset(voters), frozenset(learners)),
                rng=random.Random(node_id),
                options=options,
            )
            self.nodes[node_id] = node
            self.storages[node_id] = storage
            self.pending[node_id] = []
            self.applied[node_id] = 0
            self._snaps[node_id] = self._snap(node)
            self._emit(f"added node {node_id}")

    def cmd_log_level(self, cmd: Command) -> None:
        if cmd.args[0] not in ("info", "none"):
            raise ValueError(f"log level {cmd.args[0]!r} is neither info nor none")
        self.log_info = cmd.args[0] == "info"

    def cmd_campaign(self, cmd: Command) -> None:
        self._node(cmd.args[0]).campaign()

    def cmd_tick(self, cmd: Command) -> None:
        which = cmd.args[0]
        ids = sorted(self.nodes) if which == "all" else [int(x) for x in which.split(",")]
        count = int(cmd.args[1]) if len(cmd.args) > 1 else 1
        for _ in range(count):
            for i in ids:
                self.nodes[i].tick()
                self._log_changes()

    def cmd_propose(self, cmd: Command) -> None:
        node = self._node(cmd.args[0])
        try:
            first, last = node.propose([a.encode() for a in cmd.args[1:]])
        except (NotLeader, ProposalDropped, ConfigChangeRejected) as exc:
            self._emit(f"error: {type(exc).__name__} {exc}")
            return
        self._emit(f"proposed {first}..{last}" if last > first else f"proposed {first}")

    def cmd_transfer(self, cmd: Command) -> None:
        node = self._node(cmd.args[0])
        try:
            node.transfer_leader(int(cmd.args[1]))
        except NotLeader as exc:
            self._emit(f"error: {type(exc).__name__} {exc}")

    def cmd_wake(self, cmd: Command) -> None:
        node = self._node(cmd.args[0])
        node.dead_peers = frozenset(cmd.ids("dead"))
        node.wake()

    def cmd_isolate(self, cmd: Command) -> None:
        self.isolated.add(int(cmd.args[0]))

    def cmd_heal(self, cmd: Command) -> None:
        self.isolated.clear()

    def cmd_process_ready(self, cmd: Command) -> None:
        ids = self._targets(cmd)
        for i in ids:
            if len(ids) > 1:
                if not self.nodes[i].has_ready():
                    continue
                self._emit(f"> {i} handling Ready")
                self._indent = "  "
            self._process_ready(i)
            self._indent = ""

    def _process_ready(self, i: int) -> bool:
        node = self.nodes[i]
        if not node.has_ready():
            self._emit("no Ready")
            return False
        rd = node.ready()
        for line in fmt_ready(rd):
            self._emit(line)
        self.queue.extend(rd.messages)
        self.storages[i].write(rd)  # written, not durable yet
        if rd.needs_persist:
            last = None
            if rd.entries:
                last = (rd.entries[-1].index, rd.entries[-1].term)
            elif rd.snapshot is not None:
                last = (rd.snapshot.index, rd.snapshot.term)
            self.pending[i].append(PendingWrite(last, rd.messages_after_persist))
        if rd.apply_to:
            self.applied[i] = rd.apply_to
        node.advance(rd)
        self._log_changes()
        return True

    def cmd_durable(self, cmd: Command) -> None:
        i = int(cmd.args[0])
        upto = int(cmd.args[1]) if len(cmd.args) > 1 else None
        self._durable(i, upto)

    def _durable(self, i: int, upto: int | None) -> bool:
        """Make node i's written Readys durable in order (those whose last entry is at most
        `upto`, all with None), as one sync: release their held messages, then report the
        last entry made durable."""
        pending = self.pending[i]
        done: list[PendingWrite] = []
        while pending and (upto is None or pending[0].last is None or pending[0].last[0] <= upto):
            done.append(pending.pop(0))
        if not done:
            self._emit(f"{i}: nothing to make durable")
            return False
        lasts = [w.last for w in done if w.last is not None]
        self._emit(f"{i} durable" + (f" to {lasts[-1][0]}@{lasts[-1][1]}" if lasts else ""))
        released = [m for w in done for m in w.after_persist]
        for m in released:
            self._emit("  " + fmt_msg(m))
        self.queue.extend(released)
        if lasts:
            self.nodes[i].on_persisted(*lasts[-1])
        self._log_changes()
        return True

    def cmd_deliver_msgs(self, cmd: Command) -> None:
        drop = set(cmd.ids("drop"))
        ids = [int(a) for a in cmd.args] if cmd.args or drop else sorted(self.nodes)
        self._deliver(ids, drop)

    def _deliver(self, ids: list[int], drop: set[int]) -> bool:
        """Step every queued message for `ids` and drop those for `drop` (in queue order);
        False if there was none."""
        targets = set(ids) | drop
        mine = [m for m in self.queue if m.dst in targets]
        if not mine:
            return False
        self.queue = [m for m in self.queue if m.dst not in targets]
        for m in mine:
            if m.dst in drop or m.src in self.isolated or m.dst in self.isolated:
                self._emit("dropped: " + fmt_msg(m))
                continue
            self._emit(fmt_msg(m))
            self.nodes[m.dst].step(m)
            self._log_changes()
        return True

    def cmd_stabilize(self, cmd: Command) -> None:
        """Handle Readys, make writes durable and deliver messages until nothing moves."""
        ids = self._targets(cmd)
        moved = True
        while moved:
            moved = False
            for i in ids:
                if self.nodes[i].has_ready():
                    self._emit(f"> {i} handling Ready")
                    self._indent = "  "
                    self._process_ready(i)
                    self._indent = ""
                    moved = True
            for i in ids:
                if self.pending[i]:
                    self._emit(f"> {i} persisting")
                    self._indent = "  "
                    self._durable(i, None)
                    self._indent = ""
                    moved = True
            for i in ids:
                if any(m.dst == i for m in self.queue):
                    self._emit(f"> {i} receiving messages")
                    self._indent = "  "
                    self._deliver([i], set())
                    self._indent = ""
                    moved = True

    def cmd_status(self, cmd: Command) -> None:
        for i in self._targets(cmd):
            node = self.nodes[i]
            log = node.log
            line = (
                f"{i}: {node.role.value} term={node.term} lead={node.leader_id} "
                f"vote={node.vote} commit={node.commit_index} applied={self.applied[i]} "
                f"last={log.last_index()} stable={log.stable_index()}"
            )
            if node.quiesced:
                line += " quiesced"
            if i in self.isolated:
                line += " isolated"
            self._emit(line)
            for peer in sorted(node.progress):
                pr = node.progress[peer]
                self._emit(
                    f"  {peer}: {pr.state.value} match={pr.match} next={pr.next} "
                    f"inflight={len(pr.inflights)}" + (" active" if pr.recent_active else "")
                )

    def cmd_log(self, cmd: Command) -> None:
        node = self._node(cmd.args[0])
        log = node.log
        entries = log.entries(log.first_index(), log.last_index() + 1)
        self._emit(fmt_entries(entries) if entries else "empty")
