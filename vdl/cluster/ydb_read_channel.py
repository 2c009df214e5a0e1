"""The cluster as the YDB readers' balancer sees it (`vdl.net.ydb.cluster_reads.ReadChannel`).

Its messages are forward frames on the raft connections, taken by whichever node they are
sent to (`ClusterManager.forward_handlers`), best effort like every forward. Records of a
partition this node holds no replica of are read from a node that holds one, over its raft
port (`vdl.consensus.record_reads`).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from vdl.cluster.commands import Command
from vdl.cluster.manager import ClusterManager
from vdl.consensus.record_reads import RecordRequest, Records, RecordSource


class ClusterReadChannel:
    def __init__(self, manager: ClusterManager) -> None:
        self._manager = manager
        self._handlers: dict[str, Callable[[Command], None]] = {}

    @property
    def node_id(self) -> int:
        return self._manager.node_id

    def coordinator(self) -> tuple[int, int]:
        driver = self._manager.metadata.driver
        if driver is None:
            return 0, -1
        return driver.leader_id, driver.term

    def is_coordinator(self) -> bool:
        driver = self._manager.metadata.driver
        return driver is not None and driver.is_leader

    def alone(self) -> bool:
        return set(self._manager.state.members) <= {self._manager.node_id}

    def log_index(self) -> int:
        driver = self._manager.metadata.driver
        return 0 if driver is None else driver.next_index() - 1

    def applied(self) -> int:
        return self._manager.metadata.applied

    async def wait_applied(self, index: int) -> None:
        metadata = self._manager.metadata
        await metadata.wait_applied(lambda: metadata.applied >= index)

    def send(self, node_id: int, message: Command) -> None:
        if node_id == self._manager.node_id:
            handler = self._handlers.get(message["op"])
            if handler is not None:
                handler(message)
            return
        self._manager.transport.forward(node_id, json.dumps(message).encode())

    def listen(self, op: str, handler: Callable[[Command], None]) -> None:
        self._handlers[op] = handler
        self._manager.forward_handlers[op] = handler

    def replicas(self, topic: str, partition: int) -> list[int]:
        state = self._manager.partition_state(topic, partition)
        me = self._manager.node_id
        first = [state.leader] if state.leader in state.replicas else []
        return first + [n for n in state.replicas if n not in first and n != me]

    async def fetch_records(self, node: int, request: RecordRequest) -> Records:
        return await self._manager.transport.fetch_records(node, request)

    def serve_records(self, source: RecordSource) -> None:
        self._manager.transport.record_source = source
