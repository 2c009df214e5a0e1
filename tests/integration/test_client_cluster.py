"""``vdl.client`` and the ``vdl`` command line against three real nodes: several endpoints
and discovery, ``vdl produce`` and ``vdl consume`` carrying on (no loss, no duplicates)
after the node they use is killed -9 mid-stream, writes without a producer id spread over
partitions (by the client's random producer id, and by the server for sessions without
one), and a start offset per partition."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import grpc
import pytest
import trio

import vdl.client
from tests.integration.admin_support import get_json
from tests.integration.cluster_support import Cluster, partition_seen_by
from tests.integration.node_process import NodeProcess, free_port
from tests.integration.waiting import wait_until
from vdl.client import ReaderSettings, WriterSettings
from vdl.net.ydb.protos import ydb_status_codes_pb2, ydb_topic_pb2

ROOT = Path(__file__).resolve().parents[2]
WRITE_METHOD = "/Ydb.Topic.V1.TopicService/StreamWrite"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("client-cluster")) as c:
        yield c


def endpoints(cluster: Cluster) -> str:
    """Every node, dead or alive, as a user would list them."""
    return ",".join(f"grpc://{n.grpc_address}" for n in cluster.nodes.values())


def cli(*args: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.pop("VDL_ENDPOINT", None)
    return subprocess.Popen(
        [sys.executable, "-m", "vdl.cli", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )


def finish(
    process: subprocess.Popen[bytes], stdin: bytes | None = None, timeout: float = 90
) -> tuple[bytes, bytes]:
    try:
        out, err = process.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"the command did not finish: {err.decode()}") from None
    assert process.returncode == 0, err.decode()
    return out, err


def high_watermark(node: NodeProcess, topic: str, partition: int) -> int:
    _, body = get_json(node.admin_url + "/v1/partitions")
    for row in body["partitions"]:
        if row["topic"] == topic and row["partition"] == partition:
            return int(row["high_watermark"] or 0)
    return 0


def restart(cluster: Cluster, node_id: int) -> None:
    node = cluster.nodes[node_id]
    if not node.alive():
        node.start()


def create_everywhere(cluster: Cluster, topic: str, partitions: int) -> None:
    """Create the topic and wait until every node knows it and its partitions' leaders."""
    cluster.create_topic(topic, partitions)

    def known(node: NodeProcess, partition: int) -> bool:
        return partition_seen_by(node, topic, partition)[1] > 0

    for node in cluster.nodes.values():
        for partition in range(partitions):
            wait_until(
                functools.partial(known, node, partition),
                f"{topic}[{partition}] known on {node.grpc_address}",
                tolerate=(Exception,),
            )


def wait_in_sync(cluster: Cluster, topic: str, partitions: int) -> None:
    """Every replica of the topic's partitions in sync, so that a node can be killed."""
    for partition in range(partitions):

        def full(p: int = partition) -> bool:
            leader = cluster.wait_for_leader(topic, p)
            return len(partition_seen_by(cluster.nodes[leader], topic, p)[3]) == 3

        wait_until(full, f"{topic}[{partition}] in sync on 3 nodes", tolerate=(Exception,))


async def read_everything(
    endpoint: str, topic: str, count: int, partitions: int
) -> dict[int, list[bytes]]:
    """Exactly ``count`` messages from the start of every partition, and the partitions'
    end offsets adding up to ``count`` (so nothing was written twice)."""
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    async with vdl.client.connect(endpoint) as client:
        async with client.reader(topic, None, start_from="earliest") as reader:
            while sum(map(len, got.values())) < count:
                batch = await reader.receive_batch(timeout=30)
                got[batch.partition].extend(m.data for m in batch.messages)
        described = await client.admin.describe_topic(topic)
    assert sum(p.end_offset for p in described.partitions) == count
    return got


