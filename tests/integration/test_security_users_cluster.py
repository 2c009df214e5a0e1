"""Users on a three-node cluster: `vdl user add --endpoint` through one node lets the user
in on every node (Kafka SCRAM and YDB Login), and `vdl user remove` through another locks
them out everywhere (user changes are metadata-group commands). The new user is in no
node's users file, and their password is in no log or data file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ydb
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.integration.cluster_support import Cluster
from tests.integration.node_process import NodeProcess
from tests.integration.security_support import PASSWORDS, Pki, add_users, until_ok
from tests.integration.waiting import wait_until

TIMEOUT = 60
NEW_USER, NEW_PASSWORD = "dave", "dave-Pw-7c2n"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    users = tmp_path / "users"
    add_users(users)
    c = Cluster(
        tmp_path,
        "--users",
        str(users),
        "--superusers",
        "admin",
        "--kafka-sasl-mechanisms",
        "SCRAM-SHA-256,SCRAM-SHA-512",
        # The refusals this test waits for must not throttle the admin's logins.
        "--login-max-failures",
        "1000",
        # Users on a cluster need raft TLS (the node refuses to start without it).
        node_args=Pki(tmp_path / "pki").node_args,
    )
    try:
        c.start()
        yield c
    finally:
        c.stop()


def vdl(
    cluster: Cluster, node: int, *args: str, user: str = "admin", stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    password = PASSWORDS.get(user, NEW_PASSWORD)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "vdl.cli",
            *args,
            "--endpoint",
            f"grpc://{cluster.nodes[node].grpc_address}",
            "--user",
            user,
        ],
        # Through the environment, as a script would: not in the node's view anyway.
        env={**os.environ, "VDL_PASSWORD": password},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def scram_ok(cluster: Cluster, node: int, mechanism: str) -> bool:
    config: dict[str, Any] = {
        "bootstrap.servers": cluster.nodes[node].bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": NEW_USER,
        "sasl.password": NEW_PASSWORD,
        "error_cb": lambda err: None,  # an authentication failure is expected later
    }
    try:
        AdminClient(config).list_topics(timeout=5)
    except KafkaException:
        return False
    return True


def ydb_login_ok(cluster: Cluster, node: int) -> bool:
    # Any call logs in first; listing topics needs no ACL (unlisted ones are left out).
    return vdl(cluster, node, "topic", "list", user=NEW_USER).returncode == 0


def test_a_user_added_through_one_node_logs_in_on_the_others(
    cluster: Cluster, tmp_path: Path
) -> None:
    until_ok(
        lambda: vdl(
            cluster, 1, "user", "add", NEW_USER, "--password-stdin", stdin=NEW_PASSWORD + "\n"
        )
    )
    # Committed on node 1's word; node 3 applies the command when it hears the commit.
    wait_until(
        lambda: NEW_USER in vdl(cluster, 3, "user", "list").stdout.split(),
        "the new user listed on node 3",
        timeout=TIMEOUT,
    )
    again = vdl(cluster, 2, "user", "add", NEW_USER, "--password-stdin", stdin=NEW_PASSWORD + "\n")
    assert again.returncode != 0 and "already exists" in again.stderr, again

    wait_until(
        lambda: scram_ok(cluster, 3, "SCRAM-SHA-256"), "SCRAM-SHA-256 on node 3", timeout=TIMEOUT
    )
    assert scram_ok(cluster, 3, "SCRAM-SHA-512")
    wait_until(lambda: ydb_login_ok(cluster, 2), "YDB login on node 2", timeout=TIMEOUT)

    # Only a superuser (or alter on the cluster) may manage users.
    refused = vdl(cluster, 2, "user", "remove", "alice", user="alice")
    assert refused.returncode != 0 and "may not alter" in refused.stderr, refused

    until_ok(lambda: vdl(cluster, 2, "user", "remove", NEW_USER))
    wait_until(
        lambda: ydb_login_ok(cluster, 1),
        "YDB login on node 1",
        timeout=TIMEOUT,
        done=lambda ok: not ok,
    )
    assert not scram_ok(cluster, 1, "SCRAM-SHA-256")

    # A restart replays the metadata log: the removed user must not come back.
    cluster.nodes[3].stop(30)
    cluster.nodes[3].start()
    wait_until(
        lambda: scram_ok(cluster, 3, "SCRAM-SHA-256"),
        "SCRAM on restarted node 3",
        timeout=TIMEOUT,
        done=lambda ok: not ok,
    )

    # The password was hashed by the CLI: no node wrote it anywhere (logs included).
    for path in (p for p in tmp_path.rglob("*") if p.is_file()):
        assert NEW_PASSWORD.encode() not in path.read_bytes(), f"password found in {path}"
    assert NEW_USER not in (tmp_path / "users").read_text()


def test_on_one_node_users_go_into_its_table(tmp_path: Path) -> None:
    users = tmp_path / "users"
    add_users(users)
    node = NodeProcess(tmp_path / "data", "--users", str(users), "--superusers", "admin")
    with node:
        endpoint = f"grpc://{node.grpc_address}"

        def run(*args: str, user: str = "admin") -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "vdl.cli", *args, "--endpoint", endpoint, "--user", user],
                env={**os.environ, "VDL_PASSWORD": PASSWORDS.get(user, NEW_PASSWORD)},
                input=NEW_PASSWORD + "\n",
                capture_output=True,
                text=True,
                timeout=60,
            )

        added = run("user", "add", NEW_USER, "--password-stdin")
        assert added.returncode == 0, added.stderr
        assert run("topic", "list", user=NEW_USER).returncode == 0
        changed = run("user", "passwd", NEW_USER, "--password-stdin")
        assert changed.returncode == 0, changed.stderr
        assert run("user", "remove", NEW_USER).returncode == 0
        assert run("topic", "list", user=NEW_USER).returncode != 0
        missing = run("user", "remove", NEW_USER)
        assert missing.returncode != 0 and "no user" in missing.stderr, missing


def _token_from(cluster: Cluster, node: int) -> str:
    """Log in as admin on `node` with the ydb SDK's static credentials."""
    config = ydb.DriverConfig(
        endpoint=f"grpc://{cluster.nodes[node].grpc_address}",
        database="/local",
        disable_discovery=True,
    )
    credentials = ydb.StaticCredentials(config, "admin", PASSWORDS["admin"])  # type: ignore[no-untyped-call]
    token = credentials.get_auth_token()
    assert token
    return str(token)


