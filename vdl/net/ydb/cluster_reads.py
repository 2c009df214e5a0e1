"""A consumer's YDB readers balanced across the nodes of a cluster.

YDB promises one reader per partition of a consumer (ydb_topic.proto, StreamReadMessage:
``start_partition_session_request`` / ``stop_partition_session_request``). On a cluster the
readers of one consumer may be connected to different nodes, so their balancer lives on one
node: the leader of the metadata group (group 0), which also coordinates Kafka's consumer
groups. It runs :func:`vdl.net.ydb.read_balancer.balance` over every node's sessions.

The messages travel over the raft connections (``ClusterReadChannel`` in
``vdl.cluster.ydb_read_channel``), one way and best effort, so each carries a whole state,
not a change, and a lost one is made good by the next:

- every node *reports* its read sessions (each one's wanted partitions and the ones it
  holds) to the coordinator at least every ``REPORT_S`` and at once after a change;
- the coordinator answers every node with a *grant*: per session its target partitions and
  the ones it may start now. A partition is granted to its target only when no session
  holds it and no earlier grant of it is outstanding; a grant stays outstanding until the
  grantee's node reports, having seen that grant (``ack``), that it does not hold the
  partition. So a partition changes hands only after its holder let go: the holder's
  session asks its client to stop it and lets go on the client's
  ``stop_partition_session_response``, which the SDK sends after every commit it made on
  that partition (in stream order; each commit is durable before the next client message
  is read). The grant names the metadata log index the new holder's node must have applied
  before it starts the partition, so it starts from the last committed offset.
- A node whose reports stop for ``NODE_TIMEOUT_S`` is dropped and its partitions are
  handed on. A node's grants lapse ``LEASE_S`` after it *sent* the report they answer
  (less than ``NODE_TIMEOUT_S`` after the coordinator *heard* it), and its sessions then
  read nothing, so a node cut off from the coordinator stops reading before its
  partitions are given to others.
- A new coordinator (another node, or a new term) knows nothing: for ``GRACE_S`` it grants
  only what nodes report holding, and only then starts handing out the rest.

A one-node VDL has no cluster and keeps the per-node ``ReadCoordinator``.
"""

from __future__ import annotations

import itertools
import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from vdl.broker.broker import MAX_PARTITIONS
from vdl.net.ydb.read_balancer import MemberTable, Wanted, balance

log = logging.getLogger(__name__)

REPORT_OP = "ydb_read_report"
GRANT_OP = "ydb_read_grant"
REPORT_S = 0.5
LEASE_S = 3.0
NODE_TIMEOUT_S = 5.0
GRACE_S = 2.0

Message = dict[str, Any]


class ReadChannel(Protocol):
    """What the balancer needs from the cluster."""

    @property
    def node_id(self) -> int: ...

    def coordinator(self) -> tuple[int, int]:
        """(leader of the metadata group, its term); leader 0 while none is known."""
        ...

    def is_coordinator(self) -> bool: ...

    def alone(self) -> bool:
        """True when this node is the only member of the cluster."""
        ...

    def log_index(self) -> int:
        """The metadata log's last index here (on the leader: every committed command)."""
        ...

    def applied(self) -> int: ...

    async def wait_applied(self, index: int) -> None: ...

    def send(self, node_id: int, message: Message) -> None:
        """Best effort; to this node itself it is delivered at once."""
        ...

    def listen(self, op: str, handler: Callable[[Message], None]) -> None: ...


# -- on every node: the sessions here ------------------------------------------------------


