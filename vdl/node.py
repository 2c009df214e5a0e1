"""`python -m vdl.node`: one VDL node in one nursery tree.

Shutdown order on SIGTERM/SIGINT is what makes acknowledgements trustworthy: stop
accepting and reading, let in-flight requests finish (answered after their flush, or with
an error), flush what is left, close the stores, exit 0.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import ssl
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import trio

from vdl.admin.app import AdminApp
from vdl.admin.http import HttpServer
from vdl.admin.metrics import node_registry, timing_gc_pauses, watch_event_loop_lag
from vdl.admin.views import NodeView
from vdl.backends.api import StorageError
from vdl.backends.registry import open_meta_store
from vdl.broker.broker import Broker
from vdl.broker.topics import TopicCatalog, topic_config_specs
from vdl.cluster.acl_commands import ReplicatedAcls
from vdl.cluster.coordinator_role import CoordinatorRole
from vdl.cluster.front_ends import ClusterFrontEnds
from vdl.cluster.group_commands import ReplicatedGroups
from vdl.cluster.log_start_commands import ReplicatedLogStarts
from vdl.cluster.manager import ClusterManager, ClusterSettings
from vdl.cluster.memory_meta import MemoryMetaStore
from vdl.cluster.offset_commands import ReplicatedOffsets
from vdl.cluster.token_key_commands import ReplicatedTokenKey, load_token_secret
from vdl.cluster.user_commands import ReplicatedUsers
from vdl.cluster.ydb_read_channel import ClusterReadChannel
from vdl.config import ConfigError, HostPort, NodeConfig, load_config
from vdl.consensus.peer_tls import PeerTls
from vdl.groups.coordinator import GroupConfig
from vdl.groups.service import GroupService
from vdl.log.flusher import Flusher
from vdl.logs import configure_logging
from vdl.metrics.stages import SNAPSHOT_FILE, STAGES
from vdl.net.grpc import GrpcServer, GrpcSettings
from vdl.net.kafka.control_codec import warm_up
from vdl.net.kafka.keepalive import KeepaliveTiming
from vdl.net.kafka.quotas import KafkaQuotas
from vdl.net.kafka.server import KafkaServer
from vdl.net.limits import ConnectionLimits
from vdl.net.listen import StartupError
from vdl.net.ydb.service import YdbFrontEnd
from vdl.security.acl_store import AclStore
from vdl.security.service import Security
from vdl.security.throttle import LoginThrottle
from vdl.security.tls import TlsConfigError, server_context
from vdl.security.user_table import UserTable
from vdl.security.users import UsersFileError, UserStore
from vdl.txn.commands import LocalTxnLog, ReplicatedTxns, TxnLog
from vdl.txn.coordinator import TxnCoordinator
from vdl.txn.markers import MarkerWriter
from vdl.txn.state import TxnStore

log = logging.getLogger("vdl.node")
# When this process began, as near as the node can tell (`vdl_node_start_seconds`).
_PROCESS_START = time.monotonic()

_CLUSTER_ID_KEY = b"cluster/id"


def _cluster_id_of(config: NodeConfig) -> str:
    # Over the initial members: a joining node lists itself too, but is not one of them.
    peers = ",".join(
        f"{n}={a}" for n, a in config.peers if not (config.join and n == config.node_id)
    )
    return hashlib.sha256(peers.encode()).hexdigest()[:22]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def tls_contexts(config: NodeConfig) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    """(Kafka, gRPC) server contexts; raises TlsConfigError naming the bad file."""
    kafka = grpc = None
    if config.kafka_tls_cert is not None and config.kafka_tls_key is not None:
        kafka = server_context(
            config.kafka_tls_cert, config.kafka_tls_key, client_ca=config.tls_client_ca
        )
    if config.tls_cert is not None and config.tls_key is not None:
        # HTTP/2 over TLS: grpcio drops a connection whose ALPN is not h2.
        grpc = server_context(
            config.tls_cert, config.tls_key, client_ca=config.tls_client_ca, alpn=["h2"]
        )
    return kafka, grpc


def admin_tls(config: NodeConfig) -> ssl.SSLContext | None:
    """The admin listener's context: the node's certificate (tls-cert), when configured."""
    if config.tls_cert is None or config.tls_key is None or config.admin_listen is None:
        return None
    return server_context(config.tls_cert, config.tls_key, client_ca=config.tls_client_ca)


def raft_tls(config: NodeConfig) -> PeerTls | None:
    """Mutual TLS for the raft port when configured; raises TlsConfigError naming the bad
    file, or a certificate that does not name this node."""
    cert, key, ca = config.raft_tls_cert, config.raft_tls_key, config.raft_tls_ca
    if cert is None or key is None or ca is None:
        return None
    return PeerTls.from_files(cert, key, ca, node_id=config.node_id)


class Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.kafka_port: int | None = None
        self.grpc_port: int | None = None
        self.admin_port: int | None = None
        self._users: UserStore | None = None
        self._kafka_tls: ssl.SSLContext | None = None
        self._grpc_tls: ssl.SSLContext | None = None
        self._admin_tls: ssl.SSLContext | None = None
        self._raft_tls: PeerTls | None = None
        self._security = Security()
        self._stop = trio.Event()
        self._cluster: ClusterManager | None = None
        self._replicated_offsets: ReplicatedOffsets | None = None
        self._replicated_groups: ReplicatedGroups | None = None
        self._token_key: ReplicatedTokenKey | None = None
        # Writes transaction markers to partitions (for the transaction coordinator).
        self.markers: MarkerWriter | None = None
        self._replicated_txns: ReplicatedTxns | None = None

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        config = self.config
        try:
            self._users = UserStore.from_file(config.users) if config.users is not None else None
            self._load_tls()
        except (UsersFileError, TlsConfigError) as exc:
            raise StartupError(str(exc)) from None
        if config.peers and self._raft_tls is None and not config.raft_insecure:
            log.warning(
                "the raft port %s has no TLS (raft-tls-cert): anyone who can reach it can "
                "read the cluster's metadata log and send admin commands (add or remove "
                "nodes, move replicas); give raft TLS, or raft-insecure to accept this",
                config.raft_address(),
            )
        if self._users is not None and (legacy := self._users.legacy_users()):
            log.warning(
                "users file %s stores plain-text passwords for %s; rewrite them with "
                "`vdl user passwd`",
                config.users,
                ", ".join(legacy),
            )
        config.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            meta = open_meta_store(config.data_dir / "meta")
        except StorageError as exc:
            # Most often another node already runs on this data directory (its lock).
            raise StartupError(str(exc)) from None
        try:
            # Users added online (`vdl user ... --endpoint`) override the users file.
            user_table = UserTable(meta)
            if self._users is not None:
                self._users.table = user_table
            self._security = Security(
                users=self._users,
                # Durable in this node's MetaStore; authorization is on with authentication.
                acls=AclStore(meta, config.superusers, enabled=True) if self._users else None,
                throttle=LoginThrottle(
                    config.login_max_failures, config.login_failure_window_ms / 1000
                ),
                sasl_mechanisms=config.kafka_sasl_mechanisms,
            )
            cluster_id = meta.get(_CLUSTER_ID_KEY)
            if cluster_id is None:
                cluster_id = uuid.uuid4().hex[:22].encode()
                meta.put(_CLUSTER_ID_KEY, cluster_id)
            flusher = Flusher()
            catalog = None
            if config.clustered:
                # Every node must tell clients the same cluster id.
                cluster_id = _cluster_id_of(config).encode()
                # Topics come from the metadata group's log, replayed at every start.
                catalog = TopicCatalog(MemoryMetaStore())
            broker = Broker(
                config.data_dir,
                meta,
                flusher,
                wall_clock_ms,
                log_backend=config.log_backend,
                config_specs=topic_config_specs(
                    retention_ms=config.retention_ms,
                    retention_bytes=config.retention_bytes,
                    segment_bytes=config.segment_bytes,
                    max_message_bytes=config.max_message_bytes,
                ),
                auto_create_topics=config.auto_create_topics,
                default_partitions=config.default_partitions,
                preallocate_segments=config.segment_preallocate,
                catalog=catalog,
                producer_id_expiration_ms=config.producer_id_expiration_ms,
            )
            if config.clustered:
                raft = config.raft_address()
                self._cluster = ClusterManager(
                    ClusterSettings(
                        node_id=config.node_id,
                        raft_listen=(raft.host, raft.port),
                        peers={n: (a.host, a.port) for n, a in config.peers},
                        data_dir=config.data_dir,
                        tick_s=config.raft_tick_ms / 1000,
                        log_backend=config.log_backend,
                        join=config.join,
                        dc=config.dc,
                        metadata_dc=config.metadata_dc,
                        leader_rebalance=config.leader_rebalance,
                        raft_tls=self._raft_tls,
                        max_connections=config.max_connections,
                        max_connections_per_ip=config.max_connections_per_ip,
                    ),
                    broker,
                    meta,
                    flusher,
                )
                broker.cluster = self._cluster
                # Registered before group 0 replays its log, which holds the commits.
                self._replicated_offsets = ReplicatedOffsets(self._cluster.metadata, meta)
                self._replicated_offsets.register(self._cluster.state)
                # Transactions too (with the offsets their commits make committed).
                self._replicated_txns = ReplicatedTxns(
                    self._cluster.metadata, meta, self._replicated_offsets
                )
                self._replicated_txns.register(self._cluster.state)
                # Group records likewise: the next coordinator loads them.
                self._replicated_groups = ReplicatedGroups(self._cluster.metadata, meta)
                self._replicated_groups.register(self._cluster.state)
                # One YDB token secret for all nodes: a token works wherever discovery sends
                # (agreed through group 0, unless every node reads it from a file).
                if config.token_secret_file is None:
                    self._token_key = ReplicatedTokenKey(self._cluster.metadata, meta)
                    self._token_key.register(self._cluster.state)
                # ACLs too: every node applies `vdl acl` changes made on any node. A node
                # without users still records them, for when it gets a users file.
                acls = self._security.acls or AclStore(meta, config.superusers, enabled=False)
                ReplicatedAcls(meta, acls).register(self._cluster.state)
                # Users likewise, so one `vdl user add` lets the user in on every node.
                ReplicatedUsers(meta, user_table).register(self._cluster.state)
                # DeleteRecords: every replica moves the partition's log start.
                ReplicatedLogStarts(broker).register(self._cluster.state, self._cluster.forwardable)
            self.markers = MarkerWriter(broker, self._cluster)
            try:
                with timing_gc_pauses():
                    await self._serve(broker, flusher, cluster_id.decode(), task_status)
            finally:
                with trio.CancelScope(shield=True):
                    await broker.close()
        finally:
            meta.close()
        log.info("stopped")

    def _load_tls(self) -> None:
        self._kafka_tls, self._grpc_tls = tls_contexts(self.config)
        self._admin_tls = admin_tls(self.config)
        self._raft_tls = raft_tls(self.config)

    async def _serve(
        self,
        broker: Broker,
        flusher: Flusher,
        cluster_id: str,
        task_status: trio.TaskStatus[None],
    ) -> None:
        config = self.config
        warm_up()
        groups = GroupService(
            broker.meta,
            GroupConfig(
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                min_session_timeout_ms=config.group_min_session_timeout_ms,
                max_session_timeout_ms=config.group_max_session_timeout_ms,
            ),
            wall_clock_ms=wall_clock_ms,
        )
        kafka_limits = ConnectionLimits(
            "Kafka", config.max_connections, config.max_connections_per_ip
        )
        grpc_limits = ConnectionLimits(
            "gRPC", config.max_connections, config.max_connections_per_ip
        )
        admin_limits = ConnectionLimits(
            "admin HTTP", config.max_connections, config.max_connections_per_ip
        )
        client_addresses: list[str] = ["", ""]
        view = NodeView(
            config.node_id,
            cluster_id,
            broker,
            cluster=self._cluster,
            groups=groups,
            listeners={"kafka": kafka_limits, "grpc": grpc_limits, "admin": admin_limits},
            addresses=lambda: (client_addresses[0], client_addresses[1]),
            started_at=_PROCESS_START,
        )
        async with trio.open_nursery() as root:
            await root.start(flusher.run)
            # The admin listener opens first and closes last: readiness says 503 while the
            # node starts and while it drains.
            admin_scope = trio.CancelScope()
            if config.admin_listen is not None:
                admin = HttpServer(
                    AdminApp(view, node_registry(view), self._security),
                    ssl_context=self._admin_tls,
                    limits=admin_limits,
                )
                listen = config.admin_listen

                async def serve_admin(task_status: trio.TaskStatus[int]) -> None:
                    with admin_scope:
                        await admin.serve(listen.host, listen.port, task_status=task_status)

                self.admin_port = await root.start(serve_admin)
                log.info("admin HTTP listener on %s:%d", listen.host, self.admin_port)
            raft_scope = trio.CancelScope()
            cluster = self._cluster
            if cluster is not None:

                async def replication(task_status: trio.TaskStatus[None]) -> None:
                    assert cluster is not None
                    with raft_scope:
                        await cluster.run(task_status=task_status)

                # Before the client listeners: partitions must be in place to be served.
                await root.start(replication)
            housekeeping = trio.CancelScope()

            async def retention() -> None:
                with housekeeping:
                    await broker.run_retention(config.retention_check_ms / 1000)

            root.start_soon(retention)

            lag_watch = trio.CancelScope()

            async def loop_lag() -> None:
                with lag_watch:
                    await watch_event_loop_lag()

            root.start_soon(loop_lag)
            markers = self.markers
            marker_scope = trio.CancelScope()
            if markers is not None:

                async def serve_markers() -> None:
                    with marker_scope:
                        await markers.run()

                root.start_soon(serve_markers)
            broker.groups = groups
            await root.start(groups.run)
            group_housekeeping = trio.CancelScope()

            def topic_consumers() -> dict[str, list[str]]:
                # Declared YDB consumers keep their offsets; offsets of missing topics go.
                return {t.name: [c.name for c in t.consumers] for t in broker.catalog.all()}

            async def offset_retention() -> None:
                with group_housekeeping:
                    await groups.run_retention(
                        topic_consumers,
                        config.offsets_retention,
                        config.offsets_retention_check_interval_ms,
                    )

            root.start_soon(offset_retention)
            transactions_scope = trio.CancelScope()
            if markers is not None:
                txn_log: TxnLog = self._replicated_txns or LocalTxnLog(broker.meta)
                metadata = None if cluster is None else cluster.metadata

                def coordinator_epoch() -> int:
                    # The term of group 0 (whose leader coordinates); 0 on one node.
                    if metadata is None:
                        return 0
                    return -1 if metadata.driver is None else metadata.driver.term

                transactions = TxnCoordinator(
                    TxnStore(broker.meta),
                    txn_log,
                    markers,
                    broker.allocate_producer_id,
                    wall_clock_ms,
                    max_timeout_ms=config.transaction_max_timeout_ms,
                    # The group coordinator's role: loaded once group 0's log is applied.
                    role=None if cluster is None else groups.coordinator_error,
                    coordinator_epoch=coordinator_epoch,
                )

                async def coordinate_transactions(task_status: trio.TaskStatus[None]) -> None:
                    with transactions_scope:
                        await transactions.run(task_status=task_status)

                await root.start(coordinate_transactions)
                broker.transactions = transactions
            coordination = trio.CancelScope()
            replicated_groups = self._replicated_groups
            if cluster is not None and replicated_groups is not None:
                role = CoordinatorRole(cluster.metadata, groups)
                groups.role = role.error
                groups.replicator = self._replicated_offsets
                groups.persist = replicated_groups.submit

                async def coordinate() -> None:
                    with coordination:
                        async with trio.open_nursery() as nursery:
                            nursery.start_soon(role.run)
                            nursery.start_soon(replicated_groups.run)
                            if self._token_key is not None:
                                nursery.start_soon(self._token_key.run)

                root.start_soon(coordinate)
            else:
                # One node: the groups as they stood when it stopped; members that are
                # still alive carry on without a rebalance.
                groups.load()
            kafka = KafkaServer(
                broker,
                config.node_id,
                cluster_id,
                config.kafka_listen,
                config.kafka_advertised,
                config.max_request_bytes,
                ssl_context=self._kafka_tls,
                security=self._security,
                quotas=KafkaQuotas(
                    config.producer_byte_rate if config.producer_byte_rate > 0 else None,
                    config.consumer_byte_rate if config.consumer_byte_rate > 0 else None,
                ),
                connections_max_idle_ms=config.connections_max_idle_ms,
                max_pre_auth_bytes=config.sasl_server_max_receive_size,
                fetch_max_bytes=config.fetch_max_bytes,
                limits=kafka_limits,
                keepalive=KeepaliveTiming(
                    config.tcp_keepalive_idle_s,
                    config.tcp_keepalive_interval_s,
                    config.tcp_keepalive_count,
                ),
            )
            ydb_cluster = None
            if cluster is not None:
                ydb_cluster = ClusterFrontEnds(cluster)
            ydb = YdbFrontEnd(
                broker,
                groups.offsets,
                broker.meta,
                database=config.database,
                node_id=config.node_id,
                users=self._users,
                clock_ms=wall_clock_ms,
                security=self._security,
                token_lifetime_ms=config.token_lifetime_ms,
                cluster=ydb_cluster,
            )
            if cluster is not None:
                # A consumer's YDB readers are balanced across the nodes, not per node.
                ydb.read.balance_cluster_wide(ClusterReadChannel(cluster))
            if config.token_secret_file is not None:
                ydb.auth.signer.adopt(load_token_secret(config.token_secret_file))
            token_key = self._token_key
            if token_key is not None:
                if token_key.secret is not None:
                    ydb.auth.signer.adopt(token_key.secret)
                token_key.on_secret.append(ydb.auth.signer.adopt)
            tls = config.tls_cert is not None and config.tls_key is not None
            grpc = GrpcServer(
                GrpcSettings(
                    max_concurrent_streams=config.grpc_max_concurrent_streams,
                    memory_budget=config.grpc_connection_memory_bytes,
                ),
                ssl_context=self._grpc_tls,
                idle_timeout=config.grpc_max_connection_idle_ms / 1000,
                handshake_timeout=config.tls_handshake_timeout_ms / 1000,
                limits=grpc_limits,
            )
            ydb.register(grpc)
            async with trio.open_nursery() as front_ends:
                self.kafka_port = await front_ends.start(kafka.serve)
                front_ends.start_soon(ydb.read.run)
                await front_ends.start(grpc.serve, config.grpc_listen.host, config.grpc_listen.port)
                self.grpc_port = grpc.ports[0]
                # With port 0 (tests) clients must be told the port actually bound.
                advertised = config.grpc_advertised or HostPort(
                    config.grpc_listen.host, self.grpc_port
                )
                ydb.set_endpoint(advertised.host, advertised.port, tls)
                kafka_address = config.kafka_advertised or HostPort(
                    config.kafka_listen.host, self.kafka_port
                )
                client_addresses[:] = [str(kafka_address), str(advertised)]
                if cluster is not None:
                    cluster.set_client_addresses(
                        (kafka_address.host, kafka_address.port), (advertised.host, advertised.port)
                    )
                log.info("YDB gRPC listener on %s:%d", config.grpc_listen.host, self.grpc_port)
                log.info("node %d ready (data in %s)", config.node_id, config.data_dir)
                view.mark_serving()
                task_status.started()
                await self._stop.wait()
                log.info("stopping: draining in-flight requests")
                front_ends.cancel_scope.deadline = (
                    trio.current_time() + config.shutdown_grace_ms / 1000
                )
                kafka.shutdown()
                broker.start_draining()
                # YDB streams finish their acks and ask clients to reconnect, then GOAWAY.
                ydb.stop_streams()
                front_ends.start_soon(grpc.shutdown, config.shutdown_grace_ms / 1000)
                # Held JoinGroup/SyncGroup requests are answered now, not at the grace deadline.
                groups.stop()
            housekeeping.cancel()
            lag_watch.cancel()
            marker_scope.cancel()
            group_housekeeping.cancel()
            coordination.cancel()
            transactions_scope.cancel()
            # In-flight produces have finished (or failed) above; now the groups can stop.
            admin_scope.cancel()
            raft_scope.cancel()
            flusher.stop()


async def _watch_signals(node: Node) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("received %s", signal.Signals(signum).name)
            node.request_stop()
            return


def _write_stage_timings(path: Path) -> None:
    try:
        STAGES.write_snapshot(path)
    except OSError as exc:
        log.warning("cannot write the stage timings to %s: %s", path, exc)


async def _stage_timings_on_signal(path: Path) -> None:
    """SIGUSR1 writes the stage timings (vdl/metrics/stages.py) to the data directory,
    for benchmarks to read from a running node; shutdown writes them once more."""
    with trio.open_signal_receiver(signal.SIGUSR1) as signals:
        async for _ in signals:
            _write_stage_timings(path)


async def run_node(config: NodeConfig) -> None:
    node = Node(config)
    timings = config.data_dir / SNAPSHOT_FILE
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_signals, node)
        nursery.start_soon(_stage_timings_on_signal, timings)
        await node.run()
        nursery.cancel_scope.cancel()
    _write_stage_timings(timings)


def main(argv: Sequence[str] | None = None) -> None:
    try:
        config = load_config(sys.argv[1:] if argv is None else argv, os.environ)
        # Unusable security files are start-up errors: one line, exit code 2.
        tls_contexts(config)
        admin_tls(config)
        raft_tls(config)
        if config.users is not None:
            UserStore.from_file(config.users)
        if config.token_secret_file is not None:
            load_token_secret(config.token_secret_file)
    except (ConfigError, TlsConfigError, UsersFileError) as exc:
        print(f"vdl-node: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    configure_logging(config.log_level, config.log_format)
    failure: StartupError | None = None
    try:
        trio.run(run_node, config)
    except* StartupError as group:
        failure = _first_leaf(group)
    if failure is not None:
        print(f"vdl-node: {failure}", file=sys.stderr)
        raise SystemExit(2)


def _first_leaf(group: BaseExceptionGroup[StartupError]) -> StartupError:
    first = group.exceptions[0]
    return first if isinstance(first, StartupError) else _first_leaf(first)


if __name__ == "__main__":
    main()
