"""Hostile HTTP/2 clients on the YDB gRPC port cannot grow a node's memory without bound or
hold a connection for free; after each attack a real client (the YDB SDK) is served.

Memory is the node process's own resident set (``VmRSS``), read before and after an attack
that would cost it hundreds of MiB if nothing bounded it.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest
import trio
import ydb
from hyperframe.frame import GoAwayFrame, PingFrame, SettingsFrame

from tests.integration.node_process import NodeProcess
from tests.integration.security_support import PASSWORDS, add_users, write_tls_files
from tests.unit.grpc.h2_frames import PREFACE, frames_in
from vdl.net.ydb.protos import ydb_topic_pb2

DATABASE = "/local"
STREAM_WRITE = "/Ydb.Topic.V1.TopicService/StreamWrite"
DESCRIBE_TOPIC = "/Ydb.Topic.V1.TopicService/DescribeTopic"
UNAUTHORIZED = 400020
MIB = 1 << 20


def sdk_served(node: NodeProcess, user: str | None = None) -> None:
    """A legitimate YDB SDK client connects, (logs in,) and lists the database."""
    credentials = None
    if user is not None:
        credentials = ydb.StaticCredentials.from_user_password(user, PASSWORDS[user])
    config = ydb.DriverConfig(
        endpoint=f"grpc://{node.grpc_address}", database=DATABASE, credentials=credentials
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=20, fail_fast=True)
        listing = driver.scheme_client.list_directory(DATABASE)
        assert listing.name is not None
    finally:
        driver.stop(timeout=10)


class RawClient:
    """An HTTP/2 client built on h2 that does what a gRPC library never would."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.events: list[h2.events.Event] = []
        self.eof = False

    async def start(self) -> None:
        self.h2.initiate_connection()
        await self.flush()

    async def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            await self.stream.send_all(data)

    def open(self, path: str, *metadata: tuple[str, str]) -> int:
        stream_id = self.h2.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "127.0.0.1"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("x-ydb-database", DATABASE),
            *metadata,
        ]
        self.h2.send_headers(stream_id, headers)
        return stream_id

    async def read_for(self, seconds: float) -> None:
        """Process whatever the server sends for ``seconds`` (or until it closes)."""
        with trio.move_on_after(seconds):
            while not self.eof:
                try:
                    data = await self.stream.receive_some(1 << 20)
                except trio.BrokenResourceError:
                    data = b""
                if not data:
                    self.eof = True
                    return
                self.events += self.h2.receive_data(data)
                await self.flush()

    def window(self, stream_id: int) -> int:
        return min(self.h2.local_flow_control_window(stream_id), self.h2.max_outbound_frame_size)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("grpc-hard") / "data") as process:
        yield process


async def test_unfinished_messages_are_bounded_per_connection(node: NodeProcess) -> None:
    """8 streams each sending most of a 40 MiB message that never completes: 320 MiB the
    node would buffer if it kept crediting bytes of unfinished messages."""
    before = node.rss()
    size = 40 * MIB
    async with await trio.open_tcp_stream("127.0.0.1", node.grpc_port) as stream:
        client = RawClient(stream)
        await client.start()
        await client.read_for(0.5)
        streams = {client.open(STREAM_WRITE): 0 for _ in range(8)}
        for sid in streams:
            # The prefix announces the whole message; its last byte never comes.
            client.h2.send_data(sid, b"\x00" + size.to_bytes(4, "big"))
        sent = 0
        while True:
            progressed = False
            for sid, done in streams.items():
                chunk = min(client.window(sid), size - 1 - done)
                if chunk > 0:
                    client.h2.send_data(sid, bytes(chunk))
                    streams[sid] = done + chunk
                    sent += chunk
                    progressed = True
            await client.flush()
            if not progressed:
                # Wait for the server's WINDOW_UPDATEs; none for a while means it is full.
                events = len(client.events)
                await client.read_for(2.0)
                if len(client.events) == events or client.eof:
                    break
            else:
                await client.read_for(0.01)
        grown = node.rss() - before
        print(f"sent {sent // MIB} MiB, node RSS grew {grown // MIB} MiB")
        assert not client.eof
        # Bounded by the largest message plus the connection window (32 MiB), not by 320 MiB.
        assert sent < 150 * MIB, sent
        assert grown < 150 * MIB, grown
        # The attacking connection is still open while a real client is served.
        await trio.to_thread.run_sync(sdk_served, node)


@pytest.fixture(scope="module")
def auth_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    base = tmp_path_factory.mktemp("grpc-auth")
    users = base / "users"
    add_users(users)
    with NodeProcess(base / "data", "--users", str(users), "--superusers", "admin") as process:
        yield process


async def test_unary_call_without_token_is_refused_before_its_body(
    auth_node: NodeProcess,
) -> None:
    """The answer comes from the headers: the 50 MB body announced is never awaited."""
    async with await trio.open_tcp_stream("127.0.0.1", auth_node.grpc_port) as stream:
        client = RawClient(stream)
        await client.start()
        await client.read_for(0.5)
        sid = client.open(DESCRIBE_TOPIC)
        client.h2.send_data(sid, b"\x00" + (50_000_000).to_bytes(4, "big"))
        client.h2.send_data(sid, bytes(MIB))
        await client.flush()
        with trio.fail_after(20):
            while not any(isinstance(e, h2.events.StreamEnded) for e in client.events):
                await client.read_for(0.5)
                assert not client.eof
        body = b"".join(e.data for e in client.events if isinstance(e, h2.events.DataReceived))
        trailers = next(e for e in client.events if isinstance(e, h2.events.TrailersReceived))
        assert (b"grpc-status", b"0") in trailers.headers
        response = ydb_topic_pb2.DescribeTopicResponse.FromString(body[5:])
        assert response.operation.status == UNAUTHORIZED
        # The rest of the request is refused, not read (RFC 9113 §8.1).
        await client.read_for(0.5)
        resets = [e for e in client.events if isinstance(e, h2.events.StreamReset)]
        assert [(r.stream_id, r.error_code) for r in resets] == [(sid, 0)]
    await trio.to_thread.run_sync(sdk_served, auth_node, "alice")