class ClusterReads:
    """The node side, with the interface of ``ReadCoordinator`` for read sessions."""

    def __init__(self, channel: ReadChannel) -> None:
        self._channel = channel
        self._table = MemberTable()
        # Per (consumer, topic, session), from the last grant taken.
        self._targets: dict[tuple[str, str, str], set[int]] = {}
        self._granted: dict[tuple[str, str, str], set[int]] = {}
        self._needs_index = 0  # the metadata index to apply before starting a grant
        self._grant_from: tuple[int, int] = (0, -1)  # (term, seq) of the last grant taken
        self._report_seq = itertools.count(1)
        self._incarnation = uuid.uuid4().hex  # a restarted node's reports count again
        self._sent_at: dict[int, float] = {}
        self._lease_until = -math.inf
        self._changed = trio.Event()
        self.coordinator = ReadBalancerRole(channel)
        channel.listen(GRANT_OP, self._on_grant)

    # The ReadCoordinator interface.

    def join(
        self,
        consumer: str,
        topic: str,
        partitions: int,
        member: str,
        wanted: Wanted,
        wake: Callable[[], None],
    ) -> None:
        self._table.join(consumer, topic, partitions, member, wanted, wake)
        self._changed.set()

    def leave(self, consumer: str, topic: str, member: str) -> None:
        if self._table.leave(consumer, topic, member) is not None:
            self._changed.set()

    def targets(self, consumer: str, topic: str, member: str) -> set[int]:
        if not self._leased():
            return set()
        return set(self._targets.get((consumer, topic, member), ()))

    def try_acquire(self, consumer: str, topic: str, member: str, partition: int) -> bool:
        local = self._table.member(consumer, topic, member)
        if (
            local is None
            or not self._leased()
            or partition not in self._granted.get((consumer, topic, member), ())
            or self._channel.applied() < self._needs_index
        ):
            return False
        local.held.add(partition)
        self._changed.set()
        return True

    def release(self, consumer: str, topic: str, member: str, partition: int) -> None:
        local = self._table.member(consumer, topic, member)
        if local is not None and partition in local.held:
            local.held.discard(partition)
            self._changed.set()

    def grown(self, consumer: str, topic: str, partitions: int) -> None:
        if self._table.grow(consumer, topic, partitions) is not None:
            self._changed.set()

    def _leased(self) -> bool:
        return trio.current_time() < self._lease_until

    # Messages.

    def _report(self) -> None:
        leader, _ = self._channel.coordinator()
        if not leader:
            return
        seq = next(self._report_seq)
        self._sent_at[seq] = trio.current_time()
        for old in [s for s in self._sent_at if s < seq - 64]:
            del self._sent_at[old]
        grant_term, grant_seq = self._grant_from
        groups = [
            {
                "consumer": consumer,
                "topic": topic,
                "partitions": group.partitions,
                "members": {
                    member: {
                        # Wherever their replicas are: a session reads any partition.
                        "wanted": None if local.wanted is None else sorted(local.wanted),
                        "held": sorted(local.held),
                    }
                    for member, local in group.members.items()
                },
            }
            for (consumer, topic), group in self._table.groups.items()
        ]
        self._channel.send(
            leader,
            {
                "op": REPORT_OP,
                "node": self._channel.node_id,
                "incarnation": self._incarnation,
                "report": seq,
                "term": grant_term,
                "ack": grant_seq,
                "groups": groups,
            },
        )

    def _on_grant(self, message: Message) -> None:
        try:
            term, seq, report = int(message["term"]), int(message["seq"]), int(message["report"])
            targets: dict[tuple[str, str, str], set[int]] = {}
            granted: dict[tuple[str, str, str], set[int]] = {}
            for grant in message["grants"]:
                key = (str(grant["consumer"]), str(grant["topic"]), str(grant["member"]))
                targets[key] = {int(p) for p in grant["target"]}
                granted[key] = {int(p) for p in grant["granted"]}
            index = int(message["index"])
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
            log.warning("ignoring a malformed YDB read grant: %r", exc)
            return
        if term != self._channel.coordinator()[1] or (term, seq) <= self._grant_from:
            return  # not the present coordinator's, or overtaken
        self._grant_from = (term, seq)
        changed = (targets, granted) != (self._targets, self._granted)
        self._targets, self._granted = targets, granted
        self._needs_index = max(self._needs_index, index)
        sent = self._sent_at.get(report)
        if sent is not None:
            self._lease_until = max(self._lease_until, sent + LEASE_S)
        self._table.wake_all()
        if changed:
            self._changed.set()  # acknowledge it: the coordinator may then move partitions

    async def run(self, stopping: trio.Event) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.coordinator.run)
            nursery.start_soon(self._report_loop)
            await stopping.wait()
            nursery.cancel_scope.cancel()

    async def _report_loop(self) -> None:
        waited_for = 0
        while True:
            changed = self._changed
            self._changed = trio.Event()
            if self._table.groups or changed.is_set():
                self._report()
            if self._needs_index > waited_for and self._channel.applied() < self._needs_index:
                waited_for = self._needs_index
                with trio.move_on_after(REPORT_S):
                    await self._channel.wait_applied(waited_for)
                self._table.wake_all()
                continue
            # Wake the sessions when the lease lapses: they give their partitions up.
            left = self._lease_until - trio.current_time()
            with trio.move_on_after(min(REPORT_S, left + 0.01) if left > 0 else REPORT_S):
                await self._changed.wait()
            if left > 0 and self._lease_until <= trio.current_time():
                self._table.wake_all()


