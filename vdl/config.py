"""The node's configuration: one typed object built from flags, a TOML file and VDL_* variables.

Precedence, highest first: command-line flags, environment (VDL_DATA_DIR, ...), the TOML file
given by --config, built-in defaults. Nothing else in the code reads the environment.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from vdl.backends.registry import LOG_BACKENDS, LogBackend
from vdl.log.producer_state import PRODUCER_ID_EXPIRATION_MS
from vdl.logs import LOG_FORMATS
from vdl.net.kafka.keepalive import DEFAULT_KEEPALIVE

# The Kafka SASL mechanisms a node can enable (vdl.security.sasl.MECHANISMS).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class ConfigError(Exception):
    """The configuration cannot be used; the message says which setting and why."""


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> HostPort:
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit():
            raise ConfigError(f"expected HOST:PORT, got {text!r}")
        host = host.strip("[]") or "127.0.0.1"
        value = int(port)
        if not 0 <= value <= 65535:
            raise ConfigError(f"port out of range in {text!r}")
        return cls(host, value)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class NodeConfig:
    data_dir: Path = Path("vdl-data")
    kafka_listen: HostPort = field(default_factory=lambda: HostPort("127.0.0.1", 9092))
    # The address Kafka clients are told to connect to; defaults to the listen address.
    kafka_advertised: HostPort | None = None
    log_backend: LogBackend = "segment"
    log_level: str = "INFO"
    node_id: int = 1
    auto_create_topics: bool = True
    default_partitions: int = 1
    segment_bytes: int = 64 * 1024 * 1024
    segment_preallocate: bool = False
    retention_bytes: int = -1  # -1: unlimited, as in Kafka
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_check_ms: int = 60_000
    max_message_bytes: int = 1024 * 1024 + 12  # Kafka's message.max.bytes default
    max_request_bytes: int = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
    # The largest Kafka request before SASL authentication has succeeded (Kafka's
    # sasl.server.max.receive.size): a larger one closes the connection.
    sasl_server_max_receive_size: int = 512 * 1024
    # The most one Kafka Fetch response carries, whatever the client asks (Kafka's
    # broker-side fetch.max.bytes, 55 MiB).
    fetch_max_bytes: int = 55 * 1024 * 1024
    # Kafka clients: a connection with no traffic and nothing in flight for this long is
    # closed (Kafka's connections.max.idle.ms); byte-rate quotas per client id for
    # produce and fetch, -1 for none (Kafka's producer_byte_rate / consumer_byte_rate).
    connections_max_idle_ms: int = 600_000
    # Open connections allowed on each client listener (Kafka, gRPC), in all and from one
    # address (Kafka's max.connections, max.connections.per.ip): more are closed at once.
    max_connections: int = 10_000
    max_connections_per_ip: int = 1_000
    producer_byte_rate: int = -1
    consumer_byte_rate: int = -1
    # TCP keepalive on accepted Kafka connections: the first probe after this much
    # silence, then one per interval; after `count` unanswered probes the peer is gone.
    tcp_keepalive_idle_s: int = DEFAULT_KEEPALIVE.idle_s
    tcp_keepalive_interval_s: int = DEFAULT_KEEPALIVE.interval_s
    tcp_keepalive_count: int = DEFAULT_KEEPALIVE.count
    # Kafka's producer.id.expiration.ms: an idempotent producer silent this long is
    # forgotten by every partition (its next batch is then accepted whatever its sequence).
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS
    # Kafka's transaction.max.timeout.ms: InitProducerId with a longer transaction timeout
    # is refused with INVALID_TRANSACTION_TIMEOUT.
    transaction_max_timeout_ms: int = 900_000
    shutdown_grace_ms: int = 30_000
    # Consumer groups; names and defaults follow Kafka's group.* broker settings.
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    # Committed offsets of a group without members expire this long after it became Empty
    # (or after their commit, if later), and the group goes with its last offset (Kafka's
    # offsets.retention.minutes). The ms setting, when given, overrides the minutes, as
    # log.retention.ms does log.retention.minutes in Kafka.
    offsets_retention_minutes: int = 10080
    offsets_retention_ms: int | None = None
    offsets_retention_check_interval_ms: int = 600_000
    # YDB topic API (gRPC). TLS is on when both tls_cert and tls_key are given; static
    # credentials (and so mandatory tokens) are on when a users file is given.
    grpc_listen: HostPort = field(default_factory=lambda: HostPort("127.0.0.1", 2135))
    # The address Discovery hands to YDB clients; defaults to the listen address.
    grpc_advertised: HostPort | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    database: str = "/local"
    users: Path | None = None
    # gRPC connection limits (README "Hardening"): request bytes a connection may buffer
    # beyond its flow-control windows (gRPC-core's resource quota), concurrent streams
    # (SETTINGS_MAX_CONCURRENT_STREAMS), and a connection with no open call and no frame
    # for this long gets GOAWAY and is closed (grpc-go's MaxConnectionIdle). A TLS
    # handshake not finished within the timeout loses its connection.
    grpc_connection_memory_bytes: int = 32 * 1024 * 1024
    grpc_max_concurrent_streams: int = 250
    grpc_max_connection_idle_ms: int = 600_000
    tls_handshake_timeout_ms: int = 10_000
    # Security (README "Security"). Kafka TLS is on when both kafka_tls_cert and
    # kafka_tls_key are given; tls_client_ca makes both listeners require client
    # certificates it signed (mTLS). SASL mechanisms need a users file. With a users file,
    # authentication is on for both protocols and ACLs are enforced: deny unless granted.
    kafka_tls_cert: Path | None = None
    kafka_tls_key: Path | None = None
    tls_client_ca: Path | None = None
    # Raft connections (peer links, snapshot pulls, admin commands) use mutual TLS when
    # all three are given: a certificate naming this node (DNS vdl-node-<id>), its key,
    # and the CA every raft certificate of the cluster is checked against.
    raft_tls_cert: Path | None = None
    raft_tls_key: Path | None = None
    raft_tls_ca: Path | None = None
    # A cluster without raft TLS: whoever reaches a raft port can read the metadata log and
    # send admin commands. Allowed without users (with a warning at start, which this
    # silences, as CockroachDB's --insecure); never with users (README "Hardening").
    raft_insecure: bool = False
    # The YDB token-signing secret from a file (the same on every node), as Kafka's
    # delegation.token.secret.key: it then never enters group 0's log. None: the first
    # leader of group 0 proposes a random one, which every raft-port reader can see.
    token_secret_file: Path | None = None
    kafka_sasl_mechanisms: tuple[str, ...] = ()
    superusers: tuple[str, ...] = ()
    token_lifetime_ms: int = 12 * 3600 * 1000
    # Failed logins (SASL or YDB Login) allowed per client address per window.
    login_max_failures: int = 10
    login_failure_window_ms: int = 60_000
    # Replication. With peers (the raft addresses of the initial members, the same list on
    # every node) the node joins a cluster as --node-id; without, it is a one-node cluster.
    raft_listen: HostPort | None = None  # defaults to this node's address in peers
    peers: tuple[tuple[int, HostPort], ...] = ()
    raft_tick_ms: int = 100  # one Raft tick; elections take 10-20 ticks
    # Not an initial member: this node asks the others in peers to add it (README).
    join: bool = False
    # The data centre this node is in ("" for none): partition leaders move to the nodes of
    # a topic's preferred.dc (VDL 3.2), so a label must be the same string on every node.
    dc: str = ""
    # The DC the metadata group's leader (the controller and group coordinator) moves to
    # when a voter there is healthy; "" for none. Only the current leader's value counts,
    # so give every node the same one.
    metadata_dc: str = ""
    # Partition leaders hand leadership to their preferred replica (the first of the
    # assignment, or the first in the topic's preferred.dc) when it is healthy: Kafka's
    # auto.leader.rebalance.enable.
    leader_rebalance: bool = True
    # The HTTP admin listener (README "Observability"): /metrics, health, JSON views and
    # the status page. None (`none`) turns it off.
    admin_listen: HostPort | None = field(default_factory=lambda: HostPort("127.0.0.1", 9644))
    # Log lines as text, or as one JSON object a line for log shippers.
    log_format: str = "text"

    @property
    def clustered(self) -> bool:
        return bool(self.peers)

    @property
    def offsets_retention(self) -> int:
        """The offset retention in milliseconds."""
        if self.offsets_retention_ms is not None:
            return self.offsets_retention_ms
        return self.offsets_retention_minutes * 60_000

    def raft_address(self) -> HostPort:
        if self.raft_listen is not None:
            return self.raft_listen
        return dict(self.peers)[self.node_id]


def parse_peers(raw: Any) -> tuple[tuple[int, HostPort], ...]:
    """`1=HOST:PORT,2=HOST:PORT` (or a TOML table {"1" = "HOST:PORT"}), sorted by id."""
    if isinstance(raw, Mapping):
        items = [(str(k), str(v)) for k, v in raw.items()]
    else:
        items = []
        for part in str(raw).split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            if not sep:
                raise ConfigError(f"expected ID=HOST:PORT, got {part.strip()!r}")
            items.append((key.strip(), value.strip()))
    peers: dict[int, HostPort] = {}
    for key, value in items:
        if not key.isdigit() or int(key) <= 0:
            raise ConfigError(f"node ids are positive integers, got {key!r}")
        if int(key) in peers:
            raise ConfigError(f"node {key} is listed twice")
        peers[int(key)] = HostPort.parse(value)
    return tuple(sorted(peers.items()))


_FIELDS = {f.name: f for f in dataclasses.fields(NodeConfig)}
# Linux refuses larger values for TCP_KEEPIDLE / TCP_KEEPINTVL / TCP_KEEPCNT; checked here
# so a bad value stops the node at start-up instead of being skipped per connection.
_KEEPALIVE_LIMITS = {
    "tcp_keepalive_idle_s": 32767,
    "tcp_keepalive_interval_s": 32767,
    "tcp_keepalive_count": 127,
}
_DC_NAME = re.compile(r"^[A-Za-z0-9._-]{0,64}$")


def _convert(name: str, raw: Any) -> Any:
    """Turn a flag/TOML/env value into the field's type, with a message naming the setting."""
    try:
        if name == "peers":
            return parse_peers(raw)
        if name == "admin_listen":
            if isinstance(raw, HostPort):
                return raw
            return None if str(raw).strip().lower() == "none" else HostPort.parse(str(raw))
        if name == "log_format":
            if str(raw) not in LOG_FORMATS:
                raise ConfigError(f"expected one of {', '.join(LOG_FORMATS)}")
            return str(raw)
        if name in (
            "kafka_listen",
            "kafka_advertised",
            "grpc_listen",
            "grpc_advertised",
            "raft_listen",
        ):
            return raw if isinstance(raw, HostPort) else HostPort.parse(str(raw))
        if name in (
            "data_dir",
            "tls_cert",
            "tls_key",
            "users",
            "kafka_tls_cert",
            "kafka_tls_key",
            "tls_client_ca",
            "raft_tls_cert",
            "raft_tls_key",
            "raft_tls_ca",
            "token_secret_file",
        ):
            return Path(raw)
        if name in ("kafka_sasl_mechanisms", "superusers"):
            items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
            values = tuple(str(item).strip() for item in items if str(item).strip())
            if name == "kafka_sasl_mechanisms":
                values = tuple(v.upper() for v in values)
                bad = [v for v in values if v not in SASL_MECHANISMS]
                if bad:
                    raise ConfigError(f"expected some of {', '.join(SASL_MECHANISMS)}")
            return values
        if name == "database":
            text = str(raw)
            if not text.startswith("/") or text.rstrip("/") == "":
                raise ConfigError("expected an absolute path such as /local")
            return text.rstrip("/")
        if name == "log_backend":
            if raw not in get_args(LogBackend):
                raise ConfigError(f"expected one of {', '.join(LOG_BACKENDS)}")
            return raw
        if name == "log_level":
            return str(raw).upper()
        if name in ("dc", "metadata_dc"):
            text = str(raw).strip()
            if not _DC_NAME.match(text):
                raise ConfigError("expected up to 64 characters of [A-Za-z0-9._-]")
            return text
        if name in (
            "auto_create_topics",
            "join",
            "segment_preallocate",
            "leader_rebalance",
            "raft_insecure",
        ):
            if isinstance(raw, bool):
                return raw
            lowered = str(raw).lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise ConfigError("expected true or false")
            return lowered in ("true", "1", "yes")
        return int(raw)
    except (ConfigError, ValueError, TypeError) as exc:
        raise ConfigError(f"bad value {raw!r} for {name.replace('_', '-')}: {exc}") from None