async def add_consumer(endpoint: str, topic: str, consumer: str) -> None:
    async with vdl.client.connect(endpoint) as client:
        await client.admin.alter_topic(topic, add_consumers=[consumer])


async def write_lines(endpoint: str, topic: str, partition: int, lines: list[bytes]) -> None:
    async with vdl.client.connect(endpoint) as client:
        settings = WriterSettings(producer_id=f"feed-{partition}", partition_id=partition)
        async with client.writer(topic, settings) as writer:
            await writer.write(lines)
            await writer.flush(timeout=60)


def test_produce_survives_the_kill_of_its_node(cluster: Cluster) -> None:
    topic, count = "produced", 3000
    create_everywhere(cluster, topic, 1)
    wait_in_sync(cluster, topic, 1)
    lines = [f"line {i:05d}".encode() for i in range(count)]
    process = cli(
        "produce", topic, "--endpoint", endpoints(cluster), "--producer-id", "cli-p", "--quiet"
    )
    assert process.stdin is not None
    killed = 0
    try:
        process.stdin.write(b"\n".join(lines[: count // 2]) + b"\n")
        process.stdin.flush()
        # A writer is served by the partition's leader only: that is the command's node.
        killed = cluster.wait_for_leader(topic, 0)
        leader = cluster.nodes[killed]
        wait_until(lambda: high_watermark(leader, topic, 0) >= 100, "the first lines acked")
        leader.kill()
        finish(process, b"\n".join(lines[count // 2 :]) + b"\n")
        got = trio.run(read_everything, endpoints(cluster), topic, count, 1)
        assert got[0] == lines
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if killed:
            restart(cluster, killed)


@pytest.mark.slow
def test_consume_survives_the_kill_of_its_node(cluster: Cluster) -> None:
    topic, per_partition = "consumed", 1000
    create_everywhere(cluster, topic, 2)
    wait_in_sync(cluster, topic, 2)
    lines = {p: [f"p{p} {i:05d}".encode() for i in range(per_partition)] for p in (0, 1)}
    half = per_partition // 2
    trio.run(add_consumer, endpoints(cluster), topic, "cli")
    for p in (0, 1):
        trio.run(write_lines, endpoints(cluster), topic, p, lines[p][:half])
    # Sessions start on the first endpoint listed: node 1 is the command's node.
    first = cluster.nodes[1]
    process = cli(
        "consume",
        topic,
        "--consumer",
        "cli",
        "--count",
        str(2 * per_partition),
        "--endpoint",
        endpoints(cluster),
        "--quiet",
    )
    printed: list[bytes] = []
    assert process.stdout is not None
    reading = threading.Thread(target=collect, args=(process.stdout, printed), daemon=True)
    reading.start()
    try:
        wait_until(
            lambda: len(printed) >= 2 * half or process.poll() is not None, "the first half printed"
        )
        assert process.poll() is None, process.stderr.read() if process.stderr else b""
        first.kill()
        for p in (0, 1):
            trio.run(write_lines, endpoints(cluster), topic, p, lines[p][half:])
        process.wait(timeout=90)
        reading.join(timeout=10)
        assert process.returncode == 0, process.stderr.read() if process.stderr else b""
        for p in (0, 1):
            assert [line for line in printed if line.startswith(f"p{p} ".encode())] == lines[p]
        assert len(printed) == 2 * per_partition
        # What the command printed is committed: a second run starts after it.
        trio.run(write_lines, endpoints(cluster), topic, 0, [b"after"])
        again = cli(
            "consume",
            topic,
            "--consumer",
            "cli",
            "--count",
            "1",
            "--endpoint",
            endpoints(cluster),
        )
        out, _ = finish(again, b"")
        assert out.splitlines() == [b"after"]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        restart(cluster, 1)


def collect(stream: IO[bytes], into: list[bytes]) -> None:
    for line in stream:
        into.append(line.rstrip(b"\n"))


async def test_writers_without_producer_id_spread_over_partitions(cluster: Cluster) -> None:
    topic = "spread"
    create_everywhere(cluster, topic, 4)
    partitions: set[int] = set()
    # Two endpoints nobody listens on come first: the pool skips them.
    dead = [f"grpc://127.0.0.1:{free_port()}" for _ in range(2)]
    async with vdl.client.connect([*dead, endpoints(cluster)]) as client:
        for _ in range(12):
            async with client.writer(topic) as writer:
                [result] = await writer.write_with_ack(b"x")
                partitions.add(result.partition)
    assert len(partitions) > 1, partitions


def init_without_keys(node: NodeProcess, topic: str) -> tuple[int, int]:
    """(status, partition) of a write session that names no partition, producer id or
    message group: the server picks the partition."""
    request = ydb_topic_pb2.StreamWriteMessage.FromClient()
    request.init_request.path = topic
    with grpc.insecure_channel(node.grpc_address) as channel:
        call = channel.stream_stream(
            WRITE_METHOD,
            request_serializer=ydb_topic_pb2.StreamWriteMessage.FromClient.SerializeToString,
            response_deserializer=ydb_topic_pb2.StreamWriteMessage.FromServer.FromString,
        )
        replies = call(iter([request]), metadata=[("x-ydb-database", "/local")], timeout=10)
        reply = next(replies)
        replies.cancel()
    return int(reply.status), int(reply.init_response.partition_id)


def test_server_picks_partitions_for_sessions_without_keys(cluster: Cluster) -> None:
    topic = "unkeyed"
    create_everywhere(cluster, topic, 4)
    # Leadership settles on the preferred replicas (leader balancing), then stays.
    leaders = {p: cluster.wait_for_preferred_leader(topic, p) for p in range(4)}
    chosen: set[int] = set()
    for node_id, node in cluster.nodes.items():
        for _ in range(4):
            status, partition = init_without_keys(node, topic)
            if status == ydb_status_codes_pb2.StatusIds.SUCCESS:
                chosen.add(partition)
                # Only a partition this node leads: it could not serve another one.
                assert leaders[partition] == node_id
    assert len(chosen) > 1, chosen


async def test_start_from_per_partition(cluster: Cluster) -> None:
    topic = "starts"
    create_everywhere(cluster, topic, 2)
    lines = {p: [f"p{p}-{i}".encode() for i in range(10)] for p in (0, 1)}
    for p in (0, 1):
        await write_lines(endpoints(cluster), topic, p, lines[p])
    async with vdl.client.connect(endpoints(cluster)) as client:
        await client.admin.alter_topic(topic, add_consumers=["starts"])
        got = await read_some(client, ReaderSettings(None, start_from={0: 7, 1: "earliest"}), 13)
        assert got == {0: lines[0][7:], 1: lines[1]}
        # A consumer: partition 1 from offset 8, partition 0 from its committed offset (0).
        got = await read_some(client, ReaderSettings("starts", start_from={1: 8}), 12)
        assert got == {0: lines[0], 1: lines[1][8:]}


async def read_some(
    client: vdl.client.Client, settings: ReaderSettings, count: int
) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = {0: [], 1: []}
    async with trio.open_nursery() as nursery:
        reader = await client.start_reader(nursery, "starts", settings)
        while sum(map(len, got.values())) < count:
            batch = await reader.receive_batch(timeout=30)
            got[batch.partition].extend(m.data for m in batch.messages)
        await reader.close()
    return got


def test_cli_names_every_endpoint_when_none_answers() -> None:
    dead = [f"grpc://127.0.0.1:{free_port()}" for _ in range(2)]
    refused = cli("topic", "list", "--endpoint", ",".join(dead), "--timeout", "5")
    _, err = refused.communicate(b"", timeout=60)
    assert refused.returncode == 3, err.decode()
    assert all(endpoint in err.decode() for endpoint in dead), err.decode()
