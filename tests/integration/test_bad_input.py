"""Bad input closes only the offending connection, with a log line; everyone else is served."""

from __future__ import annotations

import os
import random
import socket
import struct
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest

from tests.integration.node_process import NodeProcess
from tests.unit.kafka.kafka_oracle import kp_frame
from tests.unit.kafka.test_kafka_fuzz import mutate, seeds


def _header(api_key: int, version: int, correlation_id: int = 7, client: bytes = b"bad") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _closed_by_server(sock: socket.socket, timeout: float = 10) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _second_client_works(node: NodeProcess, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=node.bootstrap, acks="all")
    try:
        metadata = producer.send(topic, b"still serving").get(timeout=30)
        assert metadata.offset >= 0
    finally:
        producer.close()


BAD_REQUESTS = {
    # A valid size, then bytes that are no request header at all.
    "random-bytes": _framed(b"\x00"),
    "oversized-frame": struct.pack(">i", 512 * 1024 * 1024) + os.urandom(1024),
    "negative-size": struct.pack(">i", -5) + b"xxxx",
    "unknown-api-key": _framed(_header(9999, 0) + b"\x00" * 16),
    "unserved-api": _framed(_header(57, 0) + b"\x00" * 16),
    "truncated-request": _framed(_header(3, 8) + b"\x00\x00\x00\x05\x00"),
    "version-too-high": _framed(_header(3, 50) + b"\xff\xff\xff\xff"),
    "produce-v0": _framed(_header(0, 0) + b"\x00" * 10),
}


@pytest.mark.parametrize("name", sorted(BAD_REQUESTS))
def test_bad_request_closes_only_that_connection(node: NodeProcess, name: str) -> None:
    with socket.create_connection(("127.0.0.1", node.kafka_port)) as bad:
        bad.sendall(BAD_REQUESTS[name])
        assert _closed_by_server(bad), f"{name}: connection left open"
    assert node.alive()
    _second_client_works(node, f"after-{name}")
    assert "closing connection from" in node.log()


def test_random_garbage_streams(node: NodeProcess) -> None:
    for seed in range(5):
        rng = random.Random(seed)
        with socket.create_connection(("127.0.0.1", node.kafka_port)) as bad:
            garbage = bytes(rng.getrandbits(8) for _ in range(4096))
            # Keep the size prefix small so the node parses a frame instead of waiting.
            bad.sendall(struct.pack(">i", 64) + garbage)
            assert _closed_by_server(bad)
    assert node.alive()
    _second_client_works(node, "after-garbage")


def test_unknown_api_versions_version_gets_fallback(node: NodeProcess) -> None:
    with socket.create_connection(("127.0.0.1", node.kafka_port)) as sock:
        # Header v2 (flexible): an empty tagged-field section follows the client id.
        sock.sendall(_framed(_header(18, 99, correlation_id=42) + b"\x00"))
        sock.settimeout(10)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        payload = sock.recv(size, socket.MSG_WAITALL)
    assert struct.unpack(">i", payload[:4])[0] == 42
    response = ApiVersionsResponse.decode(payload[4:], version=0)
    assert response.error_code == 35
    assert any(k.api_key == 18 for k in response.api_keys)
    assert node.alive()


def test_oversized_batch_is_refused_with_message_too_large(node: NodeProcess) -> None:
    from confluent_kafka import KafkaError, Producer

    errors: list[KafkaError | None] = []
    producer = Producer(
        {
            "bootstrap.servers": node.bootstrap,
            "message.max.bytes": 8 * 1024 * 1024,
            "acks": "all",
        }
    )
    producer.produce(
        "big", value=b"x" * (3 * 1024 * 1024), on_delivery=lambda err, msg: errors.append(err)
    )
    producer.flush(30)
    assert errors and errors[0] is not None
    assert errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    _second_client_works(node, "big")


def _fuzz_corpus() -> list[bytes]:
    topics = [MetadataRequest.MetadataRequestTopic(name="t")]
    return [
        *seeds(),  # a Produce v8 and a Fetch v11 for topic "t"
        bytes(kp_frame(MetadataRequest(version=4, topics=topics, allow_auto_topic_creation=False))),
        bytes(
            kp_frame(
                ApiVersionsRequest(version=3, client_software_name="f", client_software_version="1")
            )
        ),
    ]


def _fuzz(node: NodeProcess, seed: int, count: int) -> None:
    """Send ``count`` random or mutated frames, one at a time: each gets an answer (the
    connection goes on) or closes the connection (a new one is opened)."""
    rng = random.Random(seed)
    corpus = _fuzz_corpus()
    sock: socket.socket | None = None
    for _ in range(count):
        if sock is None:
            sock = socket.create_connection(("127.0.0.1", node.kafka_port), timeout=10)
            # Closing with RST leaves no TIME_WAIT behind: a million connections fit.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.settimeout(0.05)
        if rng.random() < 0.15:
            payload = rng.randbytes(rng.randint(0, 64))
        else:
            payload = mutate(rng, rng.choice(corpus))
        size = len(payload) if rng.random() < 0.95 else rng.choice([-1, 0, 1, 1 << 30])
        try:
            sock.sendall(struct.pack(">i", size) + payload)
            if size != len(payload):
                sock.shutdown(socket.SHUT_WR)  # a frame that never completes: say so
            answered = sock.recv(65536)
        except TimeoutError:
            answered = b""  # a long poll, or a partial frame: move on
        except OSError:
            answered = b""
        if not answered:
            sock.close()
            sock = None
    if sock is not None:
        sock.close()


def _fuzz_node(tmp_path: Path) -> NodeProcess:
    # No auto-creation: mutated topic names would otherwise become topics by the thousand.
    node = NodeProcess(tmp_path / "data", "--auto-create-topics", "false").start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
        try:
            admin.create_topics([NewTopic("t", num_partitions=1, replication_factor=1)])
        finally:
            admin.close()
        _second_client_works(node, "t")
    except BaseException:
        node.kill()
        raise
    return node


@pytest.mark.parametrize("seed", range(2))
def test_kafka_port_fuzz(tmp_path: Path, seed: int) -> None:
    node = _fuzz_node(tmp_path)
    try:
        _fuzz(node, seed, 1500)
        assert node.alive()
        _second_client_works(node, "t")
    finally:
        node.stop(30)


@pytest.mark.slow
def test_kafka_port_fuzz_long(tmp_path: Path) -> None:
    node = _fuzz_node(tmp_path)
    try:
        before = node.rss() / 2**20
        for seed in range(100):
            _fuzz(node, 1000 + seed, 10_000)  # 1,000,000 inputs in all
            assert node.alive(), f"node exited during seed {1000 + seed}"
        assert node.rss() / 2**20 - before < 500
        _second_client_works(node, "t")
    finally:
        node.stop(60)