def _arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vdl-node", description="Run one VDL node (a one-node cluster by default)."
    )
    parser.add_argument("--config", help="TOML file with the same keys as the flags")
    for name in _FIELDS:
        parser.add_argument("--" + name.replace("_", "-"), dest=name, default=None)
    return parser


def load_config(argv: Sequence[str], environ: Mapping[str, str]) -> NodeConfig:
    args = _arg_parser().parse_args(list(argv))
    values: dict[str, Any] = {}
    if args.config:
        try:
            with open(args.config, "rb") as fh:
                table = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {args.config}: {exc}") from None
        for key, raw in table.items():
            name = key.replace("-", "_")
            if name not in _FIELDS:
                raise ConfigError(f"unknown key {key!r} in {args.config}")
            values[name] = raw
    for name in _FIELDS:
        env_value = environ.get("VDL_" + name.upper())
        if env_value is not None:
            values[name] = env_value
        flag_value = getattr(args, name)
        if flag_value is not None:
            values[name] = flag_value
    config = NodeConfig(**{name: _convert(name, raw) for name, raw in values.items()})
    if config.default_partitions < 1:
        raise ConfigError("default-partitions must be at least 1")
    if (config.tls_cert is None) != (config.tls_key is None):
        raise ConfigError("tls-cert and tls-key must be given together")
    if (config.kafka_tls_cert is None) != (config.kafka_tls_key is None):
        raise ConfigError("kafka-tls-cert and kafka-tls-key must be given together")
    if (
        config.tls_client_ca is not None
        and config.tls_cert is None
        and (config.kafka_tls_cert is None)
    ):
        raise ConfigError("tls-client-ca needs a TLS listener (tls-cert or kafka-tls-cert)")
    if config.kafka_sasl_mechanisms and config.users is None:
        raise ConfigError("kafka-sasl-mechanisms needs a users file (--users)")
    if config.token_lifetime_ms < 1000:
        raise ConfigError("token-lifetime-ms must be at least 1000")
    if config.peers and config.node_id not in dict(config.peers):
        raise ConfigError(f"node-id {config.node_id} is not among the peers")
    if config.raft_listen is not None and not config.peers:
        raise ConfigError("raft-listen needs peers")
    raft_tls = (config.raft_tls_cert, config.raft_tls_key, config.raft_tls_ca)
    if any(path is not None for path in raft_tls):
        if any(path is None for path in raft_tls):
            raise ConfigError("raft-tls-cert, raft-tls-key and raft-tls-ca must be given together")
        if not config.peers:
            raise ConfigError("raft-tls-cert needs peers")
        if config.raft_insecure:
            raise ConfigError("raft-insecure contradicts raft-tls-cert: give one or the other")
    elif config.peers and config.users is not None:
        # Group 0's log holds the users, ACLs and token-signing key, and admin commands
        # reach it through any raft port: with authentication on, that port must be too.
        raise ConfigError(
            "users on a cluster need raft TLS (raft-tls-cert, raft-tls-key, raft-tls-ca): "
            "without it anyone who reaches a raft port can read the users and ACLs and "
            "forge tokens; raft-insecure does not lift this"
        )
    for name in (
        "grpc_connection_memory_bytes",
        "grpc_max_concurrent_streams",
        "grpc_max_connection_idle_ms",
        "tls_handshake_timeout_ms",
    ):
        if getattr(config, name) < 1:
            raise ConfigError(f"{name.replace('_', '-')} must be at least 1")
    if config.max_connections < 1 or config.max_connections_per_ip < 1:
        raise ConfigError("max-connections and max-connections-per-ip must be at least 1")
    if config.fetch_max_bytes < 1:
        raise ConfigError("fetch-max-bytes must be at least 1")
    if config.sasl_server_max_receive_size < 1:
        raise ConfigError("sasl-server-max-receive-size must be at least 1")
    if config.connections_max_idle_ms < 1:
        raise ConfigError("connections-max-idle-ms must be at least 1")
    if config.producer_byte_rate == 0 or config.consumer_byte_rate == 0:
        raise ConfigError("a byte rate is positive, or -1 for no quota")
    for name, top in _KEEPALIVE_LIMITS.items():
        value = getattr(config, name)
        if not 1 <= value <= top:
            flag = name.replace("_", "-")
            raise ConfigError(f"{flag} must be between 1 and {top}, got {value}")
    if config.producer_id_expiration_ms < 1:
        raise ConfigError("producer-id-expiration-ms must be at least 1")
    if config.transaction_max_timeout_ms < 1:
        raise ConfigError("transaction-max-timeout-ms must be at least 1")
    if config.raft_tick_ms < 1:
        raise ConfigError("raft-tick-ms must be at least 1")
    if config.offsets_retention_minutes < 1:
        raise ConfigError("offsets-retention-minutes must be at least 1")
    if config.offsets_retention_ms is not None and config.offsets_retention_ms < 1:
        raise ConfigError("offsets-retention-ms must be at least 1")
    if config.offsets_retention_check_interval_ms < 1:
        raise ConfigError("offsets-retention-check-interval-ms must be at least 1")
    return config