# -- on the leader of group 0: the balancer ------------------------------------------------


@dataclass(slots=True)
class _ReportedGroup:
    consumer: str
    topic: str
    partitions: int
    members: dict[str, tuple[Wanted, frozenset[int]]]  # session -> (wanted, held)


@dataclass(slots=True)
class _NodeReport:
    incarnation: str
    heard_at: float
    report: int
    term: int
    ack: int
    groups: list[_ReportedGroup]


def _partition_set(values: Any, partitions: int) -> frozenset[int]:
    if not isinstance(values, list):
        raise TypeError("a partition list is not a list")
    result = frozenset(int(p) for p in values)
    if any(not 0 <= p < partitions for p in result):
        raise ValueError("a partition out of range")
    return result


def _parse_groups(groups: Any) -> list[_ReportedGroup]:
    if not isinstance(groups, list):
        raise TypeError("groups is not a list")
    parsed = []
    for group in groups:
        partitions = int(group["partitions"])
        if not 0 < partitions <= MAX_PARTITIONS:
            raise ValueError(f"{partitions} partitions")
        members: dict[str, tuple[Wanted, frozenset[int]]] = {}
        for member, state in dict(group["members"]).items():
            wanted = state["wanted"]
            members[str(member)] = (
                None if wanted is None else _partition_set(wanted, partitions),
                _partition_set(state["held"], partitions),
            )
        parsed.append(
            _ReportedGroup(str(group["consumer"]), str(group["topic"]), partitions, members)
        )
    return parsed


