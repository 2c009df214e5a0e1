"""ACLs on a three-node cluster: `vdl acl add` through one node is enforced by another, and
`vdl acl remove` through a third revokes it everywhere (ACL changes are metadata-group
commands). Every node reads the same users file."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ydb

from tests.integration.cluster_support import Cluster
from tests.integration.security_support import PASSWORDS, Pki, add_users, until_ok

DATABASE = "/local"
PATH = f"{DATABASE}/guarded"
TIMEOUT = 60


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    users = tmp_path / "users"
    add_users(users)
    # Users on a cluster need raft TLS (the node refuses to start without it).
    pki = Pki(tmp_path / "pki")
    c = Cluster(tmp_path, "--users", str(users), "--superusers", "admin", node_args=pki.node_args)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def vdl(cluster: Cluster, node: int, *args: str) -> subprocess.CompletedProcess[str]:
    """`vdl ... ` as admin against one node."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "vdl.cli",
            *args,
            "--endpoint",
            f"grpc://{cluster.nodes[node].grpc_address}",
            "--user",
            "admin",
            "--password",
            PASSWORDS["admin"],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def alice_may_describe(cluster: Cluster, node: int) -> bool:
    # Without discovery: the SDK logs in and calls on exactly this node.
    config = ydb.DriverConfig(
        endpoint=f"grpc://{cluster.nodes[node].grpc_address}",
        database=DATABASE,
        credentials=ydb.StaticCredentials.from_user_password("alice", PASSWORDS["alice"]),
        disable_discovery=True,
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=10, fail_fast=True)
        try:
            driver.topic_client.describe_topic(PATH)
        except ydb.Unauthorized:
            return False
        return True
    finally:
        driver.stop(timeout=10)


def wait_for(cluster: Cluster, node: int, allowed: bool) -> None:
    deadline = time.monotonic() + TIMEOUT
    while alice_may_describe(cluster, node) != allowed:
        assert time.monotonic() < deadline, f"node {node} never allowed={allowed}"
        time.sleep(0.3)


def test_an_acl_added_on_one_node_is_enforced_on_the_others(cluster: Cluster) -> None:
    until_ok(lambda: vdl(cluster, 3, "topic", "create", "guarded", "--consumer", "c"))
    assert not alice_may_describe(cluster, 2)

    grant = ("--principal", "alice", "--topic", "guarded", "--operation", "describe")
    until_ok(lambda: vdl(cluster, 1, "acl", "add", *grant))
    wait_for(cluster, 2, True)
    wait_for(cluster, 3, True)
    listed = vdl(cluster, 2, "acl", "list")
    assert listed.returncode == 0 and "alice" in listed.stdout, listed

    until_ok(lambda: vdl(cluster, 3, "acl", "remove", *grant))
    wait_for(cluster, 2, False)
    wait_for(cluster, 1, False)

    # A restart replays the metadata log: the removed ACL must not come back.
    cluster.nodes[2].stop(30)
    cluster.nodes[2].start()
    assert not alice_may_describe(cluster, 2)
