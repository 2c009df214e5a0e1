"""One frame must never stop a node: hostile bytes on the raft port of a real node (a
three-node cluster without raft TLS) cost only their own connection, and the cluster
keeps replicating afterwards (an acks=all produce through Kafka)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.integration.cluster_support import Cluster
from tests.integration.node_process import NodeProcess, free_port, refused_start
from tests.integration.security_support import add_users
from vdl.backends.api import Entry, EntryType
from vdl.consensus.frames import FORWARD_GROUP, encode_forward, encode_frame, encode_hello
from vdl.consensus.messages import AppendEntries

TOPIC = "raft-port"
WARNING = "has no TLS (raft-tls-cert): anyone who can reach it"
TARGET = 3  # the highest id: it dials nobody, so it takes a hello from nodes 1 and 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("raft-port"), "--raft-insecure", "true")
    try:
        c.start()
        c.create_topic(TOPIC, 1)
        c.wait_for_leader(TOPIC, 0)
        yield c
    finally:
        c.stop()


def send_raw(port: int, data: bytes, *, wait_close: bool = False) -> None:
    """Send `data` to a raft port; with `wait_close`, until the node hangs up."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(data)
            if wait_close:
                while sock.recv(65536):
                    pass
        except OSError:
            pass  # reset by the node: also a hang-up


def wait_for_line(cluster: Cluster, node: int, needle: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while needle not in cluster.nodes[node].log():
        assert cluster.nodes[node].alive(), cluster.nodes[node].log()[-3000:]
        assert time.monotonic() < deadline, f"node {node} never logged {needle!r}"
        time.sleep(0.1)


def produce_through_kafka(cluster: Cluster, count: int = 20) -> None:
    """A legitimate client is served: acks=all writes on the three replicas commit."""
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 60000}
    )
    for i in range(count):
        producer.produce(TOPIC, value=b"after-%d" % i)
    assert producer.flush(60) == 0
    assert all(node.alive() for node in cluster.nodes.values())


@pytest.mark.parametrize("node", [1, TARGET])
def test_an_admin_hello_then_a_forward_with_a_list_op_does_not_stop_the_node(
    cluster: Cluster, node: int
) -> None:
    # The confirmed crash: `op not in ADMIN_OPS` with an unhashable op ended the process.
    port = cluster.raft_ports[node]
    send_raw(port, encode_hello(0) + encode_forward(b'{"op": []}'))
    wait_for_line(cluster, node, "ignoring a forwarded command without a string op")
    produce_through_kafka(cluster)


def test_a_peer_forward_of_any_shape_does_not_stop_the_leader(cluster: Cluster) -> None:
    # Forward frames as a member (node 1 towards node 3) go to `_on_forward`; whoever leads
    # group 0 proposes the allowed ones, so shapes that pass the op check are sent too.
    bodies = [
        b'{"op": []}',
        b'{"op": "auto_topic"}',
        b'{"op": "auto_topic", "name": ["x"]}',
        b"[1, 2]",
        b'"op"',
        b"\xff\xfe",
        b"[" * 100000,
        json.dumps({"op": "register", "node": "x"}).encode(),
        json.dumps({"op": "set_replicas", "name": TOPIC, "partition": "0"}).encode(),
    ]
    frames = b"".join(encode_forward(body) for body in bodies)
    send_raw(cluster.raft_ports[TARGET], encode_hello(1) + frames)
    wait_for_line(cluster, TARGET, "ignoring a forwarded command that is not JSON")
    produce_through_kafka(cluster)


def test_a_garbage_config_entry_in_a_forged_append_costs_only_the_connection(
    cluster: Cluster,
) -> None:
    forged = AppendEntries(1, TARGET, 1, 0, 0, 0, (Entry(1, 1, EntryType.CONFIG, b"\x01junk"),))
    send_raw(cluster.raft_ports[TARGET], encode_hello(1) + encode_frame(0, forged), wait_close=True)
    wait_for_line(cluster, TARGET, "dropping connection with node 1: bad configuration")
    # A message naming another sender than the hello did is refused the same way.
    stray = AppendEntries(2, TARGET, 1, 0, 0, 0, ())
    send_raw(cluster.raft_ports[TARGET], encode_hello(1) + encode_frame(0, stray), wait_close=True)
    wait_for_line(cluster, TARGET, "a message from node 2 to node 3")
    produce_through_kafka(cluster)


def test_a_forward_frame_on_the_admin_path_is_not_a_raft_message(cluster: Cluster) -> None:
    # A frame of another group on the admin path is skipped; the admin path keeps reading.
    heartbeat = encode_frame(0, AppendEntries(0, TARGET, 1, 0, 0, 0, ()))
    body = encode_forward(b'{"op": {"nested": 1}}')
    assert FORWARD_GROUP != 0
    send_raw(cluster.raft_ports[TARGET], encode_hello(0) + heartbeat + body)
    wait_for_line(cluster, TARGET, "ignoring a forwarded command without a string op")
    produce_through_kafka(cluster)


def test_users_on_a_cluster_without_raft_tls_do_not_start(tmp_path: Path) -> None:
    users = tmp_path / "users"
    add_users(users)
    peers = f"1=127.0.0.1:{free_port()},2=127.0.0.1:{free_port()}"
    for extra in ([], ["--raft-insecure", "true"]):
        lines = refused_start(
            tmp_path / "data", "--node-id", "1", "--peers", peers, "--users", str(users), *extra
        )
        assert len(lines) == 1 and "users on a cluster need raft TLS" in lines[0], lines
    assert not (tmp_path / "data").exists()


def test_a_cluster_without_raft_tls_warns_once_unless_raft_insecure(
    cluster: Cluster, tmp_path: Path
) -> None:
    # The module's cluster runs with --raft-insecure true: not a word about it.
    assert all(WARNING not in node.log() for node in cluster.nodes.values())
    peers = f"1=127.0.0.1:{free_port()}"
    with NodeProcess(tmp_path / "data", "--node-id", "1", "--peers", peers) as node:
        assert node.log().count(WARNING) == 1, node.log()