def _token_works(cluster: Cluster, node: int, token: str) -> bool:
    config = ydb.DriverConfig(
        endpoint=f"grpc://{cluster.nodes[node].grpc_address}",
        database="/local",
        credentials=ydb.AccessTokenCredentials(token),  # type: ignore[no-untyped-call]
        disable_discovery=True,
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=10, fail_fast=True)
        driver.scheme_client.list_directory("/local")  # type: ignore[no-untyped-call]
    except ydb.Unauthorized:
        return False
    finally:
        driver.stop()
    return True


def test_a_token_from_one_node_is_accepted_by_every_node(cluster: Cluster) -> None:
    """The SDK logs in on one node and sends the token wherever discovery points it: the
    nodes sign tokens with one secret agreed through the metadata group."""
    until_ok(lambda: vdl(cluster, 1, "topic", "list"))
    deadline = time.monotonic() + TIMEOUT
    while True:
        token = _token_from(cluster, 1)  # signed with the shared secret once agreed
        if all(_token_works(cluster, node, token) for node in (1, 2, 3)):
            break
        assert time.monotonic() < deadline, "a node-1 token was never accepted everywhere"
        time.sleep(0.3)
    forged = token[: token.rindex(".") + 1] + "A" * 43
    assert not _token_works(cluster, 2, forged)


def test_with_a_token_secret_file_the_secret_never_enters_the_log(tmp_path: Path) -> None:
    users = tmp_path / "users"
    add_users(users)
    secret_file = tmp_path / "token.secret"
    secret_file.write_text("9f" * 32 + "\n")
    c = Cluster(
        tmp_path,
        "--users",
        str(users),
        "--superusers",
        "admin",
        "--token-secret-file",
        str(secret_file),
        node_args=Pki(tmp_path / "pki").node_args,
    )
    try:
        c.start()
        until_ok(lambda: vdl(c, 1, "topic", "list"))
        # Every node signs with the file's key from the start: no agreement to wait for.
        token = _token_from(c, 1)
        assert all(_token_works(c, node, token) for node in (1, 2, 3))
    finally:
        c.stop()
    for node in (1, 2, 3):
        for path in (tmp_path / f"node{node}" / "raft" / "metadata").rglob("*"):
            if path.is_file():
                assert b"token_key" not in path.read_bytes(), path
