"""One node's part of the cluster: the raft transport, the metadata group (group 0) and
the partition groups placed on this node.

Group 0 runs on the initial peers and holds topics, their partition -> replicas placement
and the nodes' client addresses. Applying its log starts and stops partition groups here:
a partition whose replica list names this node gets a stream with a Raft appender and a
`GroupDriver` in this manager's nursery. Every node registers its Kafka and gRPC
addresses through group 0 (forwarding the command to its leader when it does not lead),
and gossips which partition groups it leads (`leader_gossip.py`), so it can name the
leaders of partitions it does not host. A node's `--dc` label is registered with its
addresses; partition leaders hand leadership to their preferred replica (the first of the
assignment, or the first in the topic's preferred DC) and group 0's leader to a voter in
`--metadata-dc` once those are healthy (`placement_leader.py`).

A topic grows (`add_partitions`) the way it is created: the nodes its new partitions are
placed on start their groups when they apply the command.

Topic changes are accepted on every node, as Kafka brokers accept them since KIP-590: the
node proposes the command if it leads group 0, else forwards it to the leader
(`forwarding.py`) and answers once it has applied the entry itself; while group 0 has no
leader the request waits, bounded by its timeout.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import trio

from vdl.backends.api import LogStore, LogStoreOptions, MetaStore
from vdl.backends.registry import LogBackend, open_log_store
from vdl.broker.broker import MAX_PARTITIONS, Broker
from vdl.broker.cluster_view import COMMAND_TIMEOUT_S, BrokerAddress, PartitionState
from vdl.broker.topics import (
    Topic,
    TopicError,
    validate_assignment,
    validate_configs,
    validate_growth,
    validate_topic_name,
)
from vdl.cluster.commands import Command
from vdl.cluster.forwarding import CommandForwarder
from vdl.cluster.leader_gossip import (
    GossipError,
    LeaderClaim,
    LeaderTable,
    decode_gossip,
    encode_claims,
    encode_refresh,
)
from vdl.cluster.metadata import METADATA_GROUP, MetadataState, Placement
from vdl.cluster.metadata_group import MetadataGroup
from vdl.cluster.placement import (
    assign_replicas,
    check_assignment,
    default_replication_factor,
)
from vdl.cluster.placement_leader import LeaderPlacement, LedGroup, preferred_dc
from vdl.cluster.preferred_election import PreferredElections
from vdl.cluster.reconfigure import next_change
from vdl.consensus.clock import NodeClock, NodeLiveness
from vdl.consensus.driver import DriverOptions, GroupDriver, GroupStatus
from vdl.consensus.errors import ConsensusError
from vdl.consensus.hard_state_store import delete_hard_state
from vdl.consensus.options import RaftOptions
from vdl.consensus.peer_tls import PeerTls
from vdl.consensus.router import GroupRouter
from vdl.consensus.snapshot_transfer import delete_snapshot_meta
from vdl.consensus.stream_replica import StreamMachine, raft_appender
from vdl.consensus.transport import RaftTransport, send_admin_command
from vdl.log.error_codes import ErrorCode
from vdl.log.flusher import Flusher
from vdl.log.stream import LogStream
from vdl.net.limits import MAX_CONNECTIONS, MAX_CONNECTIONS_PER_IP, ConnectionLimits

log = logging.getLogger(__name__)

_REGISTER_EVERY_S = 0.5
_RECONFIGURE_EVERY_S = 0.2
_JOIN_EVERY_S = 1.0
# Metadata commands an admin client (or a joining node) may send to any member.
ADMIN_OPS = frozenset({"add_node", "remove_node", "set_replicas"})
# Topic commands any node may forward to group 0's leader (Kafka and YDB front ends).
TOPIC_OPS = ("create_topic", "update_topic", "delete_topic", "add_partitions")
# Leadership gossip: looked at this often, sent at once when it changed and at least this
# often anyway (lost frames, restarted peers), and trusted this long after it was heard.
_GOSSIP_CHECK_S = 0.1
_GOSSIP_EVERY_S = 0.5
_GOSSIP_FULL_EVERY_S = 5.0  # the whole list even if unchanged (a receiver that lost one)
_GOSSIP_TTL_S = 2.0


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    node_id: int
    raft_listen: tuple[str, int]
    peers: Mapping[int, tuple[str, int]]  # raft addresses of the initial members
    data_dir: Path
    tick_s: float = 0.1
    log_backend: LogBackend = "segment"
    # Not an initial member: ask the members in `peers` to add this node (README).
    join: bool = False
    dc: str = ""  # this node's data-centre label, registered with its addresses
    metadata_dc: str = ""  # where group 0's leader belongs ("" for anywhere)
    leader_rebalance: bool = True  # partition leaders move to their preferred replica
    # Mutual TLS on every raft connection (README "Security"); None: plain TCP.
    raft_tls: PeerTls | None = None
    # Connections the raft listener keeps open, in all and from one address.
    max_connections: int = MAX_CONNECTIONS
    max_connections_per_ip: int = MAX_CONNECTIONS_PER_IP


@dataclass(slots=True)
class _Hosted:
    """A partition group running on this node."""

    group_id: int
    directory: Path
    stream: LogStream
    driver: GroupDriver
    scope: trio.CancelScope
    done: trio.Event
    # The leader claim gossiped for the group while quiesced, keyed by `settled()`.
    claim: tuple[tuple[int, int], LeaderClaim | None] | None = None


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
        # Group 0's applying starts and stops partitions: its loop alone runs it. A
        # stream's machine only moves offsets and wakes waiters, so the tasks that report
        # to its driver may take the loop's next step themselves (DriverOptions.inline).
        self._driver_options = DriverOptions(tick_s=settings.tick_s)
        self._stream_driver_options = replace(self._driver_options, inline=True)
        self.router = GroupRouter()
        # One clock ticks every group of this node; a peer unheard for an election timeout
        # is down for node liveness, which wakes quiesced groups (clock.py).
        self.clock = NodeClock(
            settings.tick_s, liveness=NodeLiveness(RaftOptions().election_tick * settings.tick_s)
        )
        self.transport = RaftTransport(
            settings.node_id,
            settings.raft_listen,
            settings.peers,
            self.router,
            tls=settings.raft_tls,
            limits=ConnectionLimits(
                "raft", settings.max_connections, settings.max_connections_per_ip
            ),
            incarnation=secrets.randbits(62),
            on_beat=self.clock.liveness.heard,
        )
        self.clock.attach(self.transport)
        self.router.on_forward = self._on_forward
        self.router.on_gossip = self._on_gossip
        self.router.on_admin = self._on_admin
        self.leaders = LeaderTable(_GOSSIP_TTL_S)
        # When each peer's gossip was last heard (trio time): who is alive, for Discovery.
        self.heard_from: dict[int, float] = {}
        # Client-facing commands (topics, offsets, ACLs) a leader of group 0 proposes when
        # another node forwards them (see forwarding.py); others registered by their modules.
        self.forwardable: set[str] = set(TOPIC_OPS)
        # Peer messages (by op) for a module's own use, taken on any node, leader or not.
        self.forward_handlers: dict[str, Callable[[Command], None]] = {}
        # ElectLeaders: preferred elections on request, forwarded to the leader.
        self.elections = PreferredElections(self)
        # The initial members: group 0's first voters. A joining node is not one of them.
        initial = {
            n: a for n, a in settings.peers.items() if not (settings.join and n == settings.node_id)
        }
        self.state = MetadataState(initial)
        self.state.on_replicas.append(self._replicas_changed)
        self.state.on_members.append(self._members_changed)
        self.state.on_created.append(self._topic_created)
        self.state.on_deleted.append(self._topic_deleted)
        self.state.on_grown.append(self._topic_grown)
        self.state.on_updated.append(self._broker.topic_updated)
        self.metadata = MetadataGroup(self.state)
        self._meta_store = open_log_store(
            settings.log_backend, settings.data_dir / "raft" / "metadata", LogStoreOptions()
        )
        self._driver0 = GroupDriver(
            METADATA_GROUP,
            settings.node_id,
            frozenset(initial),
            self._meta_store,
            meta,
            flusher,
            self.transport,
            self.metadata,
            options=self._driver_options,
            clock=self.clock,
        )
        self.metadata.driver = self._driver0
        self.router.add(METADATA_GROUP, self._driver0)
        # Runs client-facing commands from this node, whoever leads group 0.
        self.forwarder = CommandForwarder(self.metadata, self.transport)
        self._hosted: dict[tuple[str, int], _Hosted] = {}
        self._nursery: trio.Nursery | None = None
        self._addresses: tuple[tuple[str, int], tuple[str, int]] | None = None
        self._requested: set[str] = set()
        self.placement = LeaderPlacement(self._led_groups, self._dcs, quiet=self._quiet_key)

    # ---- running ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.transport.serve)
                await nursery.start(self.clock.run)
                await nursery.start(self._driver0.run)
                nursery.start_soon(self._register_loop)
                nursery.start_soon(self._gossip_loop)
                nursery.start_soon(self._reconfigure_loop)
                nursery.start_soon(self.placement.run)
                if self.settings.join:
                    nursery.start_soon(self._join_loop)
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
            if self._addresses is None or me not in self.state.members:
                continue
            kafka, grpc = self._addresses
            dc = self.settings.dc
            known = self.state.nodes.get(me)
            if known is not None and (known.kafka, known.grpc, known.dc) == (kafka, grpc, dc):
                continue
            command: Command = {
                "op": "register",
                "node": me,
                "kafka": f"{kafka[0]}:{kafka[1]}",
                "grpc": f"{grpc[0]}:{grpc[1]}",
                "dc": dc,
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

    def _led_claims(self) -> list[LeaderClaim]:
        claims = []
        for hosted in self._hosted.values():
            driver = hosted.driver
            settled = driver.settled()
            if settled is not None and hosted.claim is not None and hosted.claim[0] == settled:
                # Quiesced and nothing changed: the same claim (or none) as last time.
                if hosted.claim[1] is not None:
                    claims.append(hosted.claim[1])
                continue
            claim = None
            if driver.is_leader:
                contact = driver.in_contact()
                isr = tuple(sorted(n for n in driver.voters if n in contact))
                claim = LeaderClaim(hosted.group_id, driver.term, isr)
                claims.append(claim)
            hosted.claim = None if settled is None else (settled, claim)
        return claims

    async def _gossip_loop(self) -> None:
        me = self.settings.node_id
        sent: list[LeaderClaim] = []
        body = b""
        last_sent = last_full = -_GOSSIP_FULL_EVERY_S
        liveness = self.clock.liveness
        seen = liveness.changes
        claims_key: tuple[object, ...] | None = None
        while True:
            await trio.sleep(_GOSSIP_CHECK_S)
            key = self._quiet_key()
            if key is None or key != claims_key:
                claims, claims_key = self._led_claims(), key
            else:
                claims = sent  # every group asleep and nothing changed since
            now = trio.current_time()
            # A peer that came up (or restarted) holds no list to refresh: a full one.
            peers_moved, seen = liveness.changes != seen, liveness.changes
            if claims != sent or peers_moved or now - last_full >= _GOSSIP_FULL_EVERY_S:
                # An empty list is sent too: it withdraws what this node led before.
                body = encode_claims(me, claims)
                self.transport.gossip(body)
                sent, last_sent, last_full = claims, now, now
            elif now - last_sent >= _GOSSIP_EVERY_S:
                # Unchanged: a few bytes keep the receivers trusting the list they hold.
                self.transport.gossip(encode_refresh(me, body))
                last_sent = now

    def _quiet_key(self) -> tuple[object, ...] | None:
        """While every group of this node sleeps: a value that changes when any wakes or
        changes, liveness moves, or the metadata does (placements); None while any is
        awake. The periodic loops skip a pass that would find what the last one found."""
        key = self.clock.quiet_key()
        return None if key is None else (key, self._driver0.commit_index)

    def _on_gossip(self, raw: bytes) -> None:
        try:
            node_id, claims, body_digest = decode_gossip(raw)
        except GossipError as exc:
            log.warning("ignoring bad gossip: %s", exc)
            return
        now = trio.current_time()
        self.heard_from[node_id] = now
        if claims is None:
            self.leaders.refresh(node_id, body_digest, now)
        else:
            self.leaders.heard(node_id, claims, now, body_digest)

    def _on_forward(self, raw: bytes) -> None:
        command = _peer_command(raw)
        if command is None:
            return
        op = command["op"]
        handler = self.forward_handlers.get(op)
        if handler is not None:
            handler(command)
            return
        if self._nursery is None or not self._driver0.is_leader:
            return
        if op == "register" or op in ADMIN_OPS or op in self.forwardable:
            self._nursery.start_soon(self._submit, command)
        elif op == "auto_topic":
            name = command.get("name")
            if isinstance(name, str):
                self.request_topic(name)

    # ---- membership --------------------------------------------------------------------

    def _on_admin(self, raw: bytes, joining: frozenset[int] | None) -> None:
        """A command from an admin client: propose it if we lead group 0, else pass it on.
        With `joining` (a node's certificate, not an operator's) only that node's own
        request to be added is taken."""
        command = _peer_command(raw)
        if command is None or command["op"] not in ADMIN_OPS or self._nursery is None:
            return
        if not admin_allowed(command, joining):
            log.warning(
                "refusing admin command %s from a certificate for node(s) %s: only an "
                "operator's certificate may send it",
                command["op"],
                ", ".join(str(n) for n in sorted(joining or ())),
            )
            return
        log.info("admin command %s", command)
        if self._driver0.is_leader:
            self._nursery.start_soon(self._submit, command)
        elif self._driver0.leader_id:
            self.transport.forward(self._driver0.leader_id, json.dumps(command).encode())

    async def _join_loop(self) -> None:
        """Ask the members to add this node until group 0's state shows it (or shows it
        removed since: it was added and removed between two looks, and must stay out)."""
        me = self.settings.node_id
        host, port = self.settings.raft_listen
        command = json.dumps({"op": "add_node", "node": me, "raft": f"{host}:{port}"}).encode()
        while me not in self.state.members:
            if me in self.state.removed:
                log.error("node %d was removed from the cluster; it does not join again", me)
                return
            for peer, address in self.settings.peers.items():
                if peer != me:
                    try:
                        await send_admin_command(
                            address, command, tls=self.settings.raft_tls, node_id=peer
                        )
                    except OSError:
                        pass
            await trio.sleep(_JOIN_EVERY_S)

    def _members_changed(self, members: Mapping[int, tuple[str, int]]) -> None:
        for node, address in members.items():
            self.transport.add_peer(node, address)
        for node in [n for n in self.transport.links if n not in members]:
            self.transport.remove_peer(node)
            self.clock.liveness.forget(node)

    async def _reconfigure_loop(self) -> None:
        """On the groups this node leads: step their membership towards the metadata."""
        last: tuple[object, ...] | None = None
        while True:
            await trio.sleep(_RECONFIGURE_EVERY_S)
            key = self._quiet_key()
            if key is not None and key == last:
                continue
            last = key
            if self._driver0.is_leader:
                self._reconfigure(self._driver0, frozenset(self.state.members))
            for (topic, partition), hosted in list(self._hosted.items()):
                placement = self.state.placements.get(topic)
                driver = hosted.driver
                if not driver.is_leader or placement is None:
                    continue
                wanted = frozenset(placement.replicas[partition])
                if driver.quiesced and driver.voters == wanted and not driver.config.learners:
                    continue  # an idle group that already has its replicas
                self._reconfigure(driver, wanted)

    def _reconfigure(self, driver: GroupDriver, wanted: frozenset[int]) -> None:
        change = next_change(driver.config, wanted, driver.match(), driver.commit_index)
        if change is None:
            return
        try:
            driver.propose_config_change(change)
        except ConsensusError as exc:
            log.debug(
                "group %d: %s of node %d waits: %s",
                driver.group_id,
                change.type.name,
                change.node_id,
                exc,
            )
            return
        log.info("group %d: %s node %d", driver.group_id, change.type.name, change.node_id)

    def _led_groups(self) -> Iterator[LedGroup]:
        """The groups led here, each with what decides where its leader belongs."""
        if self._driver0.is_leader and self.settings.metadata_dc:
            yield LedGroup(self._driver0, self.settings.metadata_dc)
        for (name, partition), hosted in list(self._hosted.items()):
            topic = self.state.topics.get(name)
            placement = self.state.placements.get(name)
            if topic is None or placement is None or not hosted.driver.is_leader:
                continue
            replicas = placement.replicas[partition] if self.settings.leader_rebalance else ()
            yield LedGroup(hosted.driver, preferred_dc(topic), replicas)

    def _dcs(self) -> dict[int, str]:
        return {node: address.dc for node, address in self.state.nodes.items()}

    def _replicas_changed(
        self, topic: Topic, partition: int, group_id: int, replicas: tuple[int, ...]
    ) -> None:
        me = self.settings.node_id
        hosted = self._hosted.get((topic.name, partition))
        if me in replicas and hosted is None:
            # A new replica: a learner of the group's current members until its log says
            # otherwise, so it never campaigns with an empty log.
            others = tuple(n for n in replicas if n != me)
            self._start_partition(topic, partition, group_id, others)
        elif me not in replicas and hosted is not None:
            # Moved away: the group's leader removes us from its configuration (if we led
            # it, the others elect a new leader first).
            self._stop_partition(topic.name, partition)

    # ---- partition groups ------------------------------------------------------------

    def _topic_created(self, topic: Topic, placement: Placement) -> None:
        self._requested.discard(topic.name)
        self._broker.catalog.add(topic)
        me = self.settings.node_id
        for partition, replicas in enumerate(placement.replicas):
            if me in replicas:
                self._start_partition(topic, partition, placement.groups[partition], replicas)

    def _topic_grown(self, topic: Topic, placement: Placement, first: int) -> None:
        """New partitions: the topic's record here says so, and the nodes they are placed
        on start their groups as at the topic's creation."""
        self._broker.catalog.update(topic)
        me = self.settings.node_id
        for partition in range(first, topic.partitions):
            replicas = placement.replicas[partition]
            if me in replicas:
                self._start_partition(topic, partition, placement.groups[partition], replicas)

    def _start_partition(
        self, topic: Topic, partition: int, group_id: int, replicas: tuple[int, ...]
    ) -> None:
        assert self._nursery is not None
        directory = self.settings.data_dir / "replicated" / f"g{group_id}-{topic.name}-{partition}"
        drivers: list[GroupDriver] = []

        def build_driver(store: LogStore, machine: StreamMachine, applied: int) -> GroupDriver:
            driver = GroupDriver(
                group_id,
                self.settings.node_id,
                frozenset(replicas),
                store,
                self._meta,
                self._flusher,
                self.transport,
                machine,
                options=self._stream_driver_options,
                applied=applied,
                fetch_snapshot=self.transport.fetch_snapshot,
                clock=self.clock,
            )
            drivers.append(driver)
            return driver

        appender = raft_appender(build_driver, self._meta, group_id)
        stream = self._broker.open_partition_stream(topic, partition, directory, appender)
        (driver,) = drivers
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
            self._stop_partition(topic.name, partition)

    def _stop_partition(self, topic: str, partition: int) -> None:
        hosted = self._hosted.pop((topic, partition), None)
        if hosted is None:
            return
        self._broker.pop_stream(topic, partition)
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
        delete_snapshot_meta(self._meta, hosted.group_id)

    # ---- views for the admin listener ------------------------------------------------

    def metadata_status(self) -> GroupStatus:
        return self._driver0.status()

    def partition_statuses(self) -> dict[tuple[str, int], GroupStatus]:
        """The Raft state of every partition group this node hosts."""
        return {key: hosted.driver.status() for key, hosted in self._hosted.items()}

    def peers_up(self) -> frozenset[int]:
        """The members node liveness holds for up (this node not included)."""
        return self.clock.liveness.up

    # ---- ClusterView -----------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self.settings.node_id

    @property
    def node_count(self) -> int:
        return len(self.state.members)

    def kafka_brokers(self) -> list[BrokerAddress]:
        return [
            BrokerAddress(n.node_id, n.kafka[0], n.kafka[1])
            for n in sorted(self.state.nodes.values(), key=lambda n: n.node_id)
        ]

    def controller_id(self) -> int:
        return self._driver0.leader_id or -1

    def is_controller(self) -> bool:
        return self._driver0.is_leader

    def is_member(self) -> bool:
        return self.settings.node_id in self.state.members

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
            # Not hosted here: what its leader last gossiped.
            known = self.leaders.leader_of(placement.groups[partition], trio.current_time())
            if known is None:
                return PartitionState(-1, replicas, replicas)
            return PartitionState(known.leader, replicas, known.isr or replicas)
        driver = hosted.driver
        leader = driver.leader_id or -1
        if driver.is_leader:
            contact = driver.in_contact()
            isr = tuple(n for n in replicas if n in contact)
        else:
            isr = replicas
        return PartitionState(leader, replicas, isr)

    def hosted_driver(self, topic: str, partition: int) -> GroupDriver | None:
        """The Raft group of a partition hosted here, None if it is not."""
        hosted = self._hosted.get((topic, partition))
        return None if hosted is None else hosted.driver

    def elect_preferred(self, topic: str, partition: int) -> None:
        self.elections.request(topic, partition)

    def leader_term(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader, Raft term of its leadership) of a partition as this node knows it, or
        (-1, 0) while no leader is known."""
        placement = self.state.placements.get(topic)
        if placement is None or not 0 <= partition < len(placement.replicas):
            return -1, 0
        hosted = self._hosted.get((topic, partition))
        if hosted is None:
            known = self.leaders.leader_of(placement.groups[partition], trio.current_time())
            return (-1, 0) if known is None else (known.leader, known.term)
        leader = hosted.driver.leader_id
        return (leader, hosted.driver.term) if leader > 0 else (-1, 0)

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
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        validate_only: bool = False,
        timeout_s: float = COMMAND_TIMEOUT_S,
        assignments: Sequence[tuple[int, Sequence[int]]] | None = None,
    ) -> Topic:
        """`assignments`: a manual placement (partition index, replica ids) that sets the
        partition count and replication factor (`check_assignment`)."""
        validate_topic_name(name)
        manual = None
        if assignments is not None:
            manual = check_assignment(assignments, self.state.members)
            partitions, replication_factor = len(manual), len(manual[0])
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}",
            )
        validate_configs(self._broker.config_specs, configs)
        nodes = sorted(self.state.members)
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
        if validate_only:
            return topic
        command: Command = {
            "op": "create_topic",
            "topic": topic.encode().decode(),
            "replicas": manual or assign_replicas(name, partitions, rf, nodes),
        }
        # A resent command applied again only finds the topic there: the outcome reported
        # is the first one, so TOPIC_ALREADY_EXISTS means it existed before this request.
        await self.run_command(command, timeout_s)
        return topic

    async def add_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None = None,
        *,
        validate_only: bool = False,
        timeout_s: float = COMMAND_TIMEOUT_S,
    ) -> Topic:
        """Grow a topic to `count` partitions through group 0 (Kafka's CreatePartitions,
        YDB's AlterTopic). The new partitions are placed as a topic's are at creation
        (`assign_replicas` continued past the existing ones, with the topic's replication
        factor) unless `assignments` gives one replica list per new partition."""
        topic = self.state.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        validate_growth(topic, count, MAX_PARTITIONS)
        nodes = sorted(self.state.members)
        placement = self.state.placements[name]
        rf = max(1, min(len(placement.replicas[0]), len(nodes)))
        added = count - topic.partitions
        if assignments is None:
            replicas = assign_replicas(name, count, rf, nodes)[topic.partitions :]
        else:
            replicas = validate_assignment(assignments, added, rf, nodes)
        if validate_only:
            return topic.grown(count)
        command: Command = {
            "op": "add_partitions",
            "name": name,
            "topic_id": str(topic.topic_id),
            "count": count,
            "replicas": replicas,
        }
        # A resent command applied again finds the count reached and changes nothing; the
        # outcome reported is the first one.
        await self.run_command(command, timeout_s)
        return self.state.topics.get(name) or topic.grown(count)

    async def update_topic(self, topic: Topic, *, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        """Replace a topic's definition (its configs, consumers, codecs, attributes) through
        group 0 from any node (YDB's AlterTopic, Kafka's AlterConfigs); every node applies
        it to its catalog and open streams (`Broker.topic_updated`)."""
        await self.run_command({"op": "update_topic", "topic": topic.encode().decode()}, timeout_s)

    async def delete_topic(self, name: str, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        command: Command = {"op": "delete_topic", "name": name}
        known = self.state.topics.get(name)
        if known is not None:
            # Deletes only this topic: a resent command applied again must not delete one
            # created under the name since. (Unknown here, it may be known to the leader.)
            command["topic_id"] = str(known.topic_id)
        await self.run_command(command, timeout_s)

    async def run_command(self, command: Command, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        """Apply `command` through group 0 from this node, whoever leads it, waiting for a
        leader while there is none; TopicError with its outcome if it failed, and
        REQUEST_TIMED_OUT if no outcome came within `timeout_s` (it may still apply)."""
        try:
            outcome = await self.forwarder.execute(command, timeout_s)
        except ConsensusError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None
        if outcome.error != ErrorCode.NONE:
            raise TopicError(outcome.error, outcome.message or outcome.error.name)


def _peer_command(raw: bytes) -> Command | None:
    """The JSON command in a forward frame, if it is one: an object whose "op" is a string
    (anything else is dropped with a warning; applying checks each command's fields)."""
    try:
        command = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        log.warning("ignoring a forwarded command that is not JSON: %s", exc)
        return None
    if not isinstance(command, dict) or not isinstance(command.get("op"), str):
        log.warning("ignoring a forwarded command without a string op")
        return None
    return command


def admin_allowed(command: Command, joining: frozenset[int] | None) -> bool:
    """Whether an admin `command` may be taken from its sender: anything from an operator
    (`joining` None), and from a node's certificate only its own `add_node` (a node
    started with --join asks the members to add it)."""
    if joining is None:
        return True
    node = command.get("node")
    return (
        command["op"] == "add_node"
        and isinstance(node, int)
        and not isinstance(node, bool)
        and node in joining
    )
