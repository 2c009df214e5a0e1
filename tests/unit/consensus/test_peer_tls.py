"""Raft connections under mutual TLS on loopback: a trustme CA issues each node a
certificate naming it (`vdl-node-<id>`); links, snapshot pulls and admin commands work
with one, and anything without one, or with one for another node, is refused."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trustme

from tests.integration.node_process import free_port
from tests.unit.consensus.test_snapshot_transfer import (
    StoreSource,
    follower_store,
    leader_store,
    same_log,
    snapshot_of,
)
from tests.unit.consensus.test_transport import Box, _until
from vdl.cluster.manager import admin_allowed
from vdl.consensus.frames import encode_forward, encode_hello
from vdl.consensus.messages import Heartbeat
from vdl.consensus.peer_tls import (
    PeerTls,
    certificate_is_operator,
    certificate_nodes,
    node_name,
    open_raft_stream,
)
from vdl.consensus.router import GroupRouter
from vdl.consensus.snapshot_wire import encode_request
from vdl.consensus.transport import RaftTransport, send_admin_command
from vdl.security.tls import TlsConfigError


class Pki:
    """A CA and the files of the certificates it issued, in a temporary directory."""

    def __init__(self, directory: Path, ca: trustme.CA | None = None) -> None:
        self.directory = directory
        self.ca = ca or trustme.CA()
        self.ca_file = directory / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))

    def files(self, name: str, *identities: str) -> tuple[Path, Path]:
        cert = self.ca.issue_cert(*identities)
        cert_file, key_file = self.directory / f"{name}.pem", self.directory / f"{name}.key"
        cert.cert_chain_pems[0].write_to_path(str(cert_file))
        cert.private_key_pem.write_to_path(str(key_file))
        return cert_file, key_file

    def tls(self, name: str, *identities: str) -> PeerTls:
        cert, key = self.files(name, *identities)
        return PeerTls.from_files(cert, key, self.ca_file)

    def node(self, node_id: int) -> PeerTls:
        return self.tls(f"node{node_id}", node_name(node_id))


@pytest.fixture
def pki(tmp_path: Path) -> Iterator[Pki]:
    yield Pki(tmp_path)


class TlsNode:
    def __init__(self, node_id: int, ports: dict[int, int], tls: PeerTls | None) -> None:
        self.router = GroupRouter()
        self.box = Box()
        self.router.add(1, self.box)
        # (command, who may send what: None for an operator, else the sender's node ids)
        self.admin: list[tuple[bytes, frozenset[int] | None]] = []
        self.router.on_admin = lambda body, joining: self.admin.append((body, joining))
        peers = {n: ("127.0.0.1", p) for n, p in ports.items()}
        self.address = peers[node_id]
        self.transport = RaftTransport(node_id, self.address, peers, self.router, tls=tls)

    async def start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.transport.serve)


async def _closed_by_peer(stream: trio.abc.Stream) -> bool:
    """True once the other side hangs up on `stream` without sending a frame."""
    with trio.fail_after(10):
        try:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return True
                assert not data.startswith(b"\x00\x00"), "got a raft frame"
        except trio.BrokenResourceError:
            return True
        finally:
            await stream.aclose()


def test_a_certificate_names_the_nodes_in_its_dns_alt_names() -> None:
    cert = {
        "subject": ((("commonName", "vdl-node-7"),),),
        "subjectAltName": (
            ("DNS", "vdl-node-3"),
            ("DNS", "vdl-node-03"),
            ("DNS", "vdl-node-x"),
            ("DNS", "vdl-node-²"),
            ("IP Address", "127.0.0.1"),
            ("DNS", "vdl-node-12"),
        ),
    }
    # Never the CN, never a number with a leading zero (two spellings of one node).
    assert certificate_nodes(cert) == {3, 12}
    assert certificate_nodes(None) == set()


def test_unusable_files_are_one_line_errors(pki: Pki, tmp_path: Path) -> None:
    cert, key = pki.files("node1", node_name(1))
    other = tmp_path / "other"
    other.mkdir()
    _, other_key = Pki(other).files("node1", node_name(1))
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    cases = [
        (tmp_path / "missing.pem", key, pki.ca_file, "does not exist"),
        (cert, other_key, pki.ca_file, "does not match"),
        (cert, key, bad, str(bad)),
        (cert, key, tmp_path / "missing-ca.pem", "missing-ca.pem"),
    ]
    for c, k, ca, needle in cases:
        with pytest.raises(TlsConfigError) as info:
            PeerTls.from_files(c, k, ca)
        assert needle in str(info.value)
        assert "\n" not in str(info.value)
    # A node's own files must make a certificate its peers accept: signed by the CA and
    # naming the node.
    PeerTls.from_files(cert, key, pki.ca_file, node_id=1)
    with pytest.raises(TlsConfigError, match=r"not this node .*DNS:vdl-node-2"):
        PeerTls.from_files(cert, key, pki.ca_file, node_id=2)
    other_cert, other_key = Pki(other).files("node1", node_name(1))
    with pytest.raises(TlsConfigError, match="not usable with CA"):
        PeerTls.from_files(other_cert, other_key, pki.ca_file, node_id=1)


async def test_peers_link_over_mutual_tls_and_pull_snapshots(pki: Pki, tmp_path: Path) -> None:
    ports = {1: free_port(), 2: free_port(), 3: free_port()}
    nodes = {i: TlsNode(i, ports, pki.node(i)) for i in ports}
    leader = leader_store(tmp_path / "leader")
    follower = follower_store("segment", tmp_path / "follower")
    nodes[1].router.add(9, StoreSource(leader))
    async with trio.open_nursery() as nursery:
        for node in nodes.values():
            await node.start(nursery)
        for src, node in nodes.items():
            for dst in ports:
                if dst != src:
                    with trio.fail_after(10):
                        await node.transport.links[dst].wait_connected()
                    node.transport.send(1, Heartbeat(src, dst, 1, 0))
        await _until(lambda: all(len(n.box.got) == 2 for n in nodes.values()))
        assert {m.src for m in nodes[1].box.got} == {2, 3}
        # A follower's snapshot pull goes over TLS too, to the node it names, files and all.
        upto = leader.last_index() - 2
        staging = follower.stage_snapshot()
        data = await nodes[2].transport.fetch_snapshot(1, 9, snapshot_of(leader, upto), staging)
        assert data.files > 1 and data.entries > 0
        follower.install_snapshot(staging)
        assert same_log(follower, leader, upto)
        nursery.cancel_scope.cancel()
    leader.close()
    follower.close()


async def test_connections_without_a_good_certificate_are_refused(
    pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ports = {1: free_port(), 2: free_port()}
    a, b = TlsNode(1, ports, pki.node(1)), TlsNode(2, ports, pki.node(2))
    stranger_dir = tmp_path / "stranger"
    stranger_dir.mkdir()
    stranger = Pki(stranger_dir).node(1)  # the right name, from another CA
    impostor = pki.node(3)  # the right CA, another node's name
    async with trio.open_nursery() as nursery:
        await a.start(nursery)
        await b.start(nursery)
        link = b.transport.links[1]
        with trio.fail_after(10):
            await link.wait_connected()
        connects = link.connects
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="vdl.consensus"):
            # Plain TCP claiming node 1, as a node without raft TLS would.
            plain = await trio.open_tcp_stream(*b.address)
            await plain.send_all(encode_hello(1))
            assert await _closed_by_peer(plain)
            # TLS without a client certificate.
            bare = ssl.create_default_context(cafile=str(pki.ca_file))
            bare.check_hostname = False
            tcp = await trio.open_tcp_stream(*b.address)
            nocert = trio.SSLStream(tcp, bare, server_hostname=node_name(2))
            try:
                await nocert.send_all(encode_hello(1))
            except trio.BrokenResourceError:
                pass  # TLS 1.2: refused during the handshake already
            assert await _closed_by_peer(nocert)
            # Another CA's certificate: the dialer gets no further than its handshake.
            tcp = await trio.open_tcp_stream(*b.address)
            with pytest.raises(OSError):
                await stranger.connect(tcp, 2)
            # The cluster's CA, but a certificate for node 3 claiming to be node 1.
            tcp = await trio.open_tcp_stream(*b.address)
            claimed = await impostor.connect(tcp, 2)
            await claimed.send_all(encode_hello(1))
            assert await _closed_by_peer(claimed)
            await _until(lambda: "claims node 1" in caplog.text)
        assert "TLS handshake failed" in caplog.text
        assert "certificate for vdl-node-3" in caplog.text
        # The real link was never displaced and still carries messages.
        assert link.connected and link.connects == connects
        a.transport.send(1, Heartbeat(1, 2, 1, 5))
        await _until(lambda: b.box.got == [Heartbeat(1, 2, 1, 5)])
        nursery.cancel_scope.cancel()


async def test_the_dialer_checks_it_reached_the_node_it_meant(pki: Pki) -> None:
    ports = {1: free_port(), 2: free_port()}
    b = TlsNode(2, ports, pki.node(2))
    dialer = pki.node(1)
    async with trio.open_nursery() as nursery:
        await b.start(nursery)
        # Node 2 answers at the address listed for node 3 (say a stale --peers entry).
        with pytest.raises(ConnectionError, match="vdl-node-2, not vdl-node-3"):
            await open_raft_stream(b.address, dialer, 3)
        stream = await open_raft_stream(b.address, dialer, 2)
        assert isinstance(stream, trio.SSLStream)
        assert stream.version() in ("TLSv1.2", "TLSv1.3")
        await stream.aclose()
        # A TLS dialer does not talk to a plaintext raft port.
        plain_port = free_port()
        plain = TlsNode(3, {**ports, 3: plain_port}, None)
        await plain.start(nursery)
        with pytest.raises(OSError):
            await open_raft_stream(plain.address, dialer, 3)
        nursery.cancel_scope.cancel()


async def test_admin_commands_need_an_operator_certificate(pki: Pki) -> None:
    ports = {1: free_port(), 2: free_port()}
    a = TlsNode(1, ports, pki.node(1))
    operator = pki.tls("operator", "vdl-operator-ops")
    no_role = pki.tls("someone", "ops.example")  # the raft CA's, but neither node nor operator
    async with trio.open_nursery() as nursery:
        await a.start(nursery)
        plain = await trio.open_tcp_stream(*a.address)
        await plain.send_all(encode_hello(0) + encode_forward(b'{"op": "remove_node"}'))
        assert await _closed_by_peer(plain)
        stream = await open_raft_stream(a.address, no_role, 1)
        await stream.send_all(encode_hello(0) + encode_forward(b'{"op": "remove_node"}'))
        assert await _closed_by_peer(stream)
        await send_admin_command(a.address, b'{"op": "set_replicas"}', tls=operator)
        await _until(lambda: bool(a.admin))
        assert a.admin == [(b'{"op": "set_replicas"}', None)]
        # A node's certificate gets through with its node ids: the manager takes only that
        # node's own add_node from it (`admin_allowed`).
        await send_admin_command(a.address, b'{"op": "add_node"}', tls=pki.node(2))
        await _until(lambda: len(a.admin) == 2)
        assert a.admin[1] == (b'{"op": "add_node"}', frozenset({2}))
        # The admin client checks the server is a raft node of this CA; with a node id,
        # that very node.
        with pytest.raises(ConnectionError, match="not vdl-node-2"):
            await send_admin_command(a.address, b"{}", tls=operator, node_id=2)
        nursery.cancel_scope.cancel()


async def test_snapshot_pulls_need_a_current_members_certificate(pki: Pki, tmp_path: Path) -> None:
    ports = {1: free_port(), 2: free_port()}
    a = TlsNode(1, ports, pki.node(1))
    leader = leader_store(tmp_path / "leader")
    a.router.add(9, StoreSource(leader))
    upto = leader.last_index() - 2
    async with trio.open_nursery() as nursery:
        await a.start(nursery)
        for refused in (pki.tls("operator", "vdl-operator-ops"), pki.node(5)):
            stream = await open_raft_stream(a.address, refused, 1)
            await stream.send_all(encode_request(9, upto, False))
            assert await _closed_by_peer(stream)
        member = await open_raft_stream(a.address, pki.node(2), 1)
        await member.send_all(encode_request(9, upto, False))
        with trio.fail_after(10):
            assert await member.receive_some(65536)  # the head of the snapshot
        await member.aclose()
        nursery.cancel_scope.cancel()
    leader.close()


def test_only_an_operator_may_send_any_admin_command_a_node_only_its_own_join() -> None:
    assert admin_allowed({"op": "remove_node", "node": 3}, None)
    assert admin_allowed({"op": "add_node", "node": 4, "raft": "h:1"}, frozenset({4}))
    assert not admin_allowed({"op": "add_node", "node": 5, "raft": "h:1"}, frozenset({4}))
    assert not admin_allowed({"op": "add_node", "node": True, "raft": "h:1"}, frozenset({1}))
    assert not admin_allowed({"op": "remove_node", "node": 4}, frozenset({4}))
    assert not admin_allowed({"op": "set_replicas", "name": "t"}, frozenset({4}))


def test_an_operator_certificate_names_vdl_operator() -> None:
    def cert(*names: str) -> dict[str, object]:
        return {"subjectAltName": tuple(("DNS", n) for n in names)}

    assert certificate_is_operator(cert("vdl-operator"))
    assert certificate_is_operator(cert("x", "vdl-operator-alice"))
    assert not certificate_is_operator(cert("vdl-operators", "vdl-node-1", "operator"))
    assert not certificate_is_operator({"subject": ((("commonName", "vdl-operator"),),)})
    assert not certificate_is_operator(None)


async def test_a_tls_handshake_never_finished_loses_its_connection(pki: Pki) -> None:
    """A slowloris on the raft TLS port: TCP connected, not one TLS byte, or a hello that
    never comes. The node hangs up once the hello timeout passes, and its peer link
    still carries messages."""
    ports = {1: free_port(), 2: free_port()}
    a, b = TlsNode(1, ports, pki.node(1)), TlsNode(2, ports, pki.node(2))
    async with trio.open_nursery() as nursery:
        await a.start(nursery)
        await b.start(nursery)
        silent = await trio.open_tcp_stream(*b.address)
        half = await trio.open_tcp_stream(*b.address)
        await half.send_all(b"\x16\x03\x01\x02\x00\x01")  # a ClientHello's first bytes
        with trio.fail_after(30):
            for stream in (silent, half):
                try:
                    assert await stream.receive_some(1) == b""
                except trio.BrokenResourceError:
                    pass  # reset rather than closed: dropped all the same
                await stream.aclose()
        a.transport.send(1, Heartbeat(1, 2, 1, 5))
        await _until(lambda: b.box.got == [Heartbeat(1, 2, 1, 5)])
        nursery.cancel_scope.cancel()
