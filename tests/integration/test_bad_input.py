"""Bad input closes only the offending connection, with a log line; everyone else is served."""

from __future__ import annotations

import os
import socket
import struct

import pytest
from kafka import KafkaProducer
from kafka.protocol.metadata import ApiVersionsResponse

from tests.integration.node_process import NodeProcess


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
        rng = __import__("random").Random(seed)
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
