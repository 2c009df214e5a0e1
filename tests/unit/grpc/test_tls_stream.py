"""TlsStream: Trio's stream contract, peers using the stdlib ``ssl`` module (a blocking
``SSLSocket`` on real loopback sockets, or a hand-driven ``SSLObject`` over memory streams
so a test decides exactly which ciphertext bytes arrive when), cancellation mid-receive,
close/EOF, and the gRPC server's handling of bad handshakes."""

from __future__ import annotations

import random
import select
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest
import trio
import trio.testing
import trustme

from tests.unit.grpc.grpc_handlers import make_server
from vdl.net.grpc import GrpcChannel, GrpcError, GrpcServer, StatusCode
from vdl.net.grpc.tls import client_ssl_context, server_ssl_context
from vdl.net.grpc.tls_stream import TlsStream

T = TypeVar("T")
RECORD = 16 * 1024


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_context(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    base = tmp_path_factory.mktemp("tls-stream")
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file = base / "cert.pem", base / "key.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(str(cert_file), append=True)
    cert.private_key_pem.write_to_path(str(key_file))
    return server_ssl_context(cert_file, key_file)


@pytest.fixture(scope="module")
def client_context(ca: trustme.CA) -> ssl.SSLContext:
    return client_ssl_context(ca_data=ca.cert_pem.bytes().decode())


async def handshake_pair(
    left: trio.abc.Stream,
    right: trio.abc.Stream,
    server_context: ssl.SSLContext,
    client_context: ssl.SSLContext,
) -> tuple[TlsStream, TlsStream]:
    server = TlsStream(left, server_context, server_side=True)
    client = TlsStream(right, client_context, server_side=False, server_hostname="localhost")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        nursery.start_soon(client.do_handshake)
    return server, client


class BioPeer:
    """A stdlib ``SSLObject`` speaking TLS over a raw Trio stream, driven by hand."""

    def __init__(
        self, stream: trio.abc.Stream, context: ssl.SSLContext, *, server_side: bool = False
    ) -> None:
        self.stream = stream
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = context.wrap_bio(
            self.incoming,
            self.outgoing,
            server_side=server_side,
            server_hostname=None if server_side else "localhost",
        )

    async def handshake(self) -> None:
        while True:
            try:
                self.obj.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            await self.flush()
            if done:
                return
            await self.pull()

    async def flush(self) -> None:
        if self.outgoing.pending:
            await self.stream.send_all(self.outgoing.read())

    async def pull(self) -> bool:
        data = await self.stream.receive_some()
        if data:
            self.incoming.write(data)
        else:
            self.incoming.write_eof()
        return bool(data)

    def encrypt(self, *messages: bytes) -> bytes:
        """Ciphertext for ``messages``; each ``write`` ends in its own record(s)."""
        for message in messages:
            self.obj.write(message)
        return self.outgoing.read()

    async def read_exactly(self, size: int) -> bytes:
        out = bytearray()
        while len(out) < size:
            try:
                out += self.obj.read(size - len(out))
            except ssl.SSLWantReadError:
                await self.flush()
                assert await self.pull(), "EOF before all the data came"
        return bytes(out)


@asynccontextmanager
async def server_and_peer(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> AsyncIterator[tuple[TlsStream, BioPeer, trio.abc.Stream]]:
    """A server TlsStream and a hand-driven client over memory streams; also yields the
    client's raw stream, for sending ciphertext piecemeal."""
    left, right = trio.testing.memory_stream_pair()
    server = TlsStream(left, server_context, server_side=True)
    peer = BioPeer(right, client_context)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        nursery.start_soon(peer.handshake)
    yield server, peer, right
    await server.aclose()
    await right.aclose()


async def in_thread(fn: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(fn)


@asynccontextmanager
async def tcp_server(
    handler: Callable[[trio.SocketStream], Awaitable[object]],
) -> AsyncIterator[int]:
    """A loopback listener calling ``handler`` per connection; stopped on exit."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        yield int(listeners[0].socket.getsockname()[1])
        nursery.cancel_scope.cancel()


# ---------------------------------------------------------------------- the contract


async def test_conforms_to_the_trio_stream_contract(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    async def memory_pair() -> tuple[TlsStream, TlsStream]:
        left, right = trio.testing.memory_stream_pair()
        return await handshake_pair(left, right, server_context, client_context)

    async def lockstep_pair() -> tuple[TlsStream, TlsStream]:
        left, right = trio.testing.lockstep_stream_pair()
        return await handshake_pair(left, right, server_context, client_context)

    await trio.testing.check_two_way_stream(memory_pair, lockstep_pair)


async def test_io_before_the_handshake_is_a_bug(server_context: ssl.SSLContext) -> None:
    left, right = trio.testing.memory_stream_pair()
    stream = TlsStream(left, server_context, server_side=True)
    with pytest.raises(RuntimeError, match="handshake"):
        await stream.receive_some()
    with pytest.raises(RuntimeError, match="handshake"):
        await stream.send_all(b"x")
    await stream.aclose()
    await right.aclose()


# ---------------------------------------------------------------------- batching


async def test_one_receive_returns_every_complete_record(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    async with server_and_peer(server_context, client_context) as (server, peer, raw):
        messages = [bytes([n]) * 1000 for n in range(100)] + [b"y" * (5 * RECORD)]
        await raw.send_all(peer.encrypt(*messages))
        data = await server.receive_some()
        # 105 records (~190 KiB, within one socket read) in, one buffer out.
        assert data == b"".join(messages)


async def test_max_bytes_caps_and_keeps_the_rest(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    async with server_and_peer(server_context, client_context) as (server, peer, raw):
        payload = bytes(range(256)) * 400
        await raw.send_all(peer.encrypt(payload))
        got = bytearray()
        while len(got) < len(payload):
            chunk = await server.receive_some(7000)
            assert 0 < len(chunk) <= 7000
            got += chunk
        assert got == payload


async def test_record_split_across_reads(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    async with server_and_peer(server_context, client_context) as (server, peer, raw):
        payload = b"q" * (3 * RECORD + 100)
        ciphertext = peer.encrypt(payload)
        got = bytearray()
        for i in range(0, len(ciphertext), 3333):
            await raw.send_all(ciphertext[i : i + 3333])
            # Take whatever whole records have arrived, without waiting for more.
            with trio.move_on_after(0.01):
                while len(got) < len(payload):
                    got += await server.receive_some()
        assert got == payload


async def test_large_messages_both_ways_with_a_stdlib_socket_client(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    rng = random.Random(7)
    payload = rng.randbytes(8 * 1024 * 1024)

    async def echo(raw: trio.SocketStream) -> None:
        tls = TlsStream(raw, server_context, server_side=True)
        await tls.do_handshake()
        assert tls.selected_alpn_protocol() == "h2"
        while data := await tls.receive_some():
            await tls.send_all(data)
        await tls.aclose()

    def client(port: int) -> bytes:
        # One thread sends and receives: an SSL connection must not be used from two
        # threads at once (OpenSSL's SSL objects are not thread-safe), so instead of a
        # reader thread the socket is non-blocking and select() says which way can move.
        with socket.create_connection(("127.0.0.1", port)) as sock:
            with client_context.wrap_socket(sock, server_hostname="localhost") as tls:
                assert tls.selected_alpn_protocol() == "h2"
                tls.setblocking(False)
                received = bytearray()
                view = memoryview(payload)
                offset = 0
                chunk: memoryview | None = None
                deadline = time.monotonic() + 300
                while len(received) < len(payload):
                    assert time.monotonic() < deadline, "the echo stopped"
                    if chunk is None and offset < len(view):
                        size = rng.choice((1, 100, 16 * 1024, 65536, 300_000))
                        chunk = view[offset : offset + size]
                    select.select([tls], [tls] if chunk is not None else [], [], 1.0)
                    if chunk is not None:
                        try:
                            sent = tls.send(chunk)
                        except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                            sent = 0
                        offset += sent
                        chunk = chunk[sent:] if sent < len(chunk) else None
                    try:
                        while True:
                            data = tls.recv(1 << 20)
                            assert data, "the echo closed early"
                            received.extend(data)
                            if not tls.pending():
                                break
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        pass
                tls.setblocking(True)
                tls.unwrap()  # close_notify both ways: a clean end
                return bytes(received)

    async with tcp_server(echo) as port:
        assert await in_thread(lambda: client(port)) == payload


async def test_many_small_records_from_a_stdlib_socket_client(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    reads: list[int] = []
    done = trio.Event()
    sent = threading.Event()

    async def count(raw: trio.SocketStream) -> None:
        tls = TlsStream(raw, server_context, server_side=True)
        await tls.do_handshake()
        await trio.to_thread.run_sync(sent.wait)
        while data := await tls.receive_some():
            reads.append(len(data))
        await tls.aclose()
        done.set()

    def client(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            with client_context.wrap_socket(sock, server_hostname="localhost") as tls:
                for _ in range(2000):
                    tls.sendall(b"m" * 10)  # one record each
                sent.set()
                tls.unwrap()

    async with tcp_server(count) as port:
        await in_thread(lambda: client(port))
        await done.wait()
    assert sum(reads) == 20_000
    # Everything was queued before the first read: far fewer reads than records.
    assert len(reads) < 50


# ---------------------------------------------------------------------- cancellation


async def test_cancelled_receive_mid_record_loses_nothing(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    async with server_and_peer(server_context, client_context) as (server, peer, raw):
        payload = b"c" * (2 * RECORD)
        ciphertext = peer.encrypt(payload)
        await raw.send_all(ciphertext[: RECORD // 2])  # half a record: nothing to return
        with trio.move_on_after(0.05) as scope:
            await server.receive_some()
        assert scope.cancelled_caught
        await raw.send_all(ciphertext[RECORD // 2 :])
        got = bytearray()
        while len(got) < len(payload):
            got += await server.receive_some()
        assert got == payload
        # And the stream still works both ways.
        await server.send_all(b"still here")
        assert await peer.read_exactly(10) == b"still here"


async def test_random_cancellations_of_receives(
    server_context: ssl.SSLContext,
    client_context: ssl.SSLContext,
    autojump_clock: trio.testing.MockClock,
) -> None:
    rng = random.Random(11)
    async with server_and_peer(server_context, client_context) as (server, peer, raw):
        messages = [rng.randbytes(rng.choice((1, 500, RECORD, 3 * RECORD))) for _ in range(60)]
        ciphertext = peer.encrypt(*messages)
        expected = b"".join(messages)
        cancelled = 0

        async def feed() -> None:
            offset = 0
            while offset < len(ciphertext):
                size = rng.randint(1, 40_000)
                await raw.send_all(ciphertext[offset : offset + size])
                offset += size
                await trio.sleep(rng.random())

        got = bytearray()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(feed)
            while len(got) < len(expected):
                with trio.move_on_after(rng.random()) as scope:
                    got += await server.receive_some(rng.choice((None, 5000)))
                cancelled += scope.cancelled_caught
        assert got == expected
        assert cancelled > 10


async def test_cancelled_send_breaks_the_stream(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    left, right = trio.testing.lockstep_stream_pair()
    server, client = await handshake_pair(left, right, server_context, client_context)
    # Nobody reads the client side, so the lockstep send blocks part-way.
    with trio.move_on_after(0.05) as scope:
        await server.send_all(b"x" * 100_000)
    assert scope.cancelled_caught
    with pytest.raises(trio.BrokenResourceError):
        await server.send_all(b"more")
    await server.aclose()
    await client.aclose()


# ---------------------------------------------------------------------- close and EOF


async def test_aclose_sends_close_notify(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    async with server_and_peer(server_context, client_context) as (server, peer, _):
        await server.send_all(b"last words")
        await server.aclose()
        assert await peer.read_exactly(10) == b"last words"
        while await peer.pull():
            pass
        # A clean end (close_notify), not SSLEOFError for a merely dropped connection.
        assert peer.obj.read(1) == b""
        with pytest.raises(trio.ClosedResourceError):
            await server.receive_some()
        with pytest.raises(trio.ClosedResourceError):
            await server.send_all(b"x")


async def test_peer_close_notify_is_eof(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    async with server_and_peer(server_context, client_context) as (server, peer, raw):
        with pytest.raises(ssl.SSLWantReadError):
            peer.obj.unwrap()  # sends close_notify; the answer has not come yet
        await raw.send_all(peer.outgoing.read())
        assert await server.receive_some() == b""
        assert await server.receive_some() == b""  # EOF stays EOF


async def test_data_then_close_notify_in_one_read(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    async with server_and_peer(server_context, client_context) as (server, peer, raw):
        ciphertext = peer.encrypt(b"tail")
        with pytest.raises(ssl.SSLWantReadError):
            peer.obj.unwrap()
        await raw.send_all(ciphertext + peer.outgoing.read())
        assert await server.receive_some() == b"tail"
        assert await server.receive_some() == b""


async def test_eof_without_close_notify_is_broken(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    async with server_and_peer(server_context, client_context) as (server, peer, raw):
        await raw.send_all(peer.encrypt(b"partial"))
        await raw.aclose()
        assert await server.receive_some() == b"partial"
        with pytest.raises(trio.BrokenResourceError):
            await server.receive_some()
        with pytest.raises(trio.BrokenResourceError):
            await server.send_all(b"x")


async def test_garbage_after_the_handshake_is_broken(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    async with server_and_peer(server_context, client_context) as (server, peer, raw):
        good = peer.encrypt(b"good")
        await raw.send_all(good + b"\x17\x03\x03\x00\x20" + b"\x00" * 32)
        assert await server.receive_some() == b"good"  # what came before still counts
        with pytest.raises(trio.BrokenResourceError):
            await server.receive_some()


# ---------------------------------------------------------------------- handshakes


async def test_plaintext_client_fails_the_handshake(server_context: ssl.SSLContext) -> None:
    left, right = trio.testing.memory_stream_pair()
    server = TlsStream(left, server_context, server_side=True)
    await right.send_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    with pytest.raises(trio.BrokenResourceError):
        await server.do_handshake()
    with pytest.raises(trio.BrokenResourceError):
        await server.receive_some()
    await server.aclose()
    await right.aclose()


async def test_untrusted_server_certificate_fails_the_client_handshake(
    server_context: ssl.SSLContext,
) -> None:
    stranger = client_ssl_context(ca_data=trustme.CA().cert_pem.bytes().decode())
    left, right = trio.testing.memory_stream_pair()
    server = TlsStream(left, server_context, server_side=True)
    client = TlsStream(right, stranger, server_side=False, server_hostname="localhost")
    outcomes: dict[str, BaseException | None] = {}

    async def run(name: str, stream: TlsStream) -> None:
        try:
            await stream.do_handshake()
            outcomes[name] = None
        except trio.BrokenResourceError as exc:
            outcomes[name] = exc
            await stream.aclose()  # the other side then sees EOF, not a hang

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "server", server)
        nursery.start_soon(run, "client", client)
    assert isinstance(outcomes["client"], trio.BrokenResourceError)
    assert isinstance(outcomes["client"].__cause__, ssl.SSLCertVerificationError)
    assert isinstance(outcomes["server"], trio.BrokenResourceError)
    await server.aclose()
    await client.aclose()


async def _mtls_exchange(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> tuple[bytes, list[str], dict[str, object] | None]:
    """The server greets a client; returns the greeting the client read, which sides
    failed, and the client certificate the server saw."""
    left, right = trio.testing.memory_stream_pair()
    server = TlsStream(left, server_context, server_side=True)
    client = TlsStream(right, client_context, server_side=False, server_hostname="localhost")
    failures: list[str] = []
    peer_cert: dict[str, object] | None = None

    async def serve() -> None:
        nonlocal peer_cert
        try:
            await server.do_handshake()
            peer_cert = dict(server.getpeercert() or {})
            await server.send_all(b"welcome")
        except trio.BrokenResourceError:
            failures.append("server")
        await server.aclose()

    async def connect() -> bytes:
        try:
            await client.do_handshake()
            # Under TLS 1.3 the client is done before the server has checked its
            # certificate: the server's alert shows up on the first read.
            return bytes(await client.receive_some())
        except trio.BrokenResourceError as exc:
            failures.append("client")
            assert "CERTIFICATE_REQUIRED" in repr(exc.__cause__).upper()
            return b""
        finally:
            await client.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        greeting = await connect()
    return greeting, sorted(failures), peer_cert


async def test_mutual_tls_names_the_client_and_refuses_one_without_a_certificate(
    ca: trustme.CA, tmp_path: Path, client_context: ssl.SSLContext
) -> None:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file, ca_file = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    ca.cert_pem.write_to_path(str(ca_file))
    strict = server_ssl_context(cert_file, key_file, client_ca_file=ca_file)
    alice = client_ssl_context(ca_data=ca.cert_pem.bytes().decode())
    ca.issue_cert("alice.example", common_name="alice").configure_cert(alice)

    greeting, failures, peer_cert = await _mtls_exchange(strict, alice)
    assert (greeting, failures) == (b"welcome", [])
    assert peer_cert is not None
    assert (("commonName", "alice"),) in peer_cert["subject"]  # type: ignore[operator]

    # No certificate: the server refuses and says why (its alert reaches the client).
    greeting, failures, _ = await _mtls_exchange(strict, client_context)
    assert (greeting, failures) == (b"", ["client", "server"])


@asynccontextmanager
async def grpc_tls_server(context: ssl.SSLContext) -> AsyncIterator[tuple[GrpcServer, int]]:
    server = make_server()
    server.ssl_context = context
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve, "127.0.0.1", 0)
        yield server, int(listeners[0].socket.getsockname()[1])
        await server.shutdown(grace=1)


def _raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a plain TCP connection and return all bytes until EOF."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = bytearray()
        while chunk := sock.recv(65536):
            received += chunk
        return bytes(received)


async def test_grpc_server_refuses_a_plaintext_client_and_keeps_serving(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    async with grpc_tls_server(server_context) as (_, port):
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"
        answer = await in_thread(lambda: _raw_exchange(port, preface))
        # At most a TLS alert record, then EOF: never an HTTP/2 frame.
        assert answer == b"" or answer[0] == 0x15
        async with GrpcChannel.connect("127.0.0.1", port, client_context) as channel:
            big = b"b" * 200_000
            assert await channel.unary("/test.Echo/Unary", big, timeout=10) == big


async def test_grpc_server_survives_a_client_that_speaks_http1_over_tls(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext, ca: trustme.CA
) -> None:
    http1 = ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())
    http1.set_alpn_protocols(["http/1.1"])

    def client(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            with http1.wrap_socket(sock, server_hostname="localhost") as tls:
                # No common protocol: OpenSSL completes the handshake without ALPN.
                assert tls.selected_alpn_protocol() is None
                tls.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
                received = bytearray()
                try:
                    while chunk := tls.recv(65536):
                        received += chunk
                except (ssl.SSLError, OSError):
                    pass
                return bytes(received)

    async with grpc_tls_server(server_context) as (_, port):
        answer = await in_thread(lambda: client(port))
        # h2 rejects the preface: our SETTINGS and a GOAWAY, never an HTTP/1.1 reply.
        assert not answer.startswith(b"HTTP/1.1")
        async with GrpcChannel.connect("127.0.0.1", port, client_context) as channel:
            assert await channel.unary("/test.Echo/Unary", b"ok", timeout=10) == b"ok"


async def test_grpc_client_refuses_a_server_without_alpn_h2(
    ca: trustme.CA, tmp_path: Path, client_context: ssl.SSLContext
) -> None:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    http1_server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(http1_server)
    http1_server.set_alpn_protocols(["http/1.1"])

    async def serve(raw: trio.SocketStream) -> None:
        tls = TlsStream(raw, http1_server, server_side=True)
        try:
            await tls.do_handshake()
            await tls.receive_some()
        except trio.BrokenResourceError:
            pass
        finally:
            await tls.aclose()

    async with tcp_server(serve) as port:
        with pytest.raises(GrpcError) as info:
            async with GrpcChannel.connect("127.0.0.1", port, client_context):
                pass
        assert info.value.status is StatusCode.UNAVAILABLE


async def test_grpc_64k_messages_over_tls(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> None:
    async with grpc_tls_server(server_context) as (_, port):
        async with GrpcChannel.connect("127.0.0.1", port, client_context) as channel:
            messages = [bytes([n]) * 65536 for n in range(40)]
            async with channel.stream("/test.Echo/Stream") as call:

                async def send_all() -> None:
                    for message in messages:
                        await call.send(message)
                    await call.close_send()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(send_all)
                    assert [m async for m in call] == messages
