"""A secured node for the security matrix: TLS on both listeners, SASL, users and ACLs.

Users: ``admin`` (a superuser), ``alice`` (may read and write topic ``sec-a`` and use group
``group-a``; nothing on ``sec-b``), ``bob`` (valid, but no ACLs at all).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trustme

from tests.integration.node_process import NodeProcess
from vdl.consensus.peer_tls import node_name

PASSWORDS = {"admin": "admin-Pw-9f3k", "alice": "alice-Pw-4j7q", "bob": "bob-Pw-2x8m"}
TOPIC_A, TOPIC_B, GROUP_A = "sec-a", "sec-b", "group-a"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass
class SecureNode:
    node: NodeProcess
    ca_file: Path
    users_file: Path

    @property
    def grpcs(self) -> str:
        return f"grpcs://{self.node.grpc_address}"

    def vdl(
        self, *args: str, user: str = "admin", stdin: str = ""
    ) -> subprocess.CompletedProcess[str]:
        """Run the `vdl` command against this node as ``user``."""
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "vdl.cli",
                *args,
                "--endpoint",
                self.grpcs,
                "--ca-file",
                str(self.ca_file),
                "--user",
                user,
                "--password",
                PASSWORDS[user],
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )


class Pki:
    """A raft CA (trustme) and certificates it issues: a node's names `vdl-node-<id>`."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.ca = trustme.CA()
        self.ca_file = directory / "raft-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))

    def files(self, name: str, identity: str) -> tuple[Path, Path]:
        cert = self.ca.issue_cert(identity)
        cert_file, key_file = self.directory / f"{name}.pem", self.directory / f"{name}.key"
        cert.cert_chain_pems[0].write_to_path(str(cert_file))
        cert.private_key_pem.write_to_path(str(key_file))
        return cert_file, key_file

    def node_args(self, node_id: int) -> list[str]:
        cert, key = self.files(f"node{node_id}", node_name(node_id))
        return [
            "--raft-tls-cert",
            str(cert),
            "--raft-tls-key",
            str(key),
            "--raft-tls-ca",
            str(self.ca_file),
        ]


def write_tls_files(base: Path) -> tuple[Path, Path, Path]:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert_file, key_file, ca_file = base / "node.pem", base / "node.key", base / "ca.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    for extra in cert.cert_chain_pems[1:]:
        extra.write_to_path(str(cert_file), append=True)
    cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    return cert_file, key_file, ca_file


def add_users(users_file: Path) -> None:
    for name, password in PASSWORDS.items():
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "vdl.cli",
                "user",
                "add",
                name,
                "--users-file",
                str(users_file),
                "--password-stdin",
            ],
            input=password + "\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr


def start_secure_node(base: Path, *extra: str) -> SecureNode:
    cert_file, key_file, ca_file = write_tls_files(base)
    users_file = base / "users"
    add_users(users_file)
    node = NodeProcess(
        base / "data",
        "--users",
        str(users_file),
        "--superusers",
        "admin",
        "--kafka-tls-cert",
        str(cert_file),
        "--kafka-tls-key",
        str(key_file),
        "--tls-cert",
        str(cert_file),
        "--tls-key",
        str(key_file),
        "--kafka-sasl-mechanisms",
        ",".join(MECHANISMS),
        *extra,
    ).start()
    secure = SecureNode(node, ca_file, users_file)
    try:
        for topic in (TOPIC_A, TOPIC_B):
            done = secure.vdl("topic", "create", topic, "--consumer", GROUP_A)
            assert done.returncode == 0, done.stderr
        for args in (
            ["--topic", TOPIC_A, "--operation", "read"],
            ["--topic", TOPIC_A, "--operation", "write"],
            ["--group", GROUP_A, "--operation", "read"],
        ):
            done = secure.vdl("acl", "add", "--principal", "alice", *args)
            assert done.returncode == 0, done.stderr
    except BaseException:
        node.kill()
        raise
    return secure


def assert_no_passwords(*roots: Path) -> None:
    """No password, in any form a client sent it, in any file under ``roots``."""
    for root in roots:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in files:
            data = path.read_bytes()
            for password in PASSWORDS.values():
                assert password.encode() not in data, f"password found in {path}"


def until_ok(action: Callable[[], subprocess.CompletedProcess[str]], timeout: float = 60) -> None:
    """Retry a CLI call until it succeeds: a cluster's metadata group may still be electing
    its first leader."""
    deadline = time.monotonic() + timeout
    while (done := action()).returncode != 0:
        assert time.monotonic() < deadline, done.stderr
        time.sleep(0.5)
