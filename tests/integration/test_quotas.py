"""Client-facing guarantees of the Kafka listener: byte-rate quotas per client id answered
with throttle_time_ms (seen through librdkafka's throttle callback), idle connections
closed after --connections-max-idle-ms, and TCP keepalive on accepted sockets."""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.metadata.api_versions import ApiVersionsRequest

from tests.integration.kafka_clients import confluent_create_topic
from tests.integration.node_process import NodeProcess

RATE = 20_000  # bytes per second, per client id and direction
PAYLOAD = 100_000


def _api_versions(sock: socket.socket, correlation_id: int) -> None:
    request = ApiVersionsRequest(version=0)
    request.with_header(correlation_id=correlation_id, client_id="idle-test")
    sock.sendall(bytes(request.encode(header=True, framed=True)))
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    assert len(sock.recv(size, socket.MSG_WAITALL)) == size


def _closed_by_peer(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_idle_connections_are_closed_and_busy_ones_kept(tmp_path: Path) -> None:
    with NodeProcess(tmp_path / "data", "--connections-max-idle-ms", "1000") as node:
        idle = socket.create_connection(("127.0.0.1", node.kafka_port))
        busy = socket.create_connection(("127.0.0.1", node.kafka_port))
        with idle, busy:
            started = time.monotonic()
            for i in range(8):  # 2.4 s of traffic, a request every 0.3 s
                _api_versions(busy, i)
                time.sleep(0.3)
            # Meanwhile the silent one went away after about a second.
            assert _closed_by_peer(idle, within=5)
            closed_after = time.monotonic() - started
            _api_versions(busy, 99)
            assert closed_after < 5
            # Once silent too, the busy one is closed as well.
            assert _closed_by_peer(busy, within=5)


def test_accepted_sockets_use_tcp_keepalive(tmp_path: Path) -> None:
    with (
        NodeProcess(tmp_path / "data") as node,
        socket.create_connection(("127.0.0.1", node.kafka_port)) as client,
    ):
        _api_versions(client, 1)
        # The broker's end of this connection: source port = the listener's port.
        out = subprocess.run(
            ["ss", "-tnoH", "state", "established", f"( sport = :{node.kafka_port} )"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        client_port = client.getsockname()[1]
        line = next(ln for ln in out.splitlines() if f":{client_port}" in ln)
        assert "timer:(keepalive," in line, line


def test_quotas_throttle_producers_and_consumers_per_client_id(tmp_path: Path) -> None:
    args = ("--producer-byte-rate", str(RATE), "--consumer-byte-rate", str(RATE))
    with NodeProcess(tmp_path / "data", *args) as node:
        confluent_create_topic(node.bootstrap, "quota", 1)
        throttles: list[tuple[str, int]] = []

        def on_throttle(event: object) -> None:
            throttles.append(("produce", int(event.throttle_time * 1000)))  # type: ignore[attr-defined]

        producer = Producer(
            {
                "bootstrap.servers": node.bootstrap,
                "client.id": "heavy-writer",
                "linger.ms": 20,
                "batch.size": 16384,
                "throttle_cb": on_throttle,
            }
        )
        started = time.monotonic()
        for i in range(PAYLOAD // 1000):
            producer.produce("quota", value=bytes([i % 256]) * 1000)
            producer.poll(0)
        assert producer.flush(60) == 0
        produce_s = time.monotonic() - started
        producer.poll(0.5)  # deliver the last throttle callbacks
        produced = [t for kind, t in throttles if kind == "produce"]
        assert produced and max(produced) > 0, throttles
        # 100 kB at 20 kB/s with a one-second burst: about four seconds, not instant.
        assert produce_s >= 2.5, produce_s

        def on_fetch_throttle(event: object) -> None:
            throttles.append(("fetch", int(event.throttle_time * 1000)))  # type: ignore[attr-defined]

        consumer = Consumer(
            {
                "bootstrap.servers": node.bootstrap,
                "client.id": "heavy-reader",
                "group.id": "quota-readers",
                "fetch.max.bytes": 16384,
                "message.max.bytes": 16384,
                "max.partition.fetch.bytes": 16384,
                "throttle_cb": on_fetch_throttle,
            }
        )
        try:
            consumer.assign([TopicPartition("quota", 0, 0)])
            started = time.monotonic()
            read = 0
            while read < PAYLOAD // 1000:
                assert time.monotonic() - started < 60
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    read += 1
            fetch_s = time.monotonic() - started
        finally:
            consumer.close()
        fetched = [t for kind, t in throttles if kind == "fetch"]
        assert fetched and max(fetched) > 0, throttles
        assert fetch_s >= 2.5, fetch_s
        print(
            f"\nquota {RATE} B/s: produced {PAYLOAD} B in {produce_s:.1f}s "
            f"(max throttle {max(produced)} ms), fetched in {fetch_s:.1f}s "
            f"(max throttle {max(fetched)} ms)"
        )
