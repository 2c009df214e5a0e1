"""Our gRPC server against grpcio (a real client library) on 127.0.0.1, plaintext and TLS.

grpcio is synchronous here: each client call runs in a worker thread while the server runs
in the test's Trio loop. Every test stops its server before returning.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import grpc
import pytest
import trio
import trustme

from vdl.net.grpc import (
    GrpcChannel,
    GrpcError,
    GrpcServer,
    ServerContext,
    ServerStream,
    StatusCode,
    client_ssl_context,
    server_ssl_context,
)

T = TypeVar("T")
MAX = 64_000_000
OPTIONS = [
    ("grpc.max_receive_message_length", MAX),
    ("grpc.max_send_message_length", MAX),
    # Exercise our PING ACKs the way the YDB SDK does, just faster.
    ("grpc.keepalive_time_ms", 200),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
]


async def echo(request: bytes, context: ServerContext) -> bytes:
    if context.method.endswith("Meta"):
        database = dict(context.metadata).get("x-ydb-database", "")
        assert isinstance(database, str)
        context.set_trailing_metadata([("x-seen", database)])
        return database.encode()
    return request


async def echo_stream(stream: ServerStream, context: ServerContext) -> None:
    async for message in stream:
        await stream.send(message)


async def failing(request: bytes, context: ServerContext) -> bytes:
    context.abort(StatusCode.FAILED_PRECONDITION, "not today: ünïcode 50%")


def make_server(ssl_context: ssl.SSLContext | None = None) -> GrpcServer:
    server = GrpcServer(ssl_context=ssl_context)
    server.add_unary("/test.Echo/Unary", echo)
    server.add_unary("/test.Echo/Meta", echo)
    server.add_unary("/test.Echo/Fail", failing)
    server.add_stream("/test.Echo/Stream", echo_stream)
    return server


@asynccontextmanager
async def running(server: GrpcServer) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, "127.0.0.1", 0)
        try:
            yield server.ports[0]
        finally:
            await server.shutdown(grace=2)


async def in_thread(fn: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(fn)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls(ca: trustme.CA, tmp_path: Any) -> tuple[ssl.SSLContext, bytes]:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(str(cert_file), append=True)
    cert.private_key_pem.write_to_path(str(key_file))
    return server_ssl_context(cert_file, key_file), ca.cert_pem.bytes()


def exercise_grpcio(channel: Any) -> None:
    unary = channel.unary_unary("/test.Echo/Unary")
    assert unary(b"hello", timeout=10) == b"hello"
    assert unary(b"", timeout=10) == b""
    big = bytes(range(256)) * (10 * 4096)  # 10 MiB
    assert unary(big, timeout=30) == big

    meta = channel.unary_unary("/test.Echo/Meta")
    reply, call = meta.with_call(b"", metadata=[("x-ydb-database", "/local")], timeout=10)
    assert reply == b"/local"
    assert ("x-seen", "/local") in tuple(call.trailing_metadata())

    with pytest.raises(grpc.RpcError) as info:
        channel.unary_unary("/test.Echo/Fail")(b"", timeout=10)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.details() == "not today: ünïcode 50%"

    with pytest.raises(grpc.RpcError) as info:
        channel.unary_unary("/test.Echo/Missing")(b"", timeout=10)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED

    def requests() -> Iterator[bytes]:
        yield b"one"
        yield big
        yield b"three"

    stream = channel.stream_stream("/test.Echo/Stream")
    assert list(stream(requests(), timeout=30)) == [b"one", big, b"three"]


async def test_grpcio_client_plaintext() -> None:
    server = make_server()
    async with running(server) as port:

        def client() -> None:
            with grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel:
                exercise_grpcio(channel)

        await in_thread(client)


async def test_grpcio_client_tls(tls: tuple[ssl.SSLContext, bytes]) -> None:
    server_context, ca_pem = tls
    server = make_server(server_context)
    async with running(server) as port:

        def client() -> None:
            credentials = grpc.ssl_channel_credentials(root_certificates=ca_pem)
            with grpc.secure_channel(f"127.0.0.1:{port}", credentials, options=OPTIONS) as ch:
                exercise_grpcio(ch)

        await in_thread(client)


async def test_grpcio_keepalive_pings_are_acked() -> None:
    server = make_server()
    async with running(server) as port:

        def client() -> None:
            with grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel:
                unary = channel.unary_unary("/test.Echo/Unary")
                assert unary(b"a", timeout=10) == b"a"
                # Several keepalive periods: an unanswered PING would kill the channel.
                import time

                time.sleep(1.0)
                assert unary(b"b", timeout=10) == b"b"

        await in_thread(client)


async def test_grpcio_server_shutdown_drains_stream() -> None:
    server = make_server()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, "127.0.0.1", 0)
        port = server.ports[0]
        got_first = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def client() -> list[bytes]:
            with grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel:

                def requests() -> Iterator[bytes]:
                    yield b"before"
                    trio.from_thread.run_sync(got_first.set, trio_token=token)
                    # Give the server time to send GOAWAY before the next message.
                    import time

                    time.sleep(0.5)
                    yield b"after"

                stream = channel.stream_stream("/test.Echo/Stream")
                return list(stream(requests(), timeout=30))

        async def shutdown_when_streaming() -> None:
            await got_first.wait()
            await server.shutdown(grace=10)

        nursery.start_soon(shutdown_when_streaming)
        assert await in_thread(client) == [b"before", b"after"]


async def test_our_client_over_sockets(tls: tuple[ssl.SSLContext, bytes]) -> None:
    server_context, ca_pem = tls
    for context in (None, server_context):
        server = make_server(context)
        async with running(server) as port:
            client_context = client_ssl_context(ca_data=ca_pem.decode()) if context else None
            async with GrpcChannel.connect("127.0.0.1", port, client_context) as channel:
                big = b"z" * 10_000_000
                assert await channel.unary("/test.Echo/Unary", big, timeout=30) == big
                assert await channel.ping(timeout=5) >= 0
                with pytest.raises(GrpcError) as info:
                    await channel.unary("/test.Echo/Fail", b"")
                assert info.value.status is StatusCode.FAILED_PRECONDITION