class ReadBalancerRole:
    """The coordinator: active while this node leads the metadata group."""

    def __init__(self, channel: ReadChannel) -> None:
        self._channel = channel
        self._term = -1
        self._since = 0.0
        self._seq = 0
        self._nodes: dict[int, _NodeReport] = {}
        # (consumer, topic, partition) -> (member, seq of the grant)
        self._pending: dict[tuple[str, str, int], tuple[str, int]] = {}
        self._target: dict[tuple[str, str], dict[int, str]] = {}
        self._sent: dict[int, list[dict[str, Any]]] = {}  # what each node was granted last
        channel.listen(REPORT_OP, self._on_report)

    def _active(self) -> bool:
        if not self._channel.is_coordinator():
            if self._term != -1:
                self._reset(-1)
            return False
        _, term = self._channel.coordinator()
        if term != self._term:
            self._reset(term)
        return True

    def _reset(self, term: int) -> None:
        self._term = term
        self._since = trio.current_time()
        self._seq = 0
        self._nodes.clear()
        self._pending.clear()
        self._target.clear()
        self._sent.clear()

    def _on_report(self, message: Message) -> None:
        try:
            node = int(message["node"])
            report = _NodeReport(
                str(message["incarnation"]),
                trio.current_time(),
                int(message["report"]),
                int(message["term"]),
                int(message["ack"]),
                _parse_groups(message["groups"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
            log.warning("ignoring a malformed YDB read report: %r", exc)
            return
        if not self._active():
            return
        known = self._nodes.get(node)
        if (
            known is not None
            and known.incarnation == report.incarnation
            and report.report < known.report
        ):
            return  # overtaken by a later one
        self._nodes[node] = report
        self._grant(reply_to=node)

    async def run(self) -> None:
        while True:
            await trio.sleep(REPORT_S / 2)
            if not self._active():
                continue
            now = trio.current_time()
            gone = [n for n, r in self._nodes.items() if now - r.heard_at > NODE_TIMEOUT_S]
            for node in gone:
                log.info("YDB readers on node %d unheard: their partitions move on", node)
                del self._nodes[node]
                self._sent.pop(node, None)
            if self._nodes:
                self._grant(reply_to=None)

    def _grant(self, reply_to: int | None) -> None:
        """Send each node its sessions' grants when they changed, and ``reply_to`` its
        grants anyway (they renew its lease)."""
        self._seq += 1
        seq = self._seq
        grace = trio.current_time() - self._since < GRACE_S and not self._channel.alone()
        # Gather every node's sessions per (consumer, topic).
        partitions: dict[tuple[str, str], int] = {}
        members: dict[tuple[str, str], dict[str, Wanted]] = {}
        held: dict[tuple[str, str], dict[int, str]] = {}
        node_of: dict[str, int] = {}
        for node, report in self._nodes.items():
            for group in report.groups:
                key = (group.consumer, group.topic)
                partitions[key] = max(partitions.get(key, 0), group.partitions)
                for member, (wanted, member_held) in group.members.items():
                    members.setdefault(key, {})[member] = wanted
                    node_of[member] = node
                    for partition in member_held:
                        held.setdefault(key, {})[partition] = member
        # A grant is outstanding until the grantee's node reports, having taken a later
        # grant that no longer gives it the partition, that it does not hold it (or until
        # the grantee is gone): until then it might still start it.
        for (consumer, topic, partition), (member, granted_seq) in list(self._pending.items()):
            grantee_node = node_of.get(member)
            grantee = None if grantee_node is None else self._nodes.get(grantee_node)
            holder = held.get((consumer, topic), {}).get(partition)
            moved_on = (
                grantee is not None
                and grantee.term == self._term
                and grantee.ack > granted_seq
                and holder != member
            )
            if grantee is None or moved_on:
                del self._pending[(consumer, topic, partition)]
        # Per (consumer, topic, session): its target partitions, and those it may start.
        grants: dict[tuple[str, str, str], tuple[set[int], set[int]]] = {}
        for key, group_members in members.items():
            consumer, topic = key
            owner = dict(held.get(key, {}))
            for (c, t, partition), (member, _) in self._pending.items():
                if (c, t) == key:
                    owner.setdefault(partition, member)
            if grace:
                target = dict(owner)
            else:
                current = {p: m for p, m in self._target.get(key, {}).items() if m in group_members}
                current.update(owner)
                target = balance(partitions[key], group_members, current)
            self._target[key] = target
            for member in group_members:
                grants[(consumer, topic, member)] = (set(), set())
            for partition, member in target.items():
                if member not in group_members:
                    continue
                grants[(consumer, topic, member)][0].add(partition)
                holder = owner.get(partition)
                if holder is None or holder == member:
                    grants[(consumer, topic, member)][1].add(partition)
        for key in [k for k in self._target if k not in members]:
            del self._target[key]
        index = self._channel.log_index()
        for node, report in self._nodes.items():
            mine = [
                {
                    "consumer": consumer,
                    "topic": topic,
                    "member": member,
                    "target": sorted(target_set),
                    "granted": sorted(granted),
                }
                for (consumer, topic, member), (target_set, granted) in grants.items()
                if node_of[member] == node
            ]
            if node != reply_to and self._sent.get(node) == mine:
                continue
            self._sent[node] = mine
            # Outstanding from this grant on (see above).
            for (consumer, topic, member), (_, granted) in grants.items():
                if node_of[member] == node:
                    for partition in granted:
                        self._pending[(consumer, topic, partition)] = (member, seq)
            self._channel.send(
                node,
                {
                    "op": GRANT_OP,
                    "term": self._term,
                    "seq": seq,
                    "report": report.report,
                    "index": index,
                    "grants": mine,
                },
            )
