"""The replication flags: --node-id, --raft-listen, --peers (flags, TOML and VDL_* alike)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vdl.config import ConfigError, HostPort, load_config

PEERS = "1=127.0.0.1:9301,2=127.0.0.1:9302,3=127.0.0.1:9303"


def test_peers_parse_and_raft_listen_defaults_to_own_entry() -> None:
    config = load_config(["--node-id", "2", "--peers", PEERS], {})
    assert config.clustered
    assert dict(config.peers)[3] == HostPort("127.0.0.1", 9303)
    assert config.raft_address() == HostPort("127.0.0.1", 9302)
    explicit = load_config(["--node-id", "2", "--peers", PEERS, "--raft-listen", "0.0.0.0:7"], {})
    assert explicit.raft_address() == HostPort("0.0.0.0", 7)


def test_peers_from_environment_and_toml(tmp_path: Path) -> None:
    env = load_config([], {"VDL_PEERS": PEERS, "VDL_NODE_ID": "3"})
    assert len(env.peers) == 3 and env.node_id == 3
    toml = tmp_path / "vdl.toml"
    toml.write_text('node-id = 1\n[peers]\n1 = "127.0.0.1:1"\n2 = "127.0.0.1:2"\n')
    config = load_config(["--config", str(toml)], {})
    assert [n for n, _ in config.peers] == [1, 2]


def test_no_peers_is_a_one_node_cluster() -> None:
    assert not load_config([], {}).clustered


@pytest.mark.parametrize(
    "args",
    [
        ["--node-id", "4", "--peers", PEERS],
        ["--peers", "1=127.0.0.1:1,1=127.0.0.1:2"],
        ["--peers", "x=127.0.0.1:1"],
        ["--peers", "1:127.0.0.1:1"],
        ["--raft-listen", "127.0.0.1:1"],
    ],
)
def test_bad_replication_settings_are_refused(args: list[str]) -> None:
    with pytest.raises(ConfigError):
        load_config(args, {})


RAFT_TLS = ["--raft-tls-cert", "n.pem", "--raft-tls-key", "n.key", "--raft-tls-ca", "ca.pem"]


def test_users_on_a_cluster_need_raft_tls_and_raft_insecure_does_not_lift_it() -> None:
    base = ["--node-id", "1", "--peers", PEERS, "--users", "users"]
    for extra in ([], ["--raft-insecure", "true"]):
        with pytest.raises(ConfigError, match="users on a cluster need raft TLS"):
            load_config(base + extra, {})
    assert load_config(base + RAFT_TLS, {}).users == Path("users")
    # One node without peers has no raft port: users alone are fine.
    assert load_config(["--users", "users"], {}).users == Path("users")


def test_raft_insecure_is_for_clusters_without_raft_tls() -> None:
    base = ["--node-id", "1", "--peers", PEERS]
    assert load_config([*base, "--raft-insecure", "true"], {}).raft_insecure
    assert not load_config(base, {}).raft_insecure
    with pytest.raises(ConfigError, match="raft-insecure contradicts raft-tls-cert"):
        load_config(base + RAFT_TLS + ["--raft-insecure", "true"], {})
