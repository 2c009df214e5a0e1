"""One node's part of the cluster: the raft transport, the metadata group (group 0) and
the partition groups placed on this node.

Group 0 runs on the initial peers and holds topics, their partition -> replicas placement
and the nodes' client addresses. Applying its log starts and stops partition groups here:
a partition whose replica list names this node gets a stream, a `StreamReplica` and a
`GroupDriver` in this manager's nursery. Every node registers its Kafka and gRPC
addresses through group 0 (forwarding the command to its leader when it does not lead).
"""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import trio

from vdl.backends.api import LogStoreOptions, MetaStore
from vdl.backends.registry import LogBackend, open_log_store
from vdl.broker.broker import MAX_PARTITIONS, Broker
from vdl.broker.cluster_view import BrokerAddress, PartitionState
from vdl.broker.topics import Topic, TopicError, validate_configs, validate_topic_name
from vdl.cluster.commands import Command
from vdl.cluster.metadata import METADATA_GROUP, MetadataState, Placement
from vdl.cluster.metadata_group import MetadataGroup, ProposalLost
from vdl.cluster.placement import assign_replicas, default_replication_factor
from vdl.consensus.driver import DriverOptions, GroupDriver
from vdl.consensus.errors import ConsensusError
from vdl.consensus.hard_state_store import delete_hard_state
from vdl.consensus.router import GroupRouter
from vdl.consensus.stream_replica import StreamReplica, restart_commit_index
from vdl.consensus.transport import RaftTransport
from vdl.log.error_codes import ErrorCode
from vdl.log.flusher import Flusher
from vdl.log.stream import LogStream

log = logging.getLogger(__name__)

_REGISTER_EVERY_S = 0.5


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    node_id: int
    raft_listen: tuple[str, int]
    peers: Mapping[int, tuple[str, int]]  # raft addresses of the initial members
    data_dir: Path
    tick_s: float = 0.1
    log_backend: LogBackend = "segment"


@dataclass(slots=True)
class _Hosted:
    """A partition group running on this node."""

    group_id: int
    directory: Path
    stream: LogStream
    driver: GroupDriver
    scope: trio.CancelScope
    done: trio.Event


