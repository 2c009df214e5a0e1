"""What a node says about itself on its admin listener: readiness and the JSON views.

Everything here is read at request time from the objects that own the state (the broker's
streams, the cluster manager's Raft groups and liveness, the group service and its
committed offsets); nothing is kept on the side, so a view is never staler than the node.

The shapes (documented in the README, "Observability"):

- `/v1/cluster`: this node, the controller (group 0's leader, -1 while unknown), and
  every registered node with its addresses, DC and state (`self`, `up`, `down` as node
  liveness holds it);
- `/v1/partitions`: per partition of every topic, leader, replicas, ISR, and where this
  node hosts it, high watermark, log start, bytes on disk, its Raft role and term; where
  this node leads it, each follower's match index and lag in entries;
- `/v1/groups`: consumer groups (Kafka groups and YDB consumers share committed offsets)
  with state and members where this node coordinates them, and per partition committed
  offset, end offset and lag where this node hosts the partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vdl.broker.broker import Broker
from vdl.broker.topics import TopicError
from vdl.cluster.manager import ClusterManager
from vdl.consensus.driver import GroupStatus
from vdl.groups.service import GroupService
from vdl.net.limits import ConnectionLimits

Json = dict[str, Any]
# The Raft state of the partition groups a node hosts, read once per request or scrape.
Statuses = dict[tuple[str, int], GroupStatus]


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reason: str

    def to_json(self) -> Json:
        return {"ready": self.ready, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class PartitionRow:
    """One partition as this node sees it (the JSON view and the metrics read it)."""

    topic: str
    partition: int
    leader: int  # -1 while unknown
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    hosted: bool
    high_watermark: int | None
    log_start: int | None
    log_end: int | None
    size_bytes: int | None
    segments: int | None  # segment files of its log
    producers: int | None  # idempotent producers the partition tracks
    raft: GroupStatus | None

    @property
    def leads(self) -> bool:
        return self.raft.role == "leader" if self.raft is not None else self.hosted

    def follower_lag(self) -> list[tuple[int, int, int, int | None]]:
        """(follower, match index, lag in entries, lag in bytes) while this node leads."""
        raft = self.raft
        if raft is None or raft.role != "leader":
            return []
        return [
            (n, m, max(0, raft.last_index - m), raft.lag_bytes.get(n))
            for n, m in sorted(raft.match.items())
        ]

    def to_json(self) -> Json:
        raft = self.raft
        return {
            "topic": self.topic,
            "partition": self.partition,
            "leader": self.leader,
            "replicas": list(self.replicas),
            "isr": list(self.isr),
            "high_watermark": self.high_watermark,
            "log_start": self.log_start,
            "size_bytes": self.size_bytes,
            "segments": self.segments,
            "role": raft.role if raft is not None else ("leader" if self.hosted else "none"),
            "term": raft.term if raft is not None else None,
            "commit_index": raft.commit_index if raft is not None else None,
            "followers": [
                {"node_id": n, "match_index": m, "lag": lag, "lag_bytes": lag_bytes}
                for n, m, lag, lag_bytes in self.follower_lag()
            ],
        }


@dataclass(frozen=True, slots=True)
class GroupOffsetRow:
    group: str
    topic: str
    partition: int
    committed: int
    end: int | None  # the partition's high watermark where this node hosts it
    leads: bool  # this node leads the partition: its `end` is the authoritative one

    @property
    def lag(self) -> int | None:
        return None if self.end is None else max(0, self.end - self.committed)


class NodeView:
    """Read-only views of one running node, for the admin listener and the metrics."""

    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        broker: Broker,
        *,
        cluster: ClusterManager | None,
        groups: GroupService,
        listeners: dict[str, ConnectionLimits],
        addresses: Callable[[], tuple[str, str]],
        started_at: float | None = None,
    ) -> None:
        """`started_at`: the process' start on `time.monotonic()`'s clock."""
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.broker = broker
        self.cluster = cluster
        self.groups: GroupService | None = groups
        self.listeners = listeners
        self._addresses = addresses  # this node's (Kafka, gRPC) client addresses
        self.serving = False  # client listeners are up
        self.started_at = time.monotonic() if started_at is None else started_at
        self.start_seconds: float | None = None  # from process start to serving

    def mark_serving(self) -> None:
        self.serving = True
        self.start_seconds = time.monotonic() - self.started_at

    @property
    def draining(self) -> bool:
        return self.broker.draining

    def controller_id(self) -> int:
        if self.cluster is None:
            return self.node_id
        return self.cluster.controller_id()

    # -- readiness ----------------------------------------------------------------------

    def statuses(self) -> Statuses:
        return self.cluster.partition_statuses() if self.cluster is not None else {}

    def readiness(self, statuses: Statuses | None = None) -> Readiness:
        if self.draining:
            return Readiness(False, "draining: the node is shutting down")
        if not self.serving:
            return Readiness(False, "starting: client listeners are not open yet")
        cluster = self.cluster
        if cluster is None:
            return Readiness(True, "serving")
        meta = cluster.metadata_status()
        if meta.leader_id == 0:
            return Readiness(False, "the metadata group (group 0) has no leader this node knows")
        if meta.applied_index < meta.commit_index:
            return Readiness(
                False,
                f"applying the metadata log: {meta.applied_index} of {meta.commit_index}",
            )
        behind = [
            f"{topic}-{partition}"
            for (topic, partition), status in (
                self.statuses() if statuses is None else statuses
            ).items()
            if status.role == "leader" and status.applied_index < status.commit_index
        ]
        if behind:
            shown = ", ".join(sorted(behind)[:5])
            return Readiness(False, f"leads partitions it has not caught up on: {shown}")
        return Readiness(True, "serving")

    # -- views ----------------------------------------------------------------------------

    def nodes(self) -> list[Json]:
        cluster = self.cluster
        if cluster is None:
            kafka, grpc = self._addresses()
            return [
                {"node_id": self.node_id, "kafka": kafka, "grpc": grpc, "dc": "", "state": "self"}
            ]
        up = cluster.peers_up()
        known = cluster.state.nodes
        rows = []
        for node_id in sorted(set(cluster.state.members) | set(known)):
            address = known.get(node_id)
            if node_id == self.node_id:
                state = "self"
            else:
                state = "up" if node_id in up else "down"
            rows.append(
                {
                    "node_id": node_id,
                    "kafka": f"{address.kafka[0]}:{address.kafka[1]}" if address else None,
                    "grpc": f"{address.grpc[0]}:{address.grpc[1]}" if address else None,
                    "dc": address.dc if address else "",
                    "state": state,
                    "member": node_id in cluster.state.members,
                }
            )
        return rows

    def cluster_json(self) -> Json:
        return {
            "node_id": self.node_id,
            "cluster_id": self.cluster_id,
            "controller_id": self.controller_id(),
            "draining": self.draining,
            "ready": self.readiness().to_json(),
            "nodes": self.nodes(),
        }

    def partitions(self, statuses: Statuses | None = None) -> list[PartitionRow]:
        cluster = self.cluster
        if statuses is None:
            statuses = self.statuses()
        rows = []
        for topic in sorted(self.broker.catalog.all(), key=lambda t: t.name):
            for partition in range(topic.partitions):
                key = (topic.name, partition)
                try:
                    stream = self.broker.stream(topic.name, partition)
                except TopicError:
                    stream = None  # no replica on this node
                if cluster is not None:
                    state = cluster.partition_state(topic.name, partition)
                    leader, replicas, isr = state.leader, state.replicas, state.isr
                else:
                    leader = self.node_id
                    replicas = isr = (self.node_id,)
                rows.append(
                    PartitionRow(
                        topic=topic.name,
                        partition=partition,
                        leader=leader,
                        replicas=tuple(replicas),
                        isr=tuple(isr),
                        hosted=stream is not None,
                        high_watermark=stream.high_watermark if stream is not None else None,
                        log_start=stream.log_start_offset if stream is not None else None,
                        log_end=stream.log_end_offset if stream is not None else None,
                        size_bytes=stream.store.size_bytes() if stream is not None else None,
                        segments=stream.store.segment_count() if stream is not None else None,
                        producers=len(stream.producers) if stream is not None else None,
                        raft=statuses.get(key),
                    )
                )
        return rows

    def partitions_json(self) -> Json:
        return {"node_id": self.node_id, "partitions": [r.to_json() for r in self.partitions()]}

    def group_offsets(self, partitions: list[PartitionRow] | None = None) -> list[GroupOffsetRow]:
        groups = self.groups
        if groups is None:
            return []
        by_key = {(r.topic, r.partition): r for r in (partitions or self.partitions())}
        rows = []
        for group, offsets in sorted(groups.offsets.all_groups().items()):
            for (topic, partition), committed in sorted(offsets.items()):
                row = by_key.get((topic, partition))
                rows.append(
                    GroupOffsetRow(
                        group=group,
                        topic=topic,
                        partition=partition,
                        committed=committed.offset,
                        end=row.high_watermark if row is not None else None,
                        leads=row is not None and row.leads,
                    )
                )
        return rows

    def groups_json(self) -> Json:
        groups = self.groups
        offsets: dict[str, list[Json]] = {}
        for row in self.group_offsets():
            offsets.setdefault(row.group, []).append(
                {
                    "topic": row.topic,
                    "partition": row.partition,
                    "committed": row.committed,
                    "end": row.end,
                    "lag": row.lag,
                }
            )
        live = {g.group_id: g for g in groups.groups()} if groups is not None else {}
        out = []
        for name in sorted(set(offsets) | set(live)):
            group = live.get(name)
            out.append(
                {
                    "group": name,
                    # Only the coordinator holds a group's members; elsewhere: null.
                    "state": group.state.value if group is not None else None,
                    "protocol": (group.protocol or "") if group is not None else None,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "client_id": m.client_id,
                            "host": m.client_host,
                        }
                        for m in group.members.values()
                    ]
                    if group is not None
                    else [],
                    "offsets": offsets.get(name, []),
                }
            )
        return {"node_id": self.node_id, "coordinator": self._is_coordinator(), "groups": out}

    def _is_coordinator(self) -> bool:
        return self.cluster is None or self.cluster.is_controller()
