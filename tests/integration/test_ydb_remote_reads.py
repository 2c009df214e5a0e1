"""A YDB reader on any node of a cluster reads every partition, also those its node holds
no replica of (with more nodes than the replication factor): that node reads them from a
node that holds one, over the raft port, and keeps doing so while the partition's leader
moves. With the official SDK, committing after processing, every message is processed
exactly once."""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import ydb
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka import KafkaProducer

from tests.integration.cluster_support import Cluster
from tests.integration.security_support import Pki
from tests.integration.test_ydb_cluster_readers import Reader, committed, driver_for
from tests.integration.waiting import wait_until
from vdl.consensus.peer_tls import PeerTls, node_name
from vdl.consensus.record_reads import (
    RECORDS_MAGIC,
    REQUEST_HEAD,
    RecordReadError,
    RecordRequest,
    fetch_records,
)
from vdl.consensus.transport import send_admin_command

CONSUMER = "remote"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(Path(tmp_path_factory.mktemp("ydb-remote")))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def create_topic(cluster: Cluster, name: str, partitions: int, replication: int) -> None:
    """A Kafka topic with `replication` replicas per partition and the YDB consumer, known
    to every node."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(name, num_partitions=partitions, replication_factor=replication)
    admin.create_topics([new])[name].result(timeout=60)
    with driver_for(cluster.nodes[1].grpc_address, discovery=False) as driver:
        wait_until(
            lambda: (
                driver.topic_client.alter_topic(f"/local/{name}", add_consumers=[CONSUMER]) or True
            ),
            f"{CONSUMER} added to {name}",
            tolerate=(ydb.SchemeError, ydb.Unavailable),
        )
    for node in cluster.nodes.values():
        with driver_for(node.grpc_address, discovery=False) as driver:
            wait_until(
                lambda: [
                    c.name for c in driver.topic_client.describe_topic(f"/local/{name}").consumers
                ],
                f"{name} with its consumer on every node",
                done=lambda names: CONSUMER in names,
                tolerate=(ydb.SchemeError,),
            )


def replicas(cluster: Cluster, name: str) -> dict[int, tuple[int, ...]]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    parts = admin.list_topics(name, timeout=10).topics[name].partitions
    return {p: tuple(int(r) for r in part.replicas) for p, part in parts.items()}


def produce(cluster: Cluster, name: str, partitions: int, count: int, start: int = 0) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap.split(","), acks="all", retries=20)
    try:
        futures = [
            producer.send(name, value=f"m{i}".encode(), partition=p)
            for i in range(start, start + count)
            for p in range(partitions)
        ]
        producer.flush(60)
        for future in futures:
            future.get(timeout=60)
    finally:
        producer.close()


def check_once(readers: list[Reader], sent: dict[int, int]) -> None:
    """No message processed twice; each processed, or its commit was in doubt."""
    for reader in readers:
        assert not reader.errors, (reader.name, reader.errors)
    counts = Counter(m for r in readers for m in r.acked)
    twice = sorted(m for m, n in counts.items() if n > 1)
    assert not twice, f"processed more than once: {twice[:20]}"
    doubtful = {m for r in readers for m in r.uncertain}
    everything = {(p, o) for p, n in sent.items() for o in range(n)}
    missing = sorted(everything - counts.keys() - doubtful)
    assert not missing, f"never processed: {missing[:20]}"


def test_one_reader_on_one_node_reads_every_partition_of_a_single_replica_topic(
    cluster: Cluster,
) -> None:
    name, partitions, count = "remote-rf1", 3, 100
    create_topic(cluster, name, partitions, replication=1)
    placed = replicas(cluster, name)
    # Node 1 holds one partition at most: the others are read from nodes 2 and 3.
    assert sum(1 in r for r in placed.values()) <= 1, placed
    produce(cluster, name, partitions, count)
    reader = Reader("r1", cluster.nodes[1].grpc_address, f"/local/{name}", CONSUMER)
    sent = dict.fromkeys(range(partitions), count)
    try:
        wait_until(
            lambda: committed(cluster, f"/local/{name}", CONSUMER),
            "everything committed",
            done=lambda offsets: offsets == sent,
            tolerate=(ydb.Error,),
        )
    finally:
        reader.stop()
    assert reader.partitions == set(range(partitions))
    check_once([reader], sent)

    # Without a consumer, a partition named by the reader, from its start.
    remote = next(p for p, r in placed.items() if 1 not in r)
    with driver_for(cluster.nodes[1].grpc_address, discovery=False) as driver:
        selector = ydb.TopicReaderSelector(path=f"/local/{name}", partitions=[remote])
        # The SDK's default handler: no start offset of its own (the partition's start).
        handler = ydb.TopicReaderEvents.EventHandler()
        plain: Any = driver.topic_client.reader(selector, consumer=None, event_handler=handler)
        try:
            got: list[tuple[int, int]] = []
            while len(got) < count:
                batch = plain.receive_batch(timeout=20)
                got += [(m.partition_id, m.offset) for m in batch.messages]
        finally:
            plain.close(timeout=10)
    assert got == [(remote, o) for o in range(count)]


@pytest.mark.slow  # moves a leader while reading
def test_a_remote_partition_is_read_on_while_its_leader_moves(cluster: Cluster) -> None:
    name, count = "remote-moving", 100
    create_topic(cluster, name, 1, replication=2)
    (first, second) = replicas(cluster, name)[0]
    (elsewhere,) = {1, 2, 3} - {first, second}
    wait_until(lambda: cluster.leaders(name).get(0), "the preferred leader", done=first.__eq__)
    produce(cluster, name, 1, count)
    reader = Reader("r", cluster.nodes[elsewhere].grpc_address, f"/local/{name}", CONSUMER)
    more = threading.Thread(target=produce, args=(cluster, name, 1, count, count), daemon=True)
    try:
        wait_until(lambda: len(reader.acked), "reading", done=lambda n: n >= 20)
        # The second replica first: leader balancing hands it leadership, while more
        # messages arrive and the reader reads on.
        command = {"op": "set_replicas", "name": name, "partition": 0, "replicas": [second, first]}
        raw = json.dumps(command).encode()
        trio.run(send_admin_command, ("127.0.0.1", cluster.raft_ports[1]), raw)
        more.start()
        wait_until(lambda: cluster.leaders(name).get(0), "the leader moved", done=second.__eq__)
        more.join(60)
        wait_until(
            lambda: committed(cluster, f"/local/{name}", CONSUMER),
            "everything committed",
            done=lambda offsets: offsets == {0: 2 * count},
            tolerate=(ydb.Error,),
        )
    finally:
        reader.stop()
    check_once([reader], {0: 2 * count})


def test_malformed_record_reads_are_refused_and_reads_go_on(cluster: Cluster) -> None:
    port = cluster.raft_ports[2]
    magic = RECORDS_MAGIC.to_bytes(4, "big")
    head = struct.Struct(">IHIqIIq")
    assert head.size == REQUEST_HEAD.size
    attacks = [
        head.pack(RECORDS_MAGIC, 0, 0, 0, 100, 0, -1),  # no topic name
        head.pack(RECORDS_MAGIC, 60000, 0, 0, 100, 0, -1),  # a name too long
        head.pack(RECORDS_MAGIC, 3, 0, -5, 100, 0, -1) + b"abc",  # a negative offset
        head.pack(RECORDS_MAGIC, 2, 0, 0, 100, 0, -1) + b"\xff\xfe",  # not UTF-8
        magic + b"\x00",  # cut short
    ]
    answers = []
    for attack in attacks:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(attack)
            sock.shutdown(socket.SHUT_WR)
            answers.append(_read_all(sock))
    # Bad bounds end the connection; a well-framed bad request gets INVALID_REQUEST (42).
    assert answers[0] == answers[1] == answers[4] == b""
    for answer in answers[2:4]:
        assert struct.unpack(">h", answer[:2]) == (42,), answer
    node = cluster.nodes[2]
    lines = ("refusing a malformed record read",)
    wait_until(lambda: all(line in node.log() for line in lines), "node 2 logging it")
    assert node.alive()
    # An unknown partition is UNKNOWN_TOPIC_OR_PARTITION (3).
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.pack(RECORDS_MAGIC, 4, 9, 0, 100, 0, -1) + b"none")
        answer = _read_all(sock)
    assert struct.unpack(">h", answer[:2]) == (3,), answer
    # And a legitimate reader on that node is served.
    name = "remote-after-attack"
    create_topic(cluster, name, 2, replication=1)
    produce(cluster, name, 2, 30)
    reader = Reader("r2", node.grpc_address, f"/local/{name}", CONSUMER)
    try:
        wait_until(
            lambda: committed(cluster, f"/local/{name}", CONSUMER),
            "everything committed",
            done=lambda offsets: offsets == {0: 30, 1: 30},
            tolerate=(ydb.Error,),
        )
    finally:
        reader.stop()
    check_once([reader], {0: 30, 1: 30})


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.slow  # a cluster of its own, with raft TLS
def test_remote_reads_over_raft_tls_need_a_members_certificate(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    tls_cluster = Cluster(tmp_path, node_args=pki.node_args)
    try:
        tls_cluster.start()
        name, partitions, count = "remote-tls", 3, 50
        create_topic(tls_cluster, name, partitions, replication=1)
        produce(tls_cluster, name, partitions, count)
        reader = Reader("r1", tls_cluster.nodes[1].grpc_address, f"/local/{name}", CONSUMER)
        sent = dict.fromkeys(range(partitions), count)
        try:
            wait_until(
                lambda: committed(tls_cluster, f"/local/{name}", CONSUMER),
                "everything committed",
                done=lambda offsets: offsets == sent,
                tolerate=(ydb.Error,),
            )
        finally:
            reader.stop()
        check_once([reader], sent)

        # Only a member's certificate is answered; the dialer checks whom it reached.
        (partition, (holder,)) = next(iter(replicas(tls_cluster, name).items()))
        address = ("127.0.0.1", tls_cluster.raft_ports[holder])
        request = RecordRequest(name, partition, 0, 1 << 20)
        member = PeerTls.from_files(*pki.files("member", node_name(2)), pki.ca_file)
        operator = PeerTls.from_files(*pki.files("ops", "vdl-operator-ops"), pki.ca_file)

        async def read(tls: PeerTls, node_id: int) -> int:
            records = await fetch_records(address, request, tls=tls, node_id=node_id)
            return len(records.batches)

        assert trio.run(read, member, holder) > 0
        for tls, node_id in ((operator, holder), (member, holder % 3 + 1)):
            with pytest.raises(RecordReadError):
                trio.run(read, tls, node_id)
        node = tls_cluster.nodes[holder]
        wait_until(
            lambda: "a record read needs a current member's certificate" in node.log(),
            "the refusal logged",
        )
        assert node.alive()
    finally:
        tls_cluster.stop()