class ClusterManager:
    def __init__(
        self, settings: ClusterSettings, broker: Broker, meta: MetaStore, flusher: Flusher
    ) -> None:
        if settings.node_id not in settings.peers:
            raise ValueError(f"node {settings.node_id} is not among the peers")
        self.settings = settings
        self._broker = broker
        self._meta = meta
        self._flusher = flusher
        self._driver_options = DriverOptions(tick_s=settings.tick_s)
        self.router = GroupRouter()
        self.transport = RaftTransport(
            settings.node_id, settings.raft_listen, settings.peers, self.router
        )
        self.router.on_forward = self._on_forward
        self.state = MetadataState()
        self.state.on_created.append(self._topic_created)
        self.state.on_deleted.append(self._topic_deleted)
        self.state.on_updated.append(self._broker.catalog.update)
        self.metadata = MetadataGroup(self.state)
        self._meta_store = open_log_store(
            settings.log_backend, settings.data_dir / "raft" / "metadata", LogStoreOptions()
        )
        self._driver0 = GroupDriver(
            METADATA_GROUP,
            settings.node_id,
            frozenset(settings.peers),
            self._meta_store,
            meta,
            flusher,
            self.transport,
            self.metadata,
            options=self._driver_options,
        )
        self.metadata.driver = self._driver0
        self.router.add(METADATA_GROUP, self._driver0)
        self._hosted: dict[tuple[str, int], _Hosted] = {}
        self._nursery: trio.Nursery | None = None
        self._addresses: tuple[tuple[str, int], tuple[str, int]] | None = None
        self._requested: set[str] = set()

    # ---- running ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.transport.serve)
                await nursery.start(self._driver0.run)
                nursery.start_soon(self._register_loop)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                await self._shutdown()

    async def _shutdown(self) -> None:
        for hosted in self._hosted.values():
            await hosted.driver.close()
        await self._driver0.close()
        self._meta_store.close()

    def set_client_addresses(self, kafka: tuple[str, int], grpc: tuple[str, int]) -> None:
        """This node's client listeners are up: register them through group 0."""
        self._addresses = (kafka, grpc)

    async def _register_loop(self) -> None:
        me = self.settings.node_id
        while True:
            await trio.sleep(_REGISTER_EVERY_S)
            if self._addresses is None:
                continue
            kafka, grpc = self._addresses
            known = self.state.nodes.get(me)
            if known is not None and (known.kafka, known.grpc) == (kafka, grpc):
                continue
            command: Command = {
                "op": "register",
                "node": me,
                "kafka": f"{kafka[0]}:{kafka[1]}",
                "grpc": f"{grpc[0]}:{grpc[1]}",
            }
            await self._submit(command)

    async def _submit(self, command: Command) -> None:
        """Propose here if this node leads group 0, else forward to the leader; best effort
        (callers retry until the state shows the effect)."""
        if self._driver0.is_leader:
            try:
                await self.metadata.propose(command)
            except ConsensusError as exc:
                log.info("metadata command %s not applied: %s", command["op"], exc)
        elif self._driver0.leader_id:
            self.transport.forward(self._driver0.leader_id, json.dumps(command).encode())

    def _on_forward(self, raw: bytes) -> None:
        try:
            command = json.loads(raw)
            op = command["op"]
        except (ValueError, KeyError, TypeError):
            return
        if self._nursery is None or not self._driver0.is_leader:
            return
        if op == "register":
            self._nursery.start_soon(self._submit, command)
        elif op == "auto_topic":
            self.request_topic(str(command["name"]))

    # ---- partition groups ------------------------------------------------------------

    def _topic_created(self, topic: Topic, placement: Placement) -> None:
        self._requested.discard(topic.name)
        self._broker.catalog.add(topic)
        me = self.settings.node_id
        for partition, replicas in enumerate(placement.replicas):
            if me in replicas:
                self._start_partition(topic, partition, placement.groups[partition], replicas)

    def _start_partition(
        self, topic: Topic, partition: int, group_id: int, replicas: tuple[int, ...]
    ) -> None:
        assert self._nursery is not None
        directory = self.settings.data_dir / "replicated" / f"g{group_id}-{topic.name}-{partition}"
        stream = self._broker.open_partition_stream(topic, partition, directory)
        replica = StreamReplica(stream, group_id)
        commit = restart_commit_index(self._meta, group_id, stream.store)
        driver = GroupDriver(
            group_id,
            self.settings.node_id,
            frozenset(replicas),
            stream.store,
            self._meta,
            self._flusher,
            self.transport,
            replica,
            options=self._driver_options,
            applied=commit,
        )
        replica.start(driver, commit)
        hosted = _Hosted(group_id, directory, stream, driver, trio.CancelScope(), trio.Event())
        self._hosted[(topic.name, partition)] = hosted
        self.router.add(group_id, driver)
        self._broker.add_stream(topic.name, partition, stream)
        self._nursery.start_soon(self._run_partition, hosted)

    async def _run_partition(self, hosted: _Hosted) -> None:
        try:
            with hosted.scope:
                await hosted.driver.run()
        finally:
            hosted.done.set()

    def _topic_deleted(self, topic: Topic, placement: Placement) -> None:
        if self._broker.catalog.get(topic.name) is not None:
            self._broker.catalog.remove(topic.name)
        for partition in range(topic.partitions):
            hosted = self._hosted.pop((topic.name, partition), None)
            if hosted is None:
                continue
            self._broker.pop_stream(topic.name, partition)
            self.router.remove(hosted.group_id)
            assert self._nursery is not None
            self._nursery.start_soon(self._remove_partition, hosted)

    async def _remove_partition(self, hosted: _Hosted) -> None:
        hosted.scope.cancel()
        await hosted.done.wait()
        await hosted.driver.close()
        await hosted.stream.close()
        await trio.to_thread.run_sync(shutil.rmtree, hosted.directory, True)
        delete_hard_state(self._meta, hosted.group_id)

    # ---- ClusterView -----------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self.settings.node_id

    @property
    def node_count(self) -> int:
        return len(self.settings.peers)

    def kafka_brokers(self) -> list[BrokerAddress]:
        return [
            BrokerAddress(n.node_id, n.kafka[0], n.kafka[1])
            for n in sorted(self.state.nodes.values(), key=lambda n: n.node_id)
        ]

    def controller_id(self) -> int:
        return self._driver0.leader_id or -1

    def is_controller(self) -> bool:
        return self._driver0.is_leader

    def is_leader(self, topic: str, partition: int) -> bool:
        hosted = self._hosted.get((topic, partition))
        return hosted is not None and hosted.driver.is_leader

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        placement = self.state.placements.get(topic)
        if placement is None or not 0 <= partition < len(placement.replicas):
            return PartitionState(-1, (), ())
        replicas = placement.replicas[partition]
        hosted = self._hosted.get((topic, partition))
        if hosted is None:
            return PartitionState(-1, replicas, replicas)
        driver = hosted.driver
        leader = driver.leader_id or -1
        if driver.is_leader:
            contact = driver.in_contact()
            isr = tuple(n for n in replicas if n in contact)
        else:
            isr = replicas
        return PartitionState(leader, replicas, isr)

    def request_topic(self, name: str) -> None:
        if name in self._requested or self._nursery is None:
            return
        if not self._driver0.is_leader:
            leader = self._driver0.leader_id
            if leader:
                request = {"op": "auto_topic", "name": name}
                self.transport.forward(leader, json.dumps(request).encode())
            return
        self._requested.add(name)
        self._nursery.start_soon(self._auto_create, name)

    async def _auto_create(self, name: str) -> None:
        try:
            await self.create_topic(name, self._broker.default_partitions, -1, {})
        except (TopicError, ConsensusError) as exc:
            log.info("auto-creating topic %s failed: %s", name, exc)
        finally:
            self._requested.discard(name)

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> Topic:
        if not self._driver0.is_leader:
            raise TopicError(ErrorCode.NOT_CONTROLLER, "this node is not the controller")
        validate_topic_name(name)
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}",
            )
        validate_configs(self._broker.config_specs, configs)
        nodes = sorted(self.settings.peers)
        rf = replication_factor
        if rf == -1:
            rf = default_replication_factor(len(nodes))
        if not 1 <= rf <= len(nodes):
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {rf} is larger than the {len(nodes)} available node(s)",
            )
        if name in self.state.topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        topic = Topic(name, partitions, uuid.uuid4(), dict(configs))
        command: Command = {
            "op": "create_topic",
            "topic": topic.encode().decode(),
            "replicas": assign_replicas(name, partitions, rf, nodes),
        }
        await self._propose(command)
        return topic

    async def delete_topic(self, name: str) -> None:
        if not self._driver0.is_leader:
            raise TopicError(ErrorCode.NOT_CONTROLLER, "this node is not the controller")
        if name not in self.state.topics:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        await self._propose({"op": "delete_topic", "name": name})

    async def _propose(self, command: Command) -> None:
        try:
            outcome = await self.metadata.propose(command)
        except ProposalLost as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None
        except ConsensusError as exc:
            raise TopicError(ErrorCode.NOT_CONTROLLER, str(exc)) from None
        if outcome.error != ErrorCode.NONE:
            raise TopicError(outcome.error, outcome.message or outcome.error.name)
