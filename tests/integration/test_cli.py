"""The ``vdl`` command line end to end against a real node, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.integration.node_process import NodeProcess, free_port


def vdl(
    *args: str, endpoint: str | None = None, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    env.pop("VDL_ENDPOINT", None)
    if endpoint is not None:
        env["VDL_ENDPOINT"] = endpoint
    return subprocess.run(
        [sys.executable, "-m", "vdl.cli", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=60,
    )


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def test_create_produce_consume_status(node: NodeProcess, tmp_path: Path) -> None:
    endpoint = f"grpc://{node.grpc_address}"
    ok(vdl("topic", "create", "lines", "--partitions", "2", "--consumer", "cli", endpoint=endpoint))
    assert ok(vdl("topic", "list", endpoint=endpoint)).split() == ["lines"]

    lines = [f"line {i} " + "x" * (i % 50) for i in range(10_000)]
    produced = vdl("produce", "lines", endpoint=endpoint, stdin="\n".join(lines).encode() + b"\n")
    ok(produced)
    assert b"produced 10000 messages" in produced.stderr and b"msg/s" in produced.stderr

    # Options after the subcommand work as well as VDL_ENDPOINT.
    consumed = vdl(
        "consume",
        "lines",
        "--consumer",
        "cli",
        "--from",
        "earliest",
        "--count",
        "10000",
        "--endpoint",
        endpoint,
    )
    assert ok(consumed).splitlines() == lines
    assert b"consumed 10000 messages" in consumed.stderr

    described = ok(vdl("topic", "describe", "lines", endpoint=endpoint))
    assert "consumers:  cli" in described and "10000" in described

    status = ok(vdl("cluster", "status", endpoint=endpoint))
    assert f"127.0.0.1:{node.grpc_port}" in status
    assert "1 topics, 2 partitions" in status
    consumer_rows = status.split("CONSUMERS")[1].splitlines()[2:4]
    assert all(row.split()[-1] == "0" for row in consumer_rows)  # no lag: all committed
    assert "add --admin http://HOST:9644" in status

    # A file, a second producer, and consuming from the committed offset.
    source = tmp_path / "more.txt"
    source.write_text("a\nb\nc")
    ok(vdl("produce", "lines", "--file", str(source), "--quiet", endpoint=endpoint))
    rest = ok(vdl("consume", "lines", "--consumer", "cli", "--count", "3", endpoint=endpoint))
    assert sorted(rest.split()) == ["a", "b", "c"]

    ok(vdl("topic", "alter", "lines", "--add-consumer", "audit", endpoint=endpoint))
    latest = vdl(
        "consume",
        "lines",
        "--consumer",
        "audit",
        "--from",
        "latest",
        "--idle-timeout",
        "0.5",
        endpoint=endpoint,
    )
    assert ok(latest) == ""
    ok(vdl("topic", "drop", "lines", endpoint=endpoint))
    assert ok(vdl("topic", "list", endpoint=endpoint)) == ""


def test_errors_are_clear_and_exit_non_zero(node: NodeProcess) -> None:
    endpoint = f"grpc://{node.grpc_address}"
    unreachable = vdl("topic", "list", endpoint=f"grpc://127.0.0.1:{free_port()}")
    assert unreachable.returncode == 3
    assert b"cannot reach" in unreachable.stderr and b"refused" in unreachable.stderr

    bad_endpoint = vdl("topic", "list", "--endpoint", "http://x:1")
    assert bad_endpoint.returncode == 2 and b"grpc:// or grpcs://" in bad_endpoint.stderr

    missing = vdl("topic", "describe", "nope", endpoint=endpoint)
    assert missing.returncode == 1 and b"SCHEME_ERROR" in missing.stderr

    no_topic = vdl("consume", "nope", "--from", "earliest", endpoint=endpoint)
    assert no_topic.returncode == 1 and b"SCHEME_ERROR" in no_topic.stderr

    nothing_committed = vdl("consume", "nope", "--from", "committed", endpoint=endpoint)
    assert nothing_committed.returncode == 2
    assert b"--from committed needs --consumer" in nothing_committed.stderr

    bad_from = vdl("consume", "t", "--consumer", "c", "--from", "soon", endpoint=endpoint)
    assert bad_from.returncode == 2 and b"--from must be" in bad_from.stderr

    no_action = vdl("topic")
    assert no_action.returncode == 2

    # As YDB: creating a topic that exists succeeds and leaves the topic as it was.
    ok(vdl("topic", "create", "dup", "--partitions", "2", endpoint=endpoint))
    ok(vdl("topic", "create", "dup", "--partitions", "5", endpoint=endpoint))
    described = ok(vdl("topic", "describe", "dup", endpoint=endpoint)).splitlines()
    assert [row.split()[0] for row in described if row[:1].isdigit()] == ["0", "1"]


def test_consume_without_a_consumer(node: NodeProcess) -> None:
    """As a new user tries it (and as kcat -C or rpk topic consume read): no consumer."""
    endpoint = f"grpc://{node.grpc_address}"
    ok(vdl("topic", "create", "t", "--partitions", "3", endpoint=endpoint))
    lines = [f"line {i}" for i in range(5)]
    ok(vdl("produce", "t", endpoint=endpoint, stdin="\n".join(lines).encode() + b"\n"))
    consumed = vdl("consume", "t", "--from", "earliest", "--count", "5", endpoint=endpoint)
    assert sorted(ok(consumed).splitlines()) == lines
    # Nothing was committed (there is no consumer to commit as): a second run reads the
    # same five, and the default start without --consumer is the earliest offset.
    again = vdl("consume", "t", "--count", "5", endpoint=endpoint)
    assert sorted(ok(again).splitlines()) == lines


def test_cluster_status_and_groups_through_the_admin_api(node: NodeProcess) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
    for i in range(25):
        producer.produce("cli-lag", value=b"v", key=str(i).encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": node.bootstrap, "group.id": "cli-g", "enable.auto.commit": False}
    )
    try:
        consumer.commit(offsets=[TopicPartition("cli-lag", 0, 10)], asynchronous=False)
    finally:
        consumer.close()

    status = ok(vdl("cluster", "status", "--admin", node.admin_url))
    assert "asked node 1: ready; controller 1" in status
    rows = [line.split() for line in status.split("PARTITIONS")[1].splitlines()]
    assert ["cli-lag", "0", "1", "1", "1", "0", "25"] in [r[:7] for r in rows]
    groups = [line.split() for line in status.split("CONSUMER GROUPS")[1].splitlines()]
    assert ["cli-g", "cli-lag", "0", "10", "25", "15"] in groups

    listed = [
        line.split() for line in ok(vdl("group", "list", "--admin", node.admin_url)).splitlines()
    ]
    assert ["cli-g", "Empty", "0", "1", "15"] in listed
    described = ok(vdl("group", "describe", "cli-g", "--admin", node.admin_url))
    assert ["cli-lag", "0", "10", "25", "15"] in [line.split() for line in described.splitlines()]
    missing = vdl("group", "describe", "nope", "--admin", node.admin_url)
    assert missing.returncode == 1 and b"no group 'nope'" in missing.stderr
    unreachable = vdl("group", "list", "--admin", f"http://127.0.0.1:{free_port()}")
    assert unreachable.returncode == 3 and b"cannot reach" in unreachable.stderr
