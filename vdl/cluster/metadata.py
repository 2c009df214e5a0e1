"""The metadata group's state: topics with their placement, and the nodes' addresses.

A pure, deterministic state machine: every node applies the same commands in the same
order (from group 0's log) and ends with the same state, including the raft group id of
each partition, which is handed out from a counter at creation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vdl.broker.topics import Topic
from vdl.cluster.commands import Command
from vdl.log.error_codes import ErrorCode

METADATA_GROUP = 0


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int
    kafka: tuple[str, int]
    grpc: tuple[str, int]


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


class MetadataState:
    def __init__(self) -> None:
        self.topics: dict[str, Topic] = {}
        self.placements: dict[str, Placement] = {}
        self.nodes: dict[int, NodeAddress] = {}
        self.next_group = METADATA_GROUP + 1
        self.on_created: list[TopicListener] = []
        self.on_deleted: list[TopicListener] = []
        self.on_updated: list[Callable[[Topic], None]] = []

    def apply(self, command: Command) -> Outcome:
        op = command["op"]
        if op == "register":
            node = int(command["node"])
            self.nodes[node] = NodeAddress(
                node, _address(command["kafka"]), _address(command["grpc"])
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
            gone = self.topics.pop(name, None)
            if gone is None:
                return Outcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
            placement = self.placements.pop(name)
            for listener in self.on_deleted:
                listener(gone, placement)
            return Outcome()
        if op == "update_topic":
            topic = Topic.decode(command["topic"].encode())
            current = self.topics.get(topic.name)
            if current is None or current.partitions != topic.partitions:
                return Outcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic.name!r}")
            self.topics[topic.name] = topic
            for updated in self.on_updated:
                updated(topic)
            return Outcome()
        return Outcome(ErrorCode.INVALID_REQUEST, f"unknown metadata command {op!r}")
