"""Mutual TLS: with ``--tls-client-ca`` both listeners demand a client certificate from that
CA; a Kafka connection without SASL acts as ``User:<certificate CN>`` and ACLs apply to
that principal; a client without a certificate is refused and the node serves on."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
import ydb
from confluent_kafka import KafkaError, Producer

from tests.integration.node_process import NodeProcess
from tests.integration.security_support import PASSWORDS, add_users
from vdl.net.ydb.protos import ydb_auth_pb2

DATABASE = "/local"
ALLOWED, FORBIDDEN = "mtls-a", "mtls-b"


@dataclass
class MtlsNode:
    node: NodeProcess
    base: Path
    ca: trustme.CA

    def client_files(self, cn: str) -> tuple[Path, Path]:
        """A client certificate (chain) and key issued by the node's client CA."""
        cert = self.ca.issue_cert(f"{cn}.clients.test", common_name=cn)
        cert_file, key_file = self.base / f"{cn}.pem", self.base / f"{cn}.key"
        cert.cert_chain_pems[0].write_to_path(str(cert_file))
        for extra in cert.cert_chain_pems[1:]:
            extra.write_to_path(str(cert_file), append=True)
        cert.private_key_pem.write_to_path(str(key_file))
        return cert_file, key_file

    @property
    def ca_file(self) -> Path:
        return self.base / "ca.pem"


def _cli(node: NodeProcess, ca_file: Path, *args: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vdl.cli",
            *args,
            "--endpoint",
            f"grpcs://{node.grpc_address}",
            "--ca-file",
            str(ca_file),
            "--user",
            "admin",
            "--password",
            PASSWORDS["admin"],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MtlsNode]:
    base = tmp_path_factory.mktemp("mtls")
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    cert_file, key_file = base / "node.pem", base / "node.key"
    server.cert_chain_pems[0].write_to_path(str(cert_file))
    for extra in server.cert_chain_pems[1:]:
        extra.write_to_path(str(cert_file), append=True)
    server.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(base / "ca.pem"))
    add_users(base / "users")
    common = [
        "--users",
        str(base / "users"),
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
    ]
    # Topics and ACLs first (the CLI has no client certificate), then mTLS on, same data.
    setup = NodeProcess(base / "data", *common)
    with setup:
        for topic in (ALLOWED, FORBIDDEN):
            _cli(setup, base / "ca.pem", "topic", "create", topic, "--consumer", "g")
        for operation in ("write", "read"):
            _cli(
                setup,
                base / "ca.pem",
                "acl",
                "add",
                "--principal",
                "alice",
                "--topic",
                ALLOWED,
                "--operation",
                operation,
            )
    node = NodeProcess(
        base / "data",
        *common,
        "--tls-client-ca",
        str(base / "ca.pem"),
        kafka_port=setup.kafka_port,
        grpc_port=setup.grpc_port,
    )
    with node:
        yield MtlsNode(node, base, ca)


def _kafka(mtls: MtlsNode, cn: str | None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": mtls.node.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(mtls.ca_file),
        "socket.timeout.ms": 5000,
        "message.timeout.ms": 5000,
    }
    if cn is not None:
        cert_file, key_file = mtls.client_files(cn)
        config["ssl.certificate.location"] = str(cert_file)
        config["ssl.key.location"] = str(key_file)
    return config


def _produce(config: dict[str, Any], topic: str) -> tuple[Any, list[KafkaError]]:
    outcome: list[Any] = []
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    producer.produce(topic, value=b"v", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(10)
    return (outcome[0] if outcome else "no delivery report"), errors


def test_kafka_principal_is_the_certificate_cn(mtls: MtlsNode) -> None:
    err, errors = _produce(_kafka(mtls, "alice"), ALLOWED)
    assert err is None and not errors, (err, errors)
    err, _ = _produce(_kafka(mtls, "alice"), FORBIDDEN)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    # bob holds a valid certificate but no ACL.
    err, _ = _produce(_kafka(mtls, "bob"), ALLOWED)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def test_kafka_client_without_certificate_is_refused(mtls: MtlsNode) -> None:
    err, errors = _produce(_kafka(mtls, None), ALLOWED)
    assert err is not None, "a client without a certificate got through"
    assert errors, "expected a transport error"
    # The node is unharmed: a client with a certificate is served right after.
    err, errors = _produce(_kafka(mtls, "alice"), ALLOWED)
    assert err is None and not errors, (err, errors)
    assert mtls.node.alive()


def _login(mtls: MtlsNode, cn: str | None) -> str:
    """Log alice in over gRPC, presenting ``cn``'s certificate (or none). Done by hand: the
    SDK's static credentials open their Login channel without the client certificate."""
    private_key = chain = None
    if cn is not None:
        cert_file, key_file = mtls.client_files(cn)
        private_key, chain = key_file.read_bytes(), cert_file.read_bytes()
    credentials = grpc.ssl_channel_credentials(mtls.ca_file.read_bytes(), private_key, chain)
    with grpc.secure_channel(mtls.node.grpc_address, credentials) as channel:
        login = channel.unary_unary(
            "/Ydb.Auth.V1.AuthService/Login",
            request_serializer=ydb_auth_pb2.LoginRequest.SerializeToString,
            response_deserializer=ydb_auth_pb2.LoginResponse.FromString,
        )
        response = login(
            ydb_auth_pb2.LoginRequest(user="alice", password=PASSWORDS["alice"]),
            metadata=[("x-ydb-database", DATABASE)],
            timeout=10,
        )
    result = ydb_auth_pb2.LoginResult()
    response.operation.result.Unpack(result)
    return str(result.token)


def test_grpc_requires_a_client_certificate(mtls: MtlsNode) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        _login(mtls, None)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    token = _login(mtls, "alice")
    cert_file, key_file = mtls.client_files("alice")
    config = ydb.DriverConfig(
        endpoint=f"grpcs://{mtls.node.grpc_address}",
        database=DATABASE,
        root_certificates=mtls.ca_file.read_bytes(),
        private_key=key_file.read_bytes(),
        certificate_chain=cert_file.read_bytes(),
        credentials=ydb.AccessTokenCredentials(token),  # type: ignore[no-untyped-call]
        disable_discovery=True,
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=10, fail_fast=True)
        described = driver.topic_client.describe_topic(f"{DATABASE}/{ALLOWED}")
        assert len(described.partitions) == 1
    finally:
        driver.stop(timeout=10)
    assert mtls.node.alive()
