"""Unary and bidi calls over memory streams, through our server and our client."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from tests.unit.grpc.grpc_handlers import make_server
from vdl.net.grpc import (
    GrpcChannel,
    GrpcError,
    GrpcServer,
    GrpcSettings,
    ServerContext,
    StatusCode,
    open_memory_channel,
)


async def test_unary_round_trip() -> None:
    async with open_memory_channel(make_server()) as channel:
        assert await channel.unary("/test.Echo/Unary", b"hello") == b"hello"
        assert await channel.unary("/test.Echo/Unary", b"") == b""


async def test_bidi_round_trip() -> None:
    async with open_memory_channel(make_server()) as channel:
        async with channel.stream("/test.Echo/Stream") as call:
            for i in range(5):
                await call.send(b"m%d" % i)
                assert await call.receive() == b"m%d" % i
            await call.close_send()
            assert await call.receive() is None
            assert call.status is StatusCode.OK


async def test_metadata_status_and_trailers() -> None:
    seen: dict[str, object] = {}

    async def handler(request: bytes, context: ServerContext) -> bytes:
        seen["metadata"] = context.metadata
        seen["peer"] = context.peer
        context.set_trailing_metadata([("x-extra", "yes"), ("x-raw-bin", b"\x00\xff")])
        context.set_status(StatusCode.OK)
        return request[::-1]

    async def aborting(request: bytes, context: ServerContext) -> bytes:
        context.abort(StatusCode.NOT_FOUND, "no such topic: é 100%")

    server = GrpcServer()
    server.add_unary("/t.S/M", handler)
    server.add_unary("/t.S/Abort", aborting)
    async with open_memory_channel(server) as channel:
        async with channel.stream("/t.S/M", [("x-ydb-database", "/local")]) as call:
            await call.send(b"abc")
            await call.close_send()
            assert await call.receive() == b"cba"
            assert await call.receive() is None
            assert ("x-extra", "yes") in call.trailing_metadata
            assert ("x-raw-bin", b"\x00\xff") in call.trailing_metadata
        assert ("x-ydb-database", "/local") in seen["metadata"]  # type: ignore[operator]
        assert seen["peer"] == "memory"
        with pytest.raises(GrpcError) as info:
            await channel.unary("/t.S/Abort", b"")
        assert info.value.status is StatusCode.NOT_FOUND
        assert info.value.message == "no such topic: é 100%"


async def test_unknown_method_is_unimplemented() -> None:
    async with open_memory_channel(make_server()) as channel:
        with pytest.raises(GrpcError) as info:
            await channel.unary("/test.Echo/Nope", b"x")
        assert info.value.status is StatusCode.UNIMPLEMENTED
        # The connection is still fine.
        assert await channel.unary("/test.Echo/Unary", b"ok") == b"ok"


async def test_handler_exception_is_internal_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(request: bytes, context: ServerContext) -> bytes:
        raise ValueError("boom")

    server = make_server()
    server.add_unary("/t.S/Broken", broken)
    async with open_memory_channel(server) as channel:
        with caplog.at_level(logging.ERROR, logger="vdl.net.grpc"):
            with pytest.raises(GrpcError) as info:
                await channel.unary("/t.S/Broken", b"x")
        assert info.value.status is StatusCode.INTERNAL
        assert "boom" in info.value.message
        assert any("/t.S/Broken" in r.getMessage() for r in caplog.records)
        assert await channel.unary("/test.Echo/Unary", b"still") == b"still"


async def test_large_messages_both_ways() -> None:
    # Small windows and frames force many frames and many WINDOW_UPDATE round trips.
    settings = GrpcSettings(
        stream_window_size=65_535, connection_window_size=65_535, max_frame_size=16_384
    )
    server = GrpcServer(settings)
    server.add_unary("/t.S/Echo", make_server().methods["/test.Echo/Unary"].handler)  # type: ignore[arg-type]
    server.add_stream("/t.S/Stream", make_server().methods["/test.Echo/Stream"].handler)  # type: ignore[arg-type]
    payload = bytes(range(256)) * (5 * 4096)  # 5 MiB
    async with open_memory_channel(server, settings=settings) as channel:
        assert await channel.unary("/t.S/Echo", payload) == payload
        async with channel.stream("/t.S/Stream") as call:
            for size in (3_000_000, 1, 0, 200_000):
                await call.send(payload[:size])
                assert await call.receive() == payload[:size]
            await call.close_send()
            assert await call.receive() is None


async def test_max_message_size_exceeded_both_ways() -> None:
    settings = GrpcSettings(max_receive_message_size=1000, max_send_message_size=1000)
    server = GrpcServer(settings)

    async def big_reply(request: bytes, context: ServerContext) -> bytes:
        return b"x" * 2000

    server.add_unary("/t.S/Echo", make_server().methods["/test.Echo/Unary"].handler)  # type: ignore[arg-type]
    server.add_unary("/t.S/Big", big_reply)
    async with open_memory_channel(server) as channel:
        # The client (default 64 MB limit) sends more than the server accepts.
        with pytest.raises(GrpcError) as info:
            await channel.unary("/t.S/Echo", b"y" * 1001)
        assert info.value.status is StatusCode.RESOURCE_EXHAUSTED
        # The server's handler answers more than it may send.
        with pytest.raises(GrpcError) as info:
            await channel.unary("/t.S/Big", b"")
        assert info.value.status is StatusCode.RESOURCE_EXHAUSTED
        assert await channel.unary("/t.S/Echo", b"z" * 1000) == b"z" * 1000
    # A client with a small send limit refuses before anything is sent.
    async with open_memory_channel(make_server(), settings=settings) as channel:
        with pytest.raises(GrpcError) as info:
            await channel.unary("/test.Echo/Unary", b"q" * 1001)
        assert info.value.status is StatusCode.RESOURCE_EXHAUSTED
        assert await channel.unary("/test.Echo/Unary", b"q" * 10) == b"q" * 10


async def test_client_refuses_oversized_reply() -> None:
    server = GrpcServer()

    async def big_reply(request: bytes, context: ServerContext) -> bytes:
        return b"x" * 5000

    server.add_unary("/t.S/Big", big_reply)
    async with open_memory_channel(
        server, settings=GrpcSettings(max_receive_message_size=4096)
    ) as channel:
        with pytest.raises(GrpcError) as info:
            await channel.unary("/t.S/Big", b"")
        assert info.value.status is StatusCode.RESOURCE_EXHAUSTED


async def test_ping_round_trip() -> None:
    async with open_memory_channel(make_server()) as channel:
        rtt = await channel.ping(timeout=5)
        assert rtt >= 0


async def test_ping_times_out_without_ack(autojump_clock: trio.testing.MockClock) -> None:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with GrpcChannel.over_stream(client_stream) as channel:
        # Nobody reads the other end, so no ACK ever comes.
        with pytest.raises(TimeoutError):
            await channel.ping(timeout=10)
    await server_stream.aclose()
