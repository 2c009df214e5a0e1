"""The node's configuration: one typed object built from flags, a TOML file and VDL_* variables.

Precedence, highest first: command-line flags, environment (VDL_DATA_DIR, ...), the TOML file
given by --config, built-in defaults. Nothing else in the code reads the environment.
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from vdl.backends.registry import LOG_BACKENDS, LogBackend


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
    retention_bytes: int = -1  # -1: unlimited, as in Kafka
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_check_ms: int = 60_000
    max_message_bytes: int = 1024 * 1024 + 12  # Kafka's message.max.bytes default
    max_request_bytes: int = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
    shutdown_grace_ms: int = 30_000


_FIELDS = {f.name: f for f in dataclasses.fields(NodeConfig)}


def _convert(name: str, raw: Any) -> Any:
    """Turn a flag/TOML/env value into the field's type, with a message naming the setting."""
    try:
        if name in ("kafka_listen", "kafka_advertised"):
            return raw if isinstance(raw, HostPort) else HostPort.parse(str(raw))
        if name == "data_dir":
            return Path(raw)
        if name == "log_backend":
            if raw not in get_args(LogBackend):
                raise ConfigError(f"expected one of {', '.join(LOG_BACKENDS)}")
            return raw
        if name == "log_level":
            return str(raw).upper()
        if name == "auto_create_topics":
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
    return config
