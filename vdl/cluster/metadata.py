"""The metadata group's state: topics with their placement, the members and their addresses.

A pure, deterministic state machine: every node applies the same commands in the same
order (from group 0's log) and ends with the same state, including the raft group id of
each partition, which is handed out from a counter at creation.

Members are the nodes of the cluster (their raft addresses): the initial peers, plus
`add_node`, minus `remove_node`. A removed node id is retired for good (as etcd does): a
node still running under it, still asking to join, must not come back, so a returning
machine joins under a new id. They are what group 0's voters and new topics' replicas
are drawn from; the groups' own configurations follow them through single-server changes
made by the groups' leaders (`reconfigure.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from vdl.broker.broker import MAX_PARTITIONS
from vdl.broker.topics import Topic
from vdl.cluster.commands import Command
from vdl.log.error_codes import ErrorCode

METADATA_GROUP = 0


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int
    kafka: tuple[str, int]
    grpc: tuple[str, int]
    dc: str = ""  # the node's --dc label; "" when it has none


@dataclass(frozen=True, slots=True)
class Placement:
    replicas: tuple[tuple[int, ...], ...]  # per partition, the voters of its group
    groups: tuple[int, ...]  # per partition, its raft group id


@dataclass(frozen=True, slots=True)
class Outcome:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


def _address(text: str) -> tuple[str, int]:
    host, _, port = str(text).rpartition(":")
    return host, int(port)


TopicListener = Callable[[Topic, Placement], None]
# (the grown topic, its placement, the first new partition) after `add_partitions`.
GrowthListener = Callable[[Topic, Placement, int], None]
# (topic, partition, its group id, the new replicas) after a placement change.
ReplicasListener = Callable[[Topic, int, int, tuple[int, ...]], None]
MembersListener = Callable[[Mapping[int, tuple[str, int]]], None]


class MetadataState:
    def __init__(self, members: Mapping[int, tuple[str, int]] | None = None) -> None:
        self.topics: dict[str, Topic] = {}
        self.placements: dict[str, Placement] = {}
        self.nodes: dict[int, NodeAddress] = {}
        self.members: dict[int, tuple[str, int]] = dict(members or {})
        self.removed: set[int] = set()
        self.next_group = METADATA_GROUP + 1
        self.on_created: list[TopicListener] = []
        self.on_deleted: list[TopicListener] = []
        self.on_updated: list[Callable[[Topic], None]] = []
        self.on_grown: list[GrowthListener] = []
        # Commands served by modules outside this one (e.g. committed offsets), by op.
        self.handlers: dict[str, Callable[[Command], Outcome]] = {}
        self.on_replicas: list[ReplicasListener] = []
        self.on_members: list[MembersListener] = []
        # The raft index of the command being applied (set by the group before `apply`):
        # lets handlers tell a replayed command from one newer than what they stored.
        self.applying_index = 0
        # Called after every command with its outcome (a node that forwarded a command to
        # the leader learns its outcome here, when it applies the entry itself).
        self.on_applied: list[Callable[[Command, Outcome], None]] = []

    def apply(self, command: Command) -> Outcome:
        op = command["op"]
        if op in ("add_node", "remove_node", "set_replicas"):
            return self._apply_membership(command)
        if op == "register":
            node = int(command["node"])
            if node not in self.members:
                # A removed node still running must not come back as a broker.
                return Outcome(ErrorCode.INVALID_REQUEST, f"node {node} is not a member")
            self.nodes[node] = NodeAddress(
                node,
                _address(command["kafka"]),
                _address(command["grpc"]),
                # Registrations logged before data-centre labels existed have no "dc".
                str(command.get("dc", "")),
            )
            return Outcome()
        if op == "create_topic":
            topic = Topic.decode(command["topic"].encode())
            if topic.name in self.topics:
                return Outcome(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} exists")
            replicas = tuple(tuple(int(n) for n in r) for r in command["replicas"])
            if len(replicas) != topic.partitions:
                return Outcome(ErrorCode.INVALID_REQUEST, "one replica list per partition")
            groups = tuple(range(self.next_group, self.next_group + topic.partitions))
            self.next_group += topic.partitions
            placement = Placement(replicas, groups)
            self.topics[topic.name] = topic
            self.placements[topic.name] = placement
            for listener in self.on_created:
                listener(topic, placement)
            return Outcome()
        if op == "delete_topic":
            name = str(command["name"])
            # With "topic_id" (the topic the sender knew) only that topic: a forwarded
            # command applied twice never deletes one created under the name in between.
            wanted = command.get("topic_id")
            current = self.topics.get(name)
            if current is None or (wanted is not None and str(current.topic_id) != wanted):
                return Outcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
            gone = self.topics.pop(name)
            placement = self.placements.pop(name)
            for listener in self.on_deleted:
                listener(gone, placement)
            return Outcome()
        if op == "add_partitions":
            return self._add_partitions(command)
        if op == "update_topic":
            topic = Topic.decode(command["topic"].encode())
            current = self.topics.get(topic.name)
            # Only the topic the sender changed: never one created under the name since.
            if (
                current is None
                or current.partitions != topic.partitions
                or current.topic_id != topic.topic_id
            ):
                return Outcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic.name!r}")
            self.topics[topic.name] = topic
            for updated in self.on_updated:
                updated(topic)
            return Outcome()
        handler = self.handlers.get(op)
        if handler is not None:
            return handler(command)
        return Outcome(ErrorCode.INVALID_REQUEST, f"unknown metadata command {op!r}")

    def _add_partitions(self, command: Command) -> Outcome:
        """Grow a topic: `replicas` lists the replicas of the partitions the sender saw
        missing (from `count - len(replicas)` to `count`). Partitions that exist by now
        (another request grew the topic since) keep theirs; a count already reached
        changes nothing, so a forwarded command applied twice is harmless."""
        name = str(command["name"])
        count = int(command["count"])
        lists = tuple(tuple(int(n) for n in r) for r in command["replicas"])
        current = self.topics.get(name)
        # Only the topic the sender knew: never one created under the name since.
        if current is None or str(current.topic_id) != str(command["topic_id"]):
            return Outcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        if count <= current.partitions:
            return Outcome(
                ErrorCode.INVALID_PARTITIONS,
                f"topic already has {current.partitions} partition(s)",
            )
        if count > MAX_PARTITIONS:
            return Outcome(ErrorCode.INVALID_PARTITIONS, f"more than {MAX_PARTITIONS} partitions")
        seen = count - len(lists)
        if not 0 <= seen <= current.partitions:
            return Outcome(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT, "one replica list per new partition"
            )
        added = lists[current.partitions - seen :]
        for replicas in added:
            if not replicas or len(set(replicas)) != len(replicas):
                return Outcome(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "replicas must be distinct")
            unknown = [n for n in replicas if n not in self.members]
            if unknown:
                return Outcome(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"not members: {unknown}")
        old = self.placements[name]
        groups = tuple(range(self.next_group, self.next_group + len(added)))
        self.next_group += len(added)
        placement = Placement(old.replicas + added, old.groups + groups)
        grown = current.grown(count)
        self.topics[name] = grown
        self.placements[name] = placement
        for listener in self.on_grown:
            listener(grown, placement, current.partitions)
        return Outcome()

    def _apply_membership(self, command: Command) -> Outcome:
        op = command["op"]
        node = int(command.get("node", 0))
        if op == "add_node":
            if node <= 0:
                return Outcome(ErrorCode.INVALID_REQUEST, "node ids are positive")
            if node in self.removed:
                return Outcome(
                    ErrorCode.INVALID_REQUEST, f"node {node} was removed; join under a new id"
                )
            self.members[node] = _address(command["raft"])
            self._members_changed()
            return Outcome()
        if op == "remove_node":
            if node not in self.members:
                return Outcome()  # already gone: a retried command
            if len(self.members) == 1:
                return Outcome(ErrorCode.INVALID_REQUEST, "the last member cannot leave")
            for each in self.placements.values():
                if any(r == (node,) for r in each.replicas):
                    return Outcome(
                        ErrorCode.INVALID_REPLICATION_FACTOR,
                        f"node {node} holds the only replica of a partition: reassign it first",
                    )
            del self.members[node]
            self.removed.add(node)
            self.nodes.pop(node, None)
            for name in list(self.placements):
                for partition, replicas in enumerate(self.placements[name].replicas):
                    if node in replicas:
                        self._set_replicas(name, partition, tuple(r for r in replicas if r != node))
            self._members_changed()
            return Outcome()
        name = str(command["name"])
        partition = int(command["partition"])
        replicas = tuple(int(n) for n in command["replicas"])
        placement = self.placements.get(name)
        if placement is None or not 0 <= partition < len(placement.replicas):
            return Outcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no {name}-{partition}")
        if not replicas or len(set(replicas)) != len(replicas):
            return Outcome(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "replicas must be distinct")
        unknown = [n for n in replicas if n not in self.members]
        if unknown:
            return Outcome(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"not members: {unknown}")
        self._set_replicas(name, partition, replicas)
        return Outcome()

    def _set_replicas(self, name: str, partition: int, replicas: tuple[int, ...]) -> None:
        old = self.placements[name]
        lists = list(old.replicas)
        lists[partition] = replicas
        self.placements[name] = Placement(tuple(lists), old.groups)
        for listener in self.on_replicas:
            listener(self.topics[name], partition, old.groups[partition], replicas)

    def _members_changed(self) -> None:
        for listener in self.on_members:
            listener(self.members)
