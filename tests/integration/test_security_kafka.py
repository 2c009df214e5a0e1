"""The Kafka half of the security matrix: real clients over TLS with SASL, against ACLs."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]
from kafka import KafkaConsumer, KafkaProducer
from kafka import errors as kerrors

from tests.integration.node_process import free_port, refused_start
from tests.integration.security_support import (
    GROUP_A,
    MECHANISMS,
    PASSWORDS,
    TOPIC_A,
    TOPIC_B,
    SecureNode,
    assert_no_passwords,
    start_secure_node,
    write_tls_files,
)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureNode]:
    base = tmp_path_factory.mktemp("kafka-sec")
    node = start_secure_node(
        base, "--login-max-failures", "1000", "--group-initial-rebalance-delay-ms", "0"
    )
    try:
        yield node
    finally:
        node.node.stop(30)


def _confluent(node: SecureNode, mechanism: str | None, user: str, password: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": node.node.bootstrap,
        "ssl.ca.location": str(node.ca_file),
        "security.protocol": "SSL",
        "socket.timeout.ms": 5000,
    }
    if mechanism is not None:
        config.update(
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanisms": mechanism,
                "sasl.username": user,
                "sasl.password": password,
            }
        )
    return config


def _kp(node: SecureNode, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": node.node.bootstrap,
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(node.ca_file),
        "ssl_check_hostname": False,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
        "request_timeout_ms": 10000,
    }


def _confluent_produce(config: dict[str, Any], topic: str, value: bytes) -> Any:
    """The delivery error (None on success) and any client-level error."""
    outcome: list[Any] = []
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append, "message.timeout.ms": 4000})
    producer.produce(topic, value=value, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(10)
    return (outcome[0] if outcome else None), errors


def _confluent_consume_until(config: dict[str, Any], topic: str, value: bytes) -> None:
    consumer = Consumer(
        {
            **config,
            "group.id": GROUP_A,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            if msg.value() == value:
                consumer.commit(asynchronous=False)
                return
        pytest.fail(f"{value!r} was not consumed")
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_sasl_ssl_served_with_acl(secure: SecureNode, mechanism: str) -> None:
    config = _confluent(secure, mechanism, "alice", PASSWORDS["alice"])
    value = f"confluent-{mechanism}".encode()
    err, errors = _confluent_produce(config, TOPIC_A, value)
    assert err is None and not errors, (err, errors)
    _confluent_consume_until(config, TOPIC_A, value)
    # Metadata lists only what alice may describe.
    topics = AdminClient(config).list_topics(timeout=10).topics
    assert TOPIC_A in topics and TOPIC_B not in topics


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_sasl_ssl_served_with_acl(secure: SecureNode, mechanism: str) -> None:
    config = _kp(secure, mechanism, "alice", PASSWORDS["alice"])
    producer = KafkaProducer(**config)
    try:
        value = f"kafka-python-{mechanism}".encode()
        meta = producer.send(TOPIC_A, value).get(timeout=20)
        assert meta.offset >= 0
    finally:
        producer.close(5)
    consumer = KafkaConsumer(
        TOPIC_A,
        group_id=GROUP_A,
        auto_offset_reset="earliest",
        consumer_timeout_ms=8000,
        enable_auto_commit=False,
        **config,
    )
    try:
        values = []
        for message in consumer:
            values.append(message.value)
            if message.value == value:
                consumer.commit()
                break
    finally:
        consumer.close()
    assert value in values


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_is_refused(secure: SecureNode, mechanism: str) -> None:
    # kafka-python retries a failed bootstrap until max_block_ms, then gives up.
    with pytest.raises(kerrors.KafkaError):
        KafkaProducer(
            **_kp(secure, mechanism, "alice", "not-the-password"),
            bootstrap_timeout_ms=3000,
            reconnect_backoff_max_ms=500,
        )
    err, errors = _confluent_produce(
        _confluent(secure, mechanism, "alice", "not-the-password"), TOPIC_A, b"x"
    )
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert err is not None
    assert "authentication failed" in secure.node.log()


def test_unknown_user_is_refused(secure: SecureNode) -> None:
    _, errors = _confluent_produce(
        _confluent(secure, "SCRAM-SHA-256", "mallory", "whatever"), TOPIC_A, b"x"
    )
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_no_credentials_are_refused(secure: SecureNode) -> None:
    # TLS but no SASL: the first request after ApiVersions closes the connection.
    err, _ = _confluent_produce(_confluent(secure, None, "", ""), TOPIC_A, b"x")
    assert err is not None and err.code() == KafkaError._MSG_TIMED_OUT, err
    assert "before SASL authentication" in secure.node.log()
    assert secure.node.alive()


def test_valid_user_without_acl_is_denied(secure: SecureNode) -> None:
    config = _kp(secure, "SCRAM-SHA-512", "bob", PASSWORDS["bob"])
    producer = KafkaProducer(**config, max_block_ms=8000)
    try:
        with pytest.raises(kerrors.TopicAuthorizationFailedError):
            producer.send(TOPIC_A, b"denied").get(timeout=20)
    finally:
        producer.close(5)
    err, _ = _confluent_produce(_confluent(secure, "PLAIN", "bob", PASSWORDS["bob"]), TOPIC_A, b"x")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def test_alice_cannot_touch_topic_b(secure: SecureNode) -> None:
    config = _kp(secure, "SCRAM-SHA-256", "alice", PASSWORDS["alice"])
    producer = KafkaProducer(**config, max_block_ms=8000)
    try:
        with pytest.raises(kerrors.TopicAuthorizationFailedError):
            producer.send(TOPIC_B, b"nope").get(timeout=20)
    finally:
        producer.close(5)
    consumer = Consumer(
        {
            **_confluent(secure, "SCRAM-SHA-256", "alice", PASSWORDS["alice"]),
            "group.id": GROUP_A,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([TOPIC_B])
        seen: list[int] = []
        deadline = time.monotonic() + 15
        while not seen and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            error = msg.error() if msg is not None else None
            if error is not None:
                seen.append(error.code())
            elif msg is not None:
                pytest.fail("alice read a message from topic B")
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in seen, seen
    finally:
        consumer.close()
    admin = AdminClient(_confluent(secure, "PLAIN", "alice", PASSWORDS["alice"]))
    described = admin.list_topics(topic=TOPIC_B, timeout=10).topics[TOPIC_B]
    assert described.error is not None
    assert described.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_create_partitions_needs_alter_on_the_topic(secure: SecureNode) -> None:
    # Alice may read and write topic A, which is not ALTER (Kafka's rule for
    # CreatePartitions); a superuser may (validate_only: the topic stays as it is).
    alice = AdminClient(_confluent(secure, "PLAIN", "alice", PASSWORDS["alice"]))
    denied = alice.create_partitions([NewPartitions(TOPIC_A, 2)])[TOPIC_A]
    with pytest.raises(KafkaException) as failure:
        denied.result(timeout=30)
    assert failure.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin = AdminClient(_confluent(secure, "PLAIN", "admin", PASSWORDS["admin"]))
    admin.create_partitions([NewPartitions(TOPIC_A, 2)], validate_only=True)[TOPIC_A].result(30)
    assert len(admin.list_topics(TOPIC_A, timeout=10).topics[TOPIC_A].partitions) == 1


def test_plaintext_client_on_tls_port(secure: SecureNode) -> None:
    # An ApiVersions v0 request in the clear: the TLS handshake fails and the socket closes.
    request = struct.pack(">hhih", 18, 0, 1, 0)
    with socket.create_connection(("127.0.0.1", secure.node.kafka_port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        data = sock.recv(4096)
        assert not data.startswith(struct.pack(">i", 1))
        try:
            while sock.recv(4096):
                pass
        except ConnectionResetError:
            pass
    assert secure.node.alive()
    # And the node still serves TLS clients.
    err, errors = _confluent_produce(
        _confluent(secure, "PLAIN", "alice", PASSWORDS["alice"]), TOPIC_A, b"after"
    )
    assert err is None, (err, errors)


def test_bad_certificate_files_stop_the_node(tmp_path: Path) -> None:
    cert, _, _ = write_tls_files(tmp_path)
    other_key = tmp_path / "other.key"
    trustme.CA().issue_cert("x").private_key_pem.write_to_path(str(other_key))
    for key in (other_key, tmp_path / "missing.key"):
        lines = refused_start(
            tmp_path / "data",
            "--kafka-listen",
            f"127.0.0.1:{free_port()}",
            "--grpc-listen",
            f"127.0.0.1:{free_port()}",
            "--kafka-tls-cert",
            str(cert),
            "--kafka-tls-key",
            str(key),
        )
        assert len(lines) == 1 and ("does not match" in lines[0] or "does not exist" in lines[0])


def test_passwords_never_stored_or_logged(secure: SecureNode, tmp_path: Path) -> None:
    assert_no_passwords(secure.node.data_dir, secure.node.log_path, secure.users_file)


def test_init_producer_id_needs_idempotent_write_or_some_topic_write(secure: SecureNode) -> None:
    # bob may describe topic sec-c (so Metadata succeeds) but write nothing: as in Kafka
    # (KIP-679), no producer id for him, and the client says why.
    for args in (
        ["topic", "create", "sec-idem"],
        ["acl", "add", "--principal", "bob", "--topic", "sec-idem", "--operation", "describe"],
    ):
        done = secure.vdl(*args)
        assert done.returncode == 0, done.stderr
    config = _kp(secure, "PLAIN", "bob", PASSWORDS["bob"])
    producer = KafkaProducer(**config, enable_idempotence=True, max_block_ms=8000)
    try:
        with pytest.raises(kerrors.KafkaError) as refused:
            producer.send("sec-idem", b"x").get(timeout=20)
        assert "ClusterAuthorizationFailed" in str(refused.value), refused.value
    finally:
        producer.close(5)
    # IdempotentWrite on the cluster is enough for the id; the write itself is still denied.
    done = secure.vdl(
        "acl", "add", "--principal", "bob", "--cluster", "--operation", "idempotent_write"
    )
    assert done.returncode == 0, done.stderr
    producer = KafkaProducer(**config, enable_idempotence=True, max_block_ms=8000)
    try:
        with pytest.raises(kerrors.TopicAuthorizationFailedError):
            producer.send("sec-idem", b"x").get(timeout=20)
    finally:
        producer.close(5)
    # alice, allowed Write on sec-a, gets her id and is served.
    producer = KafkaProducer(
        **_kp(secure, "PLAIN", "alice", PASSWORDS["alice"]), enable_idempotence=True
    )
    try:
        assert producer.send(TOPIC_A, b"idempotent").get(timeout=20).offset >= 0
    finally:
        producer.close(5)


def test_failing_client_does_not_lock_out_its_address(tmp_path: Path) -> None:
    # One client retrying a wrong password from 127.0.0.1 (librdkafka reconnects and tries
    # again) slows only itself: everyone else on that address, and the same user with the
    # right password, still log in, over Kafka and over YDB Login.
    secure = start_secure_node(tmp_path, "--login-max-failures", "3")
    try:
        failing = Producer(
            {
                **_confluent(secure, "SCRAM-SHA-256", "bob", "not-the-password"),
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200,
                "error_cb": lambda err: None,
            }
        )
        try:
            deadline = time.monotonic() + 60
            while secure.node.log().count("failed for user 'bob'") < 5:
                assert time.monotonic() < deadline, "the wrong password was not retried"
                failing.poll(0.2)
            assert "answered after" in secure.node.log()
            # The superuser (YDB Login) and bob himself, with the right password.
            done = secure.vdl(
                "acl", "add", "--principal", "bob", "--topic", TOPIC_A, "--operation", "write"
            )
            assert done.returncode == 0, done.stderr
            for user in ("bob", "alice"):
                err, errors = _confluent_produce(
                    _confluent(secure, "SCRAM-SHA-256", user, PASSWORDS[user]), TOPIC_A, b"ok"
                )
                assert err is None, (user, err, errors)
        finally:
            failing.flush(0)
        assert "too many failed logins" not in secure.node.log()
    finally:
        secure.node.stop(30)


def test_large_frame_before_sasl_closes_the_connection(secure: SecureNode) -> None:
    # Kafka's sasl.server.max.receive.size (512 KiB): before authentication a client may
    # not announce a frame anywhere near --max-request-bytes.
    context = ssl.create_default_context(cafile=str(secure.ca_file))
    raw = socket.create_connection(("127.0.0.1", secure.node.kafka_port), timeout=10)
    with context.wrap_socket(raw, server_hostname="localhost") as sock:
        sock.sendall(struct.pack(">i", 600 * 1024) + b"\0" * 4096)
        try:
            assert sock.recv(4096) == b""  # closed, nothing answered
        except ConnectionResetError:
            pass
    line = "frame size 614400 outside [0, 524288] before SASL authentication"
    assert secure.node.log().count(line) == 1
    # Once authenticated, larger requests are fine (up to --max-request-bytes).
    value = b"v" * (700 * 1024)
    err, errors = _confluent_produce(
        _confluent(secure, "SCRAM-SHA-512", "alice", PASSWORDS["alice"]), TOPIC_A, value
    )
    assert err is None, (err, errors)
