"""The YDB front end's node flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from vdl.config import ConfigError, HostPort, load_config


def test_defaults() -> None:
    config = load_config([], {})
    assert config.grpc_listen == HostPort("127.0.0.1", 2135)
    assert (config.database, config.tls_cert, config.tls_key, config.users) == (
        "/local",
        None,
        None,
        None,
    )


def test_flags() -> None:
    config = load_config(
        [
            "--grpc-listen",
            "0.0.0.0:2136",
            "--grpc-advertised",
            "node1:2136",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--database",
            "/prod/",
            "--users",
            "users.txt",
        ],
        {},
    )
    assert config.grpc_listen == HostPort("0.0.0.0", 2136)
    assert config.grpc_advertised == HostPort("node1", 2136)
    assert (config.tls_cert, config.tls_key) == (Path("c.pem"), Path("k.pem"))
    assert config.database == "/prod"
    assert config.users == Path("users.txt")


@pytest.mark.parametrize(
    "argv", [["--tls-cert", "c.pem"], ["--database", "local"], ["--grpc-listen", "nope"]]
)
def test_bad_flags(argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        load_config(argv, {})
