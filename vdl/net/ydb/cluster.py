"""What the YDB front end needs from the cluster, when the node is part of one.

YDB clients learn nodes through Discovery and then open streams on whichever node their
connection pool picks next (round robin), so, unlike Kafka clients, they cannot be told
"ask node N". The front end therefore:

- lists every live node in ListEndpoints;
- serves a StreamWrite only on the leader of the writer's partition: elsewhere it answers
  in-band UNAVAILABLE, which the SDK retries within 2.5-5 ms on a new stream — and the pool's
  round robin puts that stream on the next node, so a writer reaches the leader within one
  round of the nodes (after a failover too: its unacked messages are resent and dedup'd by
  seq_no on the new leader);
- serves a StreamRead from the node's own replicas, leader or follower (every replica holds
  the same committed records at the same offsets, and only committed ones are readable);
- sends topic changes and consumer commits through the metadata group from any node
  (`vdl.cluster.forwarding`).

Implemented by `vdl.cluster.front_ends.ClusterFrontEnds`; None on a one-node cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from vdl.broker.topics import Topic
from vdl.groups.offsets import CommittedOffset, TopicPartition
from vdl.security.acl import AclEntry
from vdl.security.users import User


@dataclass(frozen=True, slots=True)
class GrpcNode:
    node_id: int
    host: str
    port: int


class YdbCluster(Protocol):
    @property
    def node_id(self) -> int: ...

    def grpc_nodes(self) -> list[GrpcNode]:
        """The registered nodes believed alive (this one included once registered)."""
        ...

    def is_leader(self, topic: str, partition: int) -> bool: ...

    def leader_of(self, topic: str, partition: int) -> int:
        """The partition's leader as far as this node knows, or -1."""
        ...

    def leader_location(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader, generation) for YDB's PartitionLocation: the generation is the Raft term
        the leader was elected in, which grows whenever leadership changes. (-1, 0) while no
        leader is known."""
        ...

    # The methods below raise TopicError (with the metadata group's outcome) on failure.

    async def create_topic(self, topic: Topic) -> None: ...

    async def update_topic(self, topic: Topic) -> None: ...

    async def add_partitions(self, name: str, count: int) -> Topic:
        """Grow the topic to `count` partitions; the grown topic."""
        ...

    async def delete_topic(self, name: str) -> None: ...

    async def commit_offsets(
        self, group: str, offsets: Mapping[TopicPartition, CommittedOffset]
    ) -> None: ...

    async def change_acl(self, op: str, entry: AclEntry) -> None:
        """``op`` is "acl_add" or "acl_remove" (`vdl.cluster.acl_commands`)."""
        ...

    async def put_user(self, user: User) -> None:
        """Add a user or replace its credentials (`vdl.cluster.user_commands`)."""
        ...

    async def remove_user(self, name: str) -> None: ...
