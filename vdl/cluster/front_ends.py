"""The cluster as the YDB front end sees it (`vdl.net.ydb.cluster.YdbCluster`).

Topic changes and consumer commits made through YDB are the same metadata commands that
Kafka's admin requests and coordinator propose, run from whichever node the client reached
(`forwarding.py`). Liveness for Discovery comes from leadership gossip: every node gossips
at least every half second, so a node not heard from for `_ALIVE_S` is left out of
ListEndpoints (the SDK would otherwise spend seconds dialling a dead node).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import trio

from vdl.broker.topics import Topic, TopicError
from vdl.cluster.acl_commands import ACL_OPS, acl_command
from vdl.cluster.commands import Command
from vdl.cluster.manager import ClusterManager
from vdl.cluster.offset_commands import COMMIT_OFFSETS, offsets_command
from vdl.cluster.placement import assign_replicas, default_replication_factor
from vdl.cluster.user_commands import USER_OPS, user_put_command, user_remove_command
from vdl.groups.offsets import CommittedOffset, TopicPartition
from vdl.log.error_codes import ErrorCode
from vdl.net.ydb.cluster import GrpcNode
from vdl.security.acl import AclEntry
from vdl.security.users import User

_ALIVE_S = 2.0
# How long a command waits for its outcome before the client is answered UNAVAILABLE.
_COMMAND_TIMEOUT_S = 10.0


class ClusterFrontEnds:
    def __init__(self, manager: ClusterManager) -> None:
        self._manager = manager
        # Other nodes may forward these for the YDB front end; all are harmless to repeat
        # (the topic commands are registered by the manager, which Kafka shares).
        manager.forwardable.add(COMMIT_OFFSETS)
        manager.forwardable.update(ACL_OPS)
        manager.forwardable.update(USER_OPS)

    @property
    def node_id(self) -> int:
        return self._manager.node_id

    def grpc_nodes(self) -> list[GrpcNode]:
        me = self._manager.node_id
        now = trio.current_time()
        heard = self._manager.heard_from
        return [
            GrpcNode(n.node_id, n.grpc[0], n.grpc[1])
            for n in sorted(self._manager.state.nodes.values(), key=lambda n: n.node_id)
            if n.node_id == me or now - heard.get(n.node_id, -math.inf) < _ALIVE_S
        ]

    def is_leader(self, topic: str, partition: int) -> bool:
        return self._manager.is_leader(topic, partition)

    def leader_of(self, topic: str, partition: int) -> int:
        return self._manager.partition_state(topic, partition).leader

    def leader_location(self, topic: str, partition: int) -> tuple[int, int]:
        return self._manager.leader_term(topic, partition)

    async def run(self, command: Command) -> None:
        """Apply `command` through group 0; TopicError with its outcome if it failed."""
        await self._manager.run_command(command, _COMMAND_TIMEOUT_S)

    async def create_topic(self, topic: Topic) -> None:
        nodes = sorted(self._manager.state.members)
        replicas = assign_replicas(
            topic.name, topic.partitions, default_replication_factor(len(nodes)), nodes
        )
        await self.run(
            {"op": "create_topic", "topic": topic.encode().decode(), "replicas": replicas}
        )
        created = self._manager.state.topics.get(topic.name)
        if created is None or created.topic_id != topic.topic_id:
            # Applied, but someone else's create of the same name came first (or a retry
            # of ours found our own: then the ids match and this is not reached).
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} exists")

    async def update_topic(self, topic: Topic) -> None:
        await self._manager.update_topic(topic, timeout_s=_COMMAND_TIMEOUT_S)

    async def add_partitions(self, name: str, count: int) -> Topic:
        return await self._manager.add_partitions(name, count, timeout_s=_COMMAND_TIMEOUT_S)

    async def delete_topic(self, name: str) -> None:
        await self._manager.delete_topic(name, _COMMAND_TIMEOUT_S)

    async def commit_offsets(
        self, group: str, offsets: Mapping[TopicPartition, CommittedOffset]
    ) -> None:
        await self.run(offsets_command(group, offsets))

    async def change_acl(self, op: str, entry: AclEntry) -> None:
        await self.run(acl_command(op, entry))

    async def put_user(self, user: User) -> None:
        await self.run(user_put_command(user))

    async def remove_user(self, name: str) -> None:
        await self.run(user_remove_command(name))
