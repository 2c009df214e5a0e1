"""The admin listener of a real node process: metrics a scraper parses, health, the JSON
views, its defences against bad input and strangers, and a start on a taken port."""

from __future__ import annotations

import json
import socket
import ssl
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.admin_support import get, get_json, scrape, total, value, wait_for
from tests.integration.node_process import NodeProcess, free_port, refused_start
from tests.integration.security_support import PASSWORDS, start_secure_node


def _produce(bootstrap: str, topic: str, count: int, size: int = 100) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"v" * size, key=str(i).encode())
    assert producer.flush(30) == 0


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def test_metrics_and_views_follow_a_real_producer_and_consumer_group(node: NodeProcess) -> None:
    base = node.admin_url
    assert get(base + "/v1/status/live")[0] == 200
    status, ready = get_json(base + "/v1/status/ready")
    assert (status, ready["ready"]) == (200, True), ready
    before = scrape(base)

    _produce(node.bootstrap, "admin-t", 200)
    _commit(node.bootstrap, "admin-g", "admin-t", 60)

    after = scrape(base)
    labels = {"topic": "admin-t", "partition": "0"}
    assert value(after, "vdl_partition_high_watermark", **labels) == 200
    assert value(after, "vdl_partition_log_start_offset", **labels) == 0
    assert (value(after, "vdl_partition_size_bytes", **labels) or 0) > 200 * 100
    assert value(after, "vdl_partition_segments", **labels) == 1
    group = {"group": "admin-g", **labels}
    assert value(after, "vdl_kafka_consumer_group_committed_offset", **group) == 60
    assert value(after, "vdl_kafka_consumer_group_lag", **group) == 140
    assert value(after, "vdl_node_ready") == 1
    assert value(after, "vdl_partitions_led") == 1
    assert value(after, "vdl_under_replicated_partitions") == 0
    # Produce requests were decoded and their batches synced to disk.
    decoded = "vdl_kafka_produce_decode_seconds_count"
    assert total(after, decoded) > total(before, decoded)
    produce = {"api": "Produce"}
    assert total(after, "vdl_kafka_requests_total", **produce) > total(
        before, "vdl_kafka_requests_total", **produce
    )
    moved = total(after, "vdl_kafka_bytes_in_total") - total(before, "vdl_kafka_bytes_in_total")
    assert moved > 200 * 100
    appended = "vdl_log_appended_records_total"
    assert total(after, appended) - total(before, appended) == 200
    synced = "vdl_storage_fdatasync_seconds_count"
    assert total(after, synced) > total(before, synced)
    # The event loop's lag is sampled every 0.1 s.
    wait_for(lambda: total(scrape(base), "vdl_event_loop_lag_seconds_count") > 0)
    assert (value(after, "vdl_process_resident_memory_bytes") or 0) > 0

    _, partitions = get_json(base + "/v1/partitions")
    row = next(p for p in partitions["partitions"] if p["topic"] == "admin-t")
    assert (row["leader"], row["high_watermark"], row["log_start"]) == (1, 200, 0)
    _, groups = get_json(base + "/v1/groups")
    offsets = next(g for g in groups["groups"] if g["group"] == "admin-g")["offsets"]
    assert offsets == [
        {"topic": "admin-t", "partition": 0, "committed": 60, "end": 200, "lag": 140}
    ]
    _, cluster = get_json(base + "/v1/cluster")
    assert cluster["controller_id"] == 1
    assert cluster["nodes"] == [
        {
            "node_id": 1,
            "kafka": node.bootstrap,
            "grpc": node.grpc_address,
            "dc": "",
            "state": "self",
        }
    ]
    assert get(base + "/no/such/path")[0] == 404


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_bad_http_gets_a_clear_error_and_everyone_else_is_served(node: NodeProcess) -> None:
    port = node.admin_port
    assert _raw(port, b"\x16\x03\x01garbage that is no HTTP\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert _raw(
        port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
    ).startswith(b"HTTP/1.1 405")
    huge = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    assert _raw(port, huge).split(b"\r\n", 1)[0] in (
        b"HTTP/1.1 431 Request Header Fields Too Large",
        b"HTTP/1.1 400 Bad Request",
    )
    # A client that connects and says nothing holds no more than its own connection.
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        status, _, body = get(node.admin_url + "/metrics")
        assert status == 200 and b"vdl_node_ready" in body
    # Keep-alive: two requests on one connection.
    two = _raw(
        port,
        b"GET /v1/status/live HTTP/1.1\r\nHost: x\r\n\r\n" * 1
        + b"GET /v1/status/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    assert two.count(b"HTTP/1.1 200 OK") == 2
    # The Kafka port serves on.
    _produce(node.bootstrap, "after-bad-http", 3)
    assert node.alive()
    assert node.log().count("bad request from") >= 2


def test_a_taken_admin_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = refused_start(
            tmp_path / "data",
            "--kafka-listen",
            f"127.0.0.1:{free_port()}",
            "--grpc-listen",
            f"127.0.0.1:{free_port()}",
            "--admin-listen",
            f"127.0.0.1:{port}",
        )[-1]
    assert line.startswith(f"vdl-node: cannot listen for the admin HTTP API on 127.0.0.1:{port}")


def test_with_users_the_admin_api_wants_a_user_allowed_to_describe_the_cluster(
    tmp_path: Path,
) -> None:
    secure = start_secure_node(tmp_path)
    try:
        base = f"https://127.0.0.1:{secure.node.admin_port}"
        tls = ssl.create_default_context(cafile=str(secure.ca_file))
        # Liveness needs no secret; everything else does.
        assert get(base + "/v1/status/live", context=tls)[0] == 200
        status, headers, _ = get(base + "/metrics", context=tls)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert get(base + "/v1/cluster", auth=("admin", "wrong"), context=tls)[0] == 401
        # bob is a user without ACLs: known, but not allowed to describe the cluster.
        assert get(base + "/metrics", auth=("bob", PASSWORDS["bob"]), context=tls)[0] == 403
        # Plain HTTP to the TLS port gets nowhere, and the port serves on.
        try:
            answer = _raw(secure.node.admin_port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        except OSError:
            answer = b""
        assert b"vdl_" not in answer
        assert "TLS handshake from" in secure.node.log()
        samples = scrape(base, auth=("admin", PASSWORDS["admin"]), context=tls)
        assert value(samples, "vdl_node_ready") == 1
        assert "failed for user 'admin'" in secure.node.log()
    finally:
        secure.node.stop()


def test_ready_is_503_until_the_metadata_group_has_a_leader(tmp_path: Path) -> None:
    raft = {i: free_port() for i in (1, 2, 3)}
    peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in raft.items())
    nodes = {
        i: NodeProcess(
            tmp_path / f"node{i}", "--node-id", str(i), "--peers", peers, "--raft-tick-ms", "50"
        )
        for i in raft
    }
    try:
        first = nodes[1].start()
        status, body = get_json(first.admin_url + "/v1/status/ready")
        assert status == 503 and "no leader" in body["reason"], body
        for i in (2, 3):
            nodes[i].start()
        wait_for(lambda: get(first.admin_url + "/v1/status/ready")[0] == 200)
    finally:
        for n in nodes.values():
            n.kill()


def test_log_format_json_writes_one_object_a_line(tmp_path: Path) -> None:
    with NodeProcess(tmp_path / "data", "--log-format", "json") as node:
        assert get(node.admin_url + "/v1/status/live")[0] == 200
    lines = [line for line in node.log().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]
    assert {"time", "level", "logger", "message"} <= records[0].keys()
    assert any(r["logger"] == "vdl.node" and r["message"] == "stopped" for r in records)
