"""Hostile Kafka clients against a real node: memory stays bounded, others stay served."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer

from tests.integration.kafka_clients import confluent_produce
from tests.integration.node_process import NodeProcess, closed_by_node
from tests.integration.security_support import write_tls_files

_HUGE = 2**31 - 1


def _rss_mib(node: NodeProcess) -> float:
    assert node.process is not None
    status = Path(f"/proc/{node.process.pid}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def _fetch_v4(topic: str, correlation_id: int) -> bytes:
    """A Fetch v4 asking for everything from offset 0, at once."""
    name = topic.encode()
    header = struct.pack(">hhih", 1, 4, correlation_id, 6) + b"hostil"
    body = struct.pack(">iiiib", -1, 0, 1, _HUGE, 0)
    body += struct.pack(">ih", 1, len(name)) + name
    body += struct.pack(">i", 1) + struct.pack(">iqi", 0, 0, _HUGE)
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _consume(bootstrap: str, topic: str, count: int) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "legit",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
        return seen
    finally:
        consumer.close()


def test_pipelined_fetches_never_read_hold_bounded_memory(tmp_path: Path) -> None:
    # 48 MiB in one partition, a broker cap of 4 MiB per fetch response. Sixteen fetches
    # asking for 2 GiB each, pipelined by a client that never reads, used to make the node
    # read the whole partition once per request (16 x 48 MiB).
    with NodeProcess(tmp_path / "data", "--fetch-max-bytes", str(4 * 1024 * 1024)) as node:
        value = bytes(range(256)) * 3500  # 896 kB
        confluent_produce(
            node.bootstrap,
            "big",
            [(b"k", value)] * 48,
            **{"enable.idempotence": False, "linger.ms": 5},
        )
        before = _rss_mib(node)
        with socket.create_connection(("127.0.0.1", node.kafka_port)) as hostile:
            hostile.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            hostile.sendall(b"".join(_fetch_v4("big", i) for i in range(16)))
            peak = before
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                peak = max(peak, _rss_mib(node))
                time.sleep(0.1)
            # Others are served meanwhile: a consumer reads the partition from the start.
            assert _consume(node.bootstrap, "big", 10) == 10
            peak = max(peak, _rss_mib(node))
        assert peak - before < 200, f"RSS grew from {before:.0f} to {peak:.0f} MiB"
        assert node.alive()


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))


def _hold(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A connection the node keeps open (the node may still be counting a connection that
    was just closed, such as NodeProcess's readiness probe: then try again)."""
    for _ in range(20):
        sock = _connect(port, source)
        if not closed_by_node(sock, 0.3):
            return sock
        sock.close()
    raise AssertionError(f"no connection from {source} stays open")


def test_connection_limits_on_kafka_and_grpc_listeners(tmp_path: Path) -> None:
    limits = ("--max-connections", "5", "--max-connections-per-ip", "3")
    with NodeProcess(tmp_path / "data", *limits) as node:
        for port in (node.kafka_port, node.grpc_port):
            held = [_hold(port) for _ in range(3)]
            try:
                # A fourth from the same address is closed at once; another address may
                # still connect, until the listener's total is reached.
                with _connect(port) as extra:
                    assert closed_by_node(extra)
                held += [_hold(port, "127.0.0.2") for _ in range(2)]
                with _connect(port, "127.0.0.3") as extra:
                    assert closed_by_node(extra)
            finally:
                for sock in held:
                    sock.close()
        log = node.log()
        # One line per listener and limit (more within 10 s would be summed up, not logged).
        assert log.count("(max-connections-per-ip 3)") == 2
        assert log.count("(max-connections 5)") == 2
        # Once those connections are gone, legitimate clients are served on both ports.
        confluent_produce(node.bootstrap, "after-limits", [(b"k", b"v")])
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "vdl.cli",
                "topic",
                "list",
                "--endpoint",
                f"grpc://{node.grpc_address}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and "after-limits" in done.stdout, done.stderr
        assert node.alive()


def test_unfinished_tls_handshake_is_dropped_after_the_idle_timeout(tmp_path: Path) -> None:
    # A slowloris on the Kafka TLS port: TCP connected, not one TLS byte. As in Kafka, an
    # unfinished handshake counts as idle: it goes after connections.max.idle.ms.
    cert, key, ca = write_tls_files(tmp_path)
    tls = ("--kafka-tls-cert", str(cert), "--kafka-tls-key", str(key))
    with NodeProcess(tmp_path / "data", *tls, "--connections-max-idle-ms", "1000") as node:
        with _connect(node.kafka_port) as slow:
            assert closed_by_node(slow, 5)
        assert "TLS handshake with 127.0.0.1" in node.log()
        assert "not finished within 1 s" in node.log()
        confluent_produce(
            node.bootstrap,
            "after-slowloris",
            [(b"k", b"v")],
            **{"security.protocol": "SSL", "ssl.ca.location": str(ca)},
        )
