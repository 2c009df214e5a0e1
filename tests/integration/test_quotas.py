"""Client-facing guarantees of the Kafka listener: byte-rate quotas per client id answered
with throttle_time_ms (seen through librdkafka's throttle callback; a fetch over quota gets
no records, as from Kafka), idle connections closed after --connections-max-idle-ms, and
TCP keepalive on accepted sockets with the configured timing."""

from __future__ import annotations

import re
import socket
import struct
import subprocess
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest

from tests.integration.kafka_clients import confluent_create_topic
from tests.integration.node_process import NodeProcess, closed_by_node
from vdl.log import batch_header

RATE = 20_000  # bytes per second, per client id and direction
PAYLOAD = 100_000


def _api_versions(sock: socket.socket, correlation_id: int) -> None:
    request = ApiVersionsRequest(version=0)
    request.with_header(correlation_id=correlation_id, client_id="idle-test")
    sock.sendall(bytes(request.encode(header=True, framed=True)))
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    assert len(sock.recv(size, socket.MSG_WAITALL)) == size


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
            assert closed_by_node(idle, 5)
            closed_after = time.monotonic() - started
            _api_versions(busy, 99)
            assert closed_after < 5
            # Once silent too, the busy one is closed as well.
            assert closed_by_node(busy, 5)


def test_accepted_sockets_use_the_configured_tcp_keepalive(tmp_path: Path) -> None:
    with (
        NodeProcess(tmp_path / "data", "--tcp-keepalive-idle-s", "3000") as node,
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
        # The first probe is due after the configured 50 minutes of silence (ss rounds
        # down), not the default minute nor the system's two hours.
        timer = re.search(r"timer:\(keepalive,(\d+)min", line)
        assert timer is not None, line
        assert 40 <= int(timer.group(1)) <= 50, line


def _value(i: int) -> bytes:
    return f"{i:06d}".encode() * (1000 // 6) + b"!" * (1000 % 6)


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
        produced = [_value(i) for i in range(PAYLOAD // 1000)]
        started = time.monotonic()
        for value in produced:
            producer.produce("quota", value=value)
            producer.poll(0)
        assert producer.flush(60) == 0
        produce_s = time.monotonic() - started
        producer.poll(0.5)  # deliver the last throttle callbacks
        produce_throttles = [t for kind, t in throttles if kind == "produce"]
        assert produce_throttles and max(produce_throttles) > 0, throttles
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
        consumed: list[bytes] = []
        try:
            consumer.assign([TopicPartition("quota", 0, 0)])
            started = time.monotonic()
            while len(consumed) < len(produced):
                assert time.monotonic() - started < 60, len(consumed)
                msg = consumer.poll(0.5)
                if msg is not None:
                    assert msg.error() is None, msg.error()
                    consumed.append(msg.value() or b"")
            fetch_s = time.monotonic() - started
            # Nothing more arrives: every message exactly once.
            msg = consumer.poll(1.0)
            assert msg is None or msg.error() is not None, msg.offset()
        finally:
            consumer.close()
        assert consumed == produced
        fetch_throttles = [t for kind, t in throttles if kind == "fetch"]
        assert fetch_throttles and max(fetch_throttles) > 0, throttles
        # Records sent never exceed the burst plus the rate over the time taken (the
        # batches' overhead only adds to what was charged), whatever the machine's speed.
        assert len(b"".join(consumed)) <= RATE * (fetch_s + 1), fetch_s
        print(
            f"\nquota {RATE} B/s: produced {PAYLOAD} B in {produce_s:.1f}s "
            f"(max throttle {max(produce_throttles)} ms), fetched in {fetch_s:.1f}s "
            f"(max throttle {max(fetch_throttles)} ms)"
        )


def _fetch(sock: socket.socket, correlation_id: int, offset: int) -> FetchResponse:
    topic = FetchRequest.FetchTopic(
        topic="quota",
        partitions=[
            FetchRequest.FetchTopic.FetchPartition(
                partition=0, fetch_offset=offset, partition_max_bytes=15_000
            )
        ],
    )
    request = FetchRequest(version=5, max_wait_ms=0, min_bytes=0, max_bytes=15_000, topics=[topic])
    request.with_header(correlation_id=correlation_id, client_id="raw-reader")
    sock.sendall(bytes(request.encode(header=True, framed=True)))
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    payload = sock.recv(size, socket.MSG_WAITALL)
    assert struct.unpack(">i", payload[:4])[0] == correlation_id
    return FetchResponse.decode(payload[4:], version=5)


def _next_offset(records: bytes) -> int:
    """The offset after the last of the concatenated batches (base + lastOffsetDelta + 1)."""
    pos, after = 0, -1
    while pos + batch_header.HEADER_SIZE <= len(records):
        after = batch_header.offset_range(records, pos)[1] + 1
        pos += batch_header.batch_size(records, pos)
    return after


def test_fetch_over_quota_is_answered_empty_with_a_throttle(tmp_path: Path) -> None:
    """A client over its consume quota gets the partition (error NONE, high watermark) but
    no records, and throttle_time_ms; once the throttle has passed, the same records."""
    with NodeProcess(tmp_path / "data", "--consumer-byte-rate", str(RATE)) as node:
        confluent_create_topic(node.bootstrap, "quota", 1)
        producer = Producer(
            {"bootstrap.servers": node.bootstrap, "linger.ms": 50, "batch.size": 4096}
        )
        for i in range(60):
            producer.produce("quota", value=_value(i))
        assert producer.flush(30) == 0
        with socket.create_connection(("127.0.0.1", node.kafka_port)) as sock:
            sock.settimeout(30)
            first = _fetch(sock, 1, 0)
            part = first.responses[0].partitions[0]
            assert first.throttle_time_ms == 0
            assert part.error_code == 0 and part.high_watermark == 60
            records = bytes(part.records or b"")
            assert 10_000 < len(records) <= 15_000  # most of the 20 kB burst, whole batches
            offset = _next_offset(records)
            # The bucket holds less than the next response: refused, nothing charged.
            refused = _fetch(sock, 2, offset)
            part = refused.responses[0].partitions[0]
            assert refused.throttle_time_ms > 0
            assert part.error_code == 0 and part.high_watermark == 60
            assert part.log_start_offset == 0
            assert not part.records
            # Sent at once, ignoring the hint: the broker holds the request until the
            # throttle has passed, and then the bucket can pay for the same records.
            admitted = _fetch(sock, 3, offset)
            part = admitted.responses[0].partitions[0]
            assert admitted.throttle_time_ms == 0
            assert part.records and _next_offset(bytes(part.records)) > offset
