"""What the broker and the front ends need to know about the cluster, when there is one.

Implemented by `vdl.cluster.manager.ClusterManager`; None on a one-node cluster, where this
node is the only broker, leader and controller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from vdl.broker.topics import Topic

# How long a topic change waits for its outcome when the request gives no bound (Kafka's
# CreateTopics and DeleteTopics with timeout_ms <= 0); the Kafka clients' default
# request.timeout.ms.
COMMAND_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class PartitionState:
    leader: int  # -1 while unknown (an election is running, or not hosted here)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class ClusterView(Protocol):
    @property
    def node_id(self) -> int: ...

    @property
    def node_count(self) -> int: ...

    def kafka_brokers(self) -> list[BrokerAddress]: ...

    def controller_id(self) -> int:
        """The metadata group's leader, or -1 while there is none."""
        ...

    def is_controller(self) -> bool: ...

    def is_member(self) -> bool:
        """This node is a member of the cluster (so it can take admin requests to group 0)."""
        ...

    def is_leader(self, topic: str, partition: int) -> bool: ...

    def partition_state(self, topic: str, partition: int) -> PartitionState: ...

    def leader_term(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader, Raft term of its leadership) as this node knows it; (-1, 0) if none."""
        ...

    def elect_preferred(self, topic: str, partition: int) -> None:
        """ElectLeaders: ask the partition's leader, wherever it runs, to hand leadership
        to the preferred replica now if that one is healthy (best effort, no answer)."""
        ...

    def request_topic(self, name: str) -> None:
        """Auto-creation: ask the metadata group for the topic, without waiting."""
        ...

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        validate_only: bool = ...,
        timeout_s: float = ...,
        assignments: Sequence[tuple[int, Sequence[int]]] | None = ...,
    ) -> Topic:
        """Through group 0 from any node (KIP-590), waiting up to `timeout_s` for its
        outcome (REQUEST_TIMED_OUT after it); `validate_only` checks without creating;
        `assignments` (partition index, replica ids) places the replicas by hand."""
        ...

    async def add_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None = ...,
        *,
        validate_only: bool = ...,
        timeout_s: float = ...,
    ) -> Topic:
        """Grow a topic to `count` partitions through group 0 from any node, as
        create_topic runs; `assignments`: one replica list per new partition, else they
        are placed as at creation."""
        ...

    async def update_topic(self, topic: Topic, *, timeout_s: float = ...) -> None:
        """Replace a topic's definition (same name, id and partitions) through group 0 from
        any node, as create_topic runs; every node applies it."""
        ...

    async def delete_topic(self, name: str, timeout_s: float = ...) -> None: ...

    async def run_command(self, command: dict[str, Any], timeout_s: float = ...) -> None:
        """Apply a metadata command through group 0 from this node, waiting up to
        `timeout_s` for this node to apply it (REQUEST_TIMED_OUT after it); TopicError
        with its outcome if it failed."""
        ...
