"""Back-pressure, cancellation, deadlines and graceful shutdown, in memory on MockClock."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from tests.unit.grpc.grpc_handlers import make_server
from vdl.net.grpc import (
    GrpcError,
    GrpcServer,
    GrpcSettings,
    ServerContext,
    ServerStream,
    StatusCode,
    open_memory_channel,
)

SMALL_WINDOWS = GrpcSettings(
    stream_window_size=65_535, connection_window_size=65_535, max_frame_size=16_384
)


async def test_slow_handler_back_pressures_the_client(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()
    received: list[int] = []

    async def slow(stream: ServerStream, context: ServerContext) -> None:
        await release.wait()
        async for message in stream:
            received.append(len(message))
        await stream.send(b"done")

    server = GrpcServer(SMALL_WINDOWS)
    server.add_stream("/t.S/Slow", slow)
    chunk = b"x" * 16_000
    async with open_memory_channel(server) as channel:
        async with channel.stream("/t.S/Slow") as call:
            sent = 0
            with trio.move_on_after(10):
                for _ in range(50):
                    await call.send(chunk)
                    sent += 1
            # 64 KiB of window holds 4 such messages; the 5th send cannot complete.
            assert 3 <= sent <= 5
            release.set()
            for _ in range(50 - sent):
                await call.send(chunk)
            await call.close_send()
            assert await call.receive() == b"done"
            assert await call.receive() is None
    # The send that was cancelled while blocked had already been queued, so it still went.
    assert received == [16_000] * 51


async def test_server_send_blocks_on_slow_client(autojump_clock: trio.testing.MockClock) -> None:
    progress: list[int] = []

    async def firehose(stream: ServerStream, context: ServerContext) -> None:
        for i in range(40):
            await stream.send(b"y" * 16_000)
            progress.append(i)

    server = GrpcServer()
    server.add_stream("/t.S/Fire", firehose)
    async with open_memory_channel(server, settings=SMALL_WINDOWS) as channel:
        async with channel.stream("/t.S/Fire") as call:
            await call.close_send()
            await trio.sleep(10)
            # The client reads nothing, so the server is stuck after about one window.
            assert 3 <= len(progress) <= 5
            count = 0
            async for message in call:
                assert len(message) == 16_000
                count += 1
            assert count == 40


async def test_rst_stream_cancels_handler(autojump_clock: trio.testing.MockClock) -> None:
    started = trio.Event()
    cancelled = trio.Event()

    async def forever(stream: ServerStream, context: ServerContext) -> None:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.set()
            raise

    server = make_server()
    server.add_stream("/t.S/Forever", forever)
    async with open_memory_channel(server) as channel:
        async with channel.stream("/t.S/Forever") as call:
            await call.send(b"hi")
            await started.wait()
            await call.cancel()
        with trio.fail_after(5):
            await cancelled.wait()
        assert await channel.unary("/test.Echo/Unary", b"alive") == b"alive"


async def test_deadline_exceeded(autojump_clock: trio.testing.MockClock) -> None:
    seen_deadline: list[float | None] = []
    cancelled = trio.Event()

    async def slow(request: bytes, context: ServerContext) -> bytes:
        seen_deadline.append(context.time_remaining())
        try:
            await trio.sleep(3600)
        finally:
            cancelled.set()
        return b""

    server = GrpcServer()
    server.add_unary("/t.S/Slow", slow)
    async with open_memory_channel(server) as channel:
        # Client-side expiry.
        start = trio.current_time()
        with pytest.raises(GrpcError) as info:
            await channel.unary("/t.S/Slow", b"", timeout=2.5)
        assert info.value.status is StatusCode.DEADLINE_EXCEEDED
        assert trio.current_time() - start == pytest.approx(2.5)
        assert seen_deadline[0] == pytest.approx(2.5)
        await cancelled.wait()

        # The server's own answer, with the client not enforcing the deadline itself.
        async with channel.stream("/t.S/Slow", timeout=1.0) as call:
            call.deadline = math.inf
            await call.send(b"")
            await call.close_send()
            with pytest.raises(GrpcError) as info:
                await call.receive()
            assert info.value.status is StatusCode.DEADLINE_EXCEEDED
            assert trio.current_time() - start == pytest.approx(3.5)


async def test_goaway_drains_in_flight_and_refuses_new(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()
    in_handler = trio.Event()

    async def waits(stream: ServerStream, context: ServerContext) -> None:
        in_handler.set()
        await release.wait()
        async for message in stream:
            await stream.send(message * 2)

    server = make_server()
    server.add_stream("/t.S/Wait", waits)
    async with trio.open_nursery() as nursery:
        async with open_memory_channel(server) as channel:
            async with channel.stream("/t.S/Wait") as call:
                await call.send(b"ab")
                await in_handler.wait()
                nursery.start_soon(server.shutdown, 60.0)
                while not channel.goaway_received:
                    await trio.sleep(0.01)
                with pytest.raises(GrpcError) as info:
                    await channel.unary("/test.Echo/Unary", b"late")
                assert info.value.status is StatusCode.UNAVAILABLE
                release.set()
                assert await call.receive() == b"abab"
                await call.send(b"c")
                assert await call.receive() == b"cc"
                await call.close_send()
                assert await call.receive() is None
                assert call.status is StatusCode.OK


async def test_shutdown_grace_cancels_stuck_calls(autojump_clock: trio.testing.MockClock) -> None:
    server = make_server()
    async with open_memory_channel(server) as channel:
        async with trio.open_nursery() as nursery:

            async def call_sleep() -> None:
                with pytest.raises(GrpcError) as info:
                    await channel.unary("/test.Echo/Sleep", b"")
                assert info.value.status in (StatusCode.CANCELLED, StatusCode.UNAVAILABLE)

            nursery.start_soon(call_sleep)
            await trio.sleep(1)
            start = trio.current_time()
            await server.shutdown(grace=5)
            assert trio.current_time() - start == pytest.approx(5)


async def test_error_raised_with_a_cancellation_ends_only_that_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started = trio.Event()

    async def fails_when_cancelled(stream: ServerStream, context: ServerContext) -> None:
        async def child() -> None:
            try:
                await trio.sleep_forever()
            finally:
                # Cleanup that fails while the call is being cancelled: the handler's
                # nursery then raises a group of Cancelled and this error.
                raise ValueError("cleanup failed")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
            started.set()
            await trio.sleep_forever()

    server = GrpcServer()
    server.add_stream("/t.S/Fragile", fails_when_cancelled)
    server.add_unary("/t.S/Echo", lambda request, context: _echo(request))
    async with open_memory_channel(server) as channel:
        async with channel.stream("/t.S/Fragile") as call:
            await call.send(b"x")
            await started.wait()
            await call.cancel()
        # The connection, and the server, still serve the next call.
        assert await channel.unary("/t.S/Echo", b"again") == b"again"


async def _echo(request: bytes) -> bytes:
    return request