def flood_pings(node: NodeProcess, count: int) -> int:
    """Send up to ``count`` PINGs and read nothing; returns how many the node took before
    it stopped reading (or all of them)."""
    block = PingFrame(0, opaque_data=b"12345678").serialize() * 10_000
    sent = 0
    with socket.create_connection(("127.0.0.1", node.grpc_port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(PREFACE + SettingsFrame(0).serialize())
        sock.settimeout(3.0)
        try:
            while sent < count:
                sock.sendall(block)
                sent += 10_000
        except TimeoutError:
            pass  # the node stopped reading
        return sent


async def test_peer_that_never_reads_cannot_queue_replies(node: NodeProcess) -> None:
    """2 M PINGs, never reading a PING ACK: 34 MB of replies the node would queue."""
    before = node.rss()
    sent = await trio.to_thread.run_sync(flood_pings, node, 2_000_000)
    grown = node.rss() - before
    print(f"sent {sent} PINGs, node RSS grew {grown // MIB} MiB")
    assert grown < 16 * MIB, grown
    await trio.to_thread.run_sync(sdk_served, node)


async def _closed_by_node(stream: trio.abc.Stream) -> bytes:
    """Everything the node sends until it closes the connection (bounded wait)."""
    received = bytearray()
    with trio.fail_after(60):
        while True:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return bytes(received)
            if not data:
                return bytes(received)
            received += data


async def test_idle_connection_is_closed(tmp_path: Path) -> None:
    with NodeProcess(tmp_path / "data", "--grpc-max-connection-idle-ms", "300") as node:
        async with await trio.open_tcp_stream("127.0.0.1", node.grpc_port) as stream:
            await stream.send_all(PREFACE + SettingsFrame(0).serialize())
            received = await _closed_by_node(stream)
        goaways = [f for f in frames_in(received) if isinstance(f, GoAwayFrame)]
        assert [g.error_code for g in goaways] == [0]  # NO_ERROR, then the close
        assert node.log().count("idle for") == 1
        # The SDK's connection may be closed between calls too; it reconnects and is served.
        await trio.to_thread.run_sync(sdk_served, node)
        await trio.to_thread.run_sync(sdk_served, node)


def sdk_served_tls(node: NodeProcess, ca_file: Path) -> None:
    config = ydb.DriverConfig(
        endpoint=f"grpcs://{node.grpc_address}",
        database=DATABASE,
        root_certificates=ca_file.read_bytes(),
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=20, fail_fast=True)
        assert driver.scheme_client.list_directory(DATABASE).name is not None
    finally:
        driver.stop(timeout=10)


async def test_tls_handshake_never_finished_loses_its_connection(tmp_path: Path) -> None:
    """Slowloris on the gRPC TLS port: connections that say nothing, or half a
    ClientHello, are closed by the node after the handshake timeout."""
    cert_file, key_file, ca_file = write_tls_files(tmp_path)
    flags = ["--tls-cert", str(cert_file), "--tls-key", str(key_file)]
    with NodeProcess(tmp_path / "data", *flags, "--tls-handshake-timeout-ms", "300") as node:
        silent = [await trio.open_tcp_stream("127.0.0.1", node.grpc_port) for _ in range(10)]
        # The start of a TLS record carrying a ClientHello, and then nothing.
        half = await trio.open_tcp_stream("127.0.0.1", node.grpc_port)
        await half.send_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        for stream in [*silent, half]:
            async with stream:
                assert await _closed_by_node(stream) == b""
        # One line per connection (the start-up probe of NodeProcess makes one more).
        assert node.log().count("TLS handshake with") >= 11
        await trio.to_thread.run_sync(sdk_served_tls, node, ca_file)


@pytest.mark.slow
async def test_kafka_tls_handshake_never_finished_loses_its_connection(tmp_path: Path) -> None:
    """The same slowloris on the Kafka TLS listener, whose handshake timeout is a fixed
    10 s (hence slow); a TLS Kafka client is served afterwards."""
    cert_file, key_file, ca_file = write_tls_files(tmp_path)
    flags = ["--kafka-tls-cert", str(cert_file), "--kafka-tls-key", str(key_file)]
    with NodeProcess(tmp_path / "data", *flags) as node:
        silent = [await trio.open_tcp_stream("127.0.0.1", node.kafka_port) for _ in range(10)]
        for stream in silent:
            async with stream:
                assert await _closed_by_node(stream) == b""
        assert node.log().count("TLS handshake with") >= 10
        context = ssl.create_default_context(cafile=str(ca_file))
        tcp = await trio.open_tcp_stream("127.0.0.1", node.kafka_port)
        async with trio.SSLStream(tcp, context, server_hostname="localhost") as tls:
            # ApiVersions v0, correlation id 7: answered over the finished handshake.
            request = b"\x00\x12\x00\x00\x00\x00\x00\x07\x00\x04test"
            await tls.send_all(len(request).to_bytes(4, "big") + request)
            with trio.fail_after(20):
                reply = await tls.receive_some(65536)
            assert reply[4:8] == (7).to_bytes(4, "big")
