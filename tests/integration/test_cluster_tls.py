"""Three real nodes whose raft connections are mutual TLS (a trustme CA, one certificate per
node naming it): an acks=all producer keeps every acknowledged message through a leader
kill, and neither a process without a certificate nor one with another node's certificate
gets anywhere on a raft port while the cluster carries on."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.acked_producer import NumberedProducer
from tests.integration.cluster_support import Cluster, partition_seen_by
from tests.integration.node_process import NodeProcess, free_port, refused_start
from tests.integration.security_support import Pki
from vdl.consensus.frames import encode_hello
from vdl.consensus.peer_tls import PeerTls, node_name, open_raft_stream
from vdl.consensus.snapshot_wire import encode_request
from vdl.consensus.transport import send_admin_command

TOPIC = "tls-replicated"


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path / "pki")


@pytest.fixture
def cluster(tmp_path: Path, pki: Pki) -> Iterator[Cluster]:
    c = Cluster(tmp_path, node_args=pki.node_args)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _brokers(bootstrap: str) -> set[int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return set(md.brokers)


def _wait(predicate: object, what: str, timeout: float = 30) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except (KafkaException, KeyError):
            pass
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _closed_without_answer(sock: socket.socket) -> bool:
    """The node hangs up having sent at most a TLS alert (a few bytes)."""
    sock.settimeout(10)
    got = b""
    try:
        while data := sock.recv(65536):
            got += data
    except ConnectionResetError:
        pass
    return len(got) < 64


async def _first_answer(address: tuple[str, int], tls: PeerTls, dial: int, data: bytes) -> bytes:
    """Dial node `dial` over TLS, send `data`, and return the first bytes that come back
    (empty if the node hangs up)."""
    stream = await open_raft_stream(address, tls, dial)
    try:
        await stream.send_all(data)
        with trio.fail_after(10):
            return bytes(await stream.receive_some(65536))
    except trio.BrokenResourceError:
        return b""
    finally:
        await stream.aclose()


async def _claim(address: tuple[str, int], tls: PeerTls, dial: int, claim: int) -> bytes:
    """Dial node `dial` over TLS and say hello as node `claim`; what comes back."""
    return await _first_answer(address, tls, dial, encode_hello(claim))


def _admin(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "vdl.cluster.admin",
            "--node",
            f"127.0.0.1:{cluster.raft_ports[1]}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_raft_port_refuses_strangers_and_the_cluster_carries_on(
    cluster: Cluster, pki: Pki, tmp_path: Path
) -> None:
    cluster.create_topic(TOPIC, 1)
    cluster.wait_for_leader(TOPIC, 0)
    _wait(lambda: _brokers(cluster.bootstrap) == {1, 2, 3}, "brokers never registered")
    # A process without a certificate: plaintext admin command to take node 3 out.
    done = _admin(cluster, "remove-node", "3")
    assert done.returncode == 0, done.stderr  # best effort: it cannot tell it was ignored
    # The same with a certificate from another CA fails at its handshake.
    other = Pki(tmp_path / "other")
    cert, key = other.files("ops", "vdl-operator-ops")
    flags = ["--raft-tls-cert", str(cert), "--raft-tls-key", str(key)]
    done = _admin(cluster, *flags, "--raft-tls-ca", str(other.ca_file), "remove-node", "3")
    assert done.returncode == 1 and "TLS handshake" in done.stderr, done.stderr
    # Raw plaintext posing as node 1 towards node 3 (which accepts node 1's link).
    with socket.create_connection(("127.0.0.1", cluster.raft_ports[3]), timeout=10) as sock:
        sock.sendall(encode_hello(1))
        assert _closed_without_answer(sock)
    # The cluster's CA, but node 2's certificate claiming to be node 1.
    node2 = PeerTls.from_files(*pki.files("node2-copy", node_name(2)), pki.ca_file)
    address = ("127.0.0.1", cluster.raft_ports[3])
    assert trio.run(_claim, address, node2, 3, 1) == b""
    _wait(lambda: "TLS handshake failed" in cluster.nodes[3].log(), "no refusal logged")
    claim = "claims node 1 with a certificate for vdl-node-2"
    _wait(lambda: claim in cluster.nodes[3].log(), "no impostor logged")
    _wait(lambda: "TLS handshake failed" in cluster.nodes[1].log(), "no refusal logged")
    # Nothing happened: node 3 is still a member, and the cluster takes acks=all writes.
    time.sleep(1.5)
    assert _brokers(cluster.bootstrap) == {1, 2, 3}
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(50):
        producer.produce(TOPIC, value=b"after-%d" % i)
    assert producer.flush(30) == 0
    assert all(n.alive() for n in cluster.nodes.values())


def test_an_acks_all_producer_survives_a_leader_kill_over_raft_tls(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, 1)
    leader = cluster.wait_for_leader(TOPIC, 0)
    writer = NumberedProducer(cluster.bootstrap, TOPIC)
    acked, errors, produce = writer.acked, writer.errors, writer.produce
    produce(200)
    assert writer.flush(30) == 0
    assert len(acked) == 200, errors[:3]
    produce(100)
    cluster.nodes[leader].kill()
    produce(200)
    new_leader = cluster.wait_for_leader(TOPIC, 0, exclude=leader)
    produce(100)
    remaining = writer.flush(60)
    assert remaining == 0, f"{remaining} unacknowledged; errors {errors[:3]}"
    assert not errors, errors[:3]
    assert len(acked) == writer.sent == 600
    # Every acknowledged message is where it was acknowledged, read from the survivors.
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.alive_bootstrap(),
            "group.id": "verify",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        read: dict[int, bytes] = {}
        deadline = time.monotonic() + 30
        while len(read) < len(acked) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                offset, value = msg.offset(), msg.value()
                assert offset is not None and value is not None
                read[offset] = value
    finally:
        consumer.close()
    for value, offset in acked.items():
        assert read.get(offset) == value, (value, offset)
    assert cluster.nodes[new_leader].alive()


def test_unusable_raft_tls_files_stop_the_node_with_one_line(pki: Pki, tmp_path: Path) -> None:
    args = pki.node_args(2)  # node 2's certificate, given to node 1
    cert_at = args.index("--raft-tls-cert") + 1
    missing = list(args)
    missing[cert_at] = str(tmp_path / "missing.pem")
    peers = ["--peers", "1=127.0.0.1:1,2=127.0.0.1:2"]
    cases = [
        (peers + args, "not this node (it needs the subjectAltName DNS:vdl-node-1)"),
        (peers + missing, "does not exist"),
        (peers + args[:4], "must be given together"),
        (args, "raft-tls-cert needs peers"),
    ]
    for flags, needle in cases:
        lines = refused_start(tmp_path / "data", "--node-id", "1", *flags)
        assert len(lines) == 1 and needle in lines[0], lines


async def _pull_head(address: tuple[str, int], tls: PeerTls, group: int) -> bytes:
    """Ask node 1 for a snapshot of `group` up to index 1; the first bytes of the answer."""
    return await _first_answer(address, tls, 1, encode_request(group, 1, False))


async def _admin_as(address: tuple[str, int], tls: PeerTls, command: dict[str, object]) -> None:
    await send_admin_command(address, json.dumps(command).encode(), tls=tls, node_id=1)


def test_the_raft_port_authorizes_by_role(cluster: Cluster, pki: Pki) -> None:
    cluster.create_topic(TOPIC, 1)
    cluster.wait_for_leader(TOPIC, 0)
    _wait(lambda: _brokers(cluster.bootstrap) == {1, 2, 3}, "brokers never registered")
    address = ("127.0.0.1", cluster.raft_ports[1])
    node2 = PeerTls.from_files(*pki.files("node2-copy", node_name(2)), pki.ca_file)
    operator = PeerTls.from_files(*pki.files("ops", "vdl-operator-ops"), pki.ca_file)
    no_role = PeerTls.from_files(*pki.files("someone", "someone.example"), pki.ca_file)
    node1 = cluster.nodes[1]
    # Group 0's log (users, ACLs, the token key): not to an operator, nor to a certificate
    # of the CA that names no member; a member's certificate is served.
    assert trio.run(_pull_head, address, operator, 0) == b""
    assert trio.run(_pull_head, address, no_role, 0) == b""
    _wait(lambda: "a snapshot pull needs a current member's" in node1.log(), "no refusal")
    assert trio.run(_pull_head, address, node2, 0)[:1] == b"H"
    # A certificate of the CA for a node that is not a member opens no link.
    node9 = PeerTls.from_files(*pki.files("node9", node_name(9)), pki.ca_file)
    assert trio.run(_claim, address, node9, 1, 9) == b""
    _wait(lambda: "unknown or dialed node 9" in node1.log(), "no refusal of node 9")
    # Admin commands: not from a certificate without the operator's name, nor from a
    # member's (it may only ask to add itself).
    trio.run(_admin_as, address, no_role, {"op": "remove_node", "node": 3})
    _wait(lambda: "admin commands need an operator's certificate" in node1.log(), "no refusal")
    trio.run(_admin_as, address, node2, {"op": "remove_node", "node": 3})
    _wait(
        lambda: (
            "refusing admin command remove_node from a certificate for node(s) 2" in node1.log()
        ),
        "no refusal",
    )
    # The CLI will not even send with a certificate that is not an operator's.
    node_cert, node_key = pki.files("node2-cli", node_name(2))
    flags = ["--raft-tls-cert", str(node_cert), "--raft-tls-key", str(node_key)]
    done = _admin(cluster, *flags, "--raft-tls-ca", str(pki.ca_file), "remove-node", "3")
    assert done.returncode == 2 and "not an operator's" in done.stderr, done.stderr
    time.sleep(1.5)
    assert _brokers(cluster.bootstrap) == {1, 2, 3}
    # An operator's certificate is served: the partition moves to nodes 1 and 2.
    ops_cert, ops_key = pki.files("ops-cli", "vdl-operator-ops")
    flags = ["--raft-tls-cert", str(ops_cert), "--raft-tls-key", str(ops_key)]
    args = ["--raft-tls-ca", str(pki.ca_file), "set-replicas", TOPIC, "0", "1,2"]
    done = _admin(cluster, *flags, *args)
    assert done.returncode == 0, done.stderr
    _wait(
        lambda: partition_seen_by(cluster.nodes[1], TOPIC)[2] == [1, 2],
        "the operator's set-replicas was not applied",
    )
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce(TOPIC, value=b"after-%d" % i)
    assert producer.flush(30) == 0
    assert all(n.alive() for n in cluster.nodes.values())


def test_a_node_joins_with_its_own_certificate(cluster: Cluster, pki: Pki, tmp_path: Path) -> None:
    # Its add_node for itself goes over the admin path with a node's certificate, the one
    # admin command such a certificate may send.
    _wait(lambda: _brokers(cluster.bootstrap) == {1, 2, 3}, "brokers never registered")
    fourth = NodeProcess(
        tmp_path / "node4",
        "--node-id",
        "4",
        "--peers",
        f"{cluster.peers},4=127.0.0.1:{free_port()}",
        "--join",
        "true",
        "--raft-tick-ms",
        "50",
        *pki.node_args(4),
    )
    with fourth:
        _wait(lambda: _brokers(cluster.bootstrap) == {1, 2, 3, 4}, "node 4 never joined")
        assert "refusing admin command" not in "".join(n.log() for n in cluster.nodes.values())
