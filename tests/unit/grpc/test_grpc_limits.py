"""Connection limits of the gRPC server, in memory on MockClock: a peer that never reads
what it is sent, and connections left idle."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing
from hyperframe.frame import GoAwayFrame, PingFrame, SettingsFrame

from tests.unit.grpc.grpc_handlers import make_server
from tests.unit.grpc.h2_frames import PREFACE, frames_in
from vdl.net.grpc import GrpcSettings, open_memory_channel
from vdl.net.grpc.driver import MAX_QUEUED_OUTGOING, WRITE_STALL_TIMEOUT


async def test_peer_that_never_reads_is_throttled_then_dropped(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # Lockstep: every byte the server writes waits for the client to read it, which it
    # never does, so its PING ACKs can only pile up in the server.
    client, server_side = trio.testing.lockstep_stream_pair()
    server = make_server()
    pings = PingFrame(0, opaque_data=b"12345678").serialize() * 10_000
    sent = 0

    async def flood() -> None:
        nonlocal sent
        await client.receive_some()  # the server's SETTINGS, and nothing after them
        await client.send_all(PREFACE + SettingsFrame(0).serialize())
        while True:
            await client.send_all(pings)
            sent += len(pings)

    with caplog.at_level(logging.WARNING, logger="vdl.net.grpc"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flood)
            with trio.fail_after(10 * WRITE_STALL_TIMEOUT):
                await server.serve_connection(server_side, "flooder")
            nursery.cancel_scope.cancel()
    # The server stopped reading once about MAX_QUEUED_OUTGOING of replies were queued
    # (a PING and its ACK are the same size), and dropped the peer after the stall.
    assert sent < 4 * MAX_QUEUED_OUTGOING
    stalls = [r for r in caplog.records if "read none of" in r.getMessage()]
    assert len(stalls) == 1


async def test_idle_connection_gets_goaway_and_is_closed(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    client, server_side = trio.testing.memory_stream_pair()
    server = make_server()
    server.idle_timeout = 60.0
    received = bytearray()
    with caplog.at_level(logging.INFO, logger="vdl.net.grpc"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.serve_connection, server_side, "idler")
            await client.send_all(PREFACE + SettingsFrame(0).serialize())
            with trio.fail_after(10 * 60):
                while data := await client.receive_some():
                    received += data
    goaways = [f for f in frames_in(bytes(received)) if isinstance(f, GoAwayFrame)]
    assert [g.error_code for g in goaways] == [0]
    assert sum("idle" in r.getMessage() for r in caplog.records) == 1


async def test_connection_with_an_open_call_is_not_idle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = make_server()
    server.idle_timeout = 60.0
    async with open_memory_channel(server) as channel:
        async with channel.stream("/test.Echo/Stream") as call:
            # Silent for ten idle periods, yet the call is open: the connection stays.
            await trio.sleep(600)
            await call.send(b"still here")
            assert await call.receive() == b"still here"
            await call.close_send()
            assert await call.receive() is None
        # A new call right away still works; the idle time counts from the last call.
        assert await channel.unary("/test.Echo/Unary", b"x") == b"x"


async def test_big_messages_both_ways_do_not_deadlock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Unbuffered streams, windows far above the queue cap, both sides sending at once:
    # if either stopped reading because of its own unsent DATA, both would block writing.
    big = GrpcSettings(stream_window_size=64 << 20, connection_window_size=64 << 20)
    server = make_server()
    server.settings = big
    message = b"m" * (4 * MAX_QUEUED_OUTGOING)
    echoed = 0
    async with open_memory_channel(server, settings=big, lockstep=True) as channel:
        async with channel.stream("/test.Echo/Stream") as call:

            async def send_all() -> None:
                for _ in range(6):
                    await call.send(message)
                await call.close_send()

            with trio.fail_after(WRITE_STALL_TIMEOUT / 2):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(send_all)
                    while (reply := await call.receive()) is not None:
                        assert reply == message
                        echoed += 1
    assert echoed == 6


async def test_client_waits_for_a_stream_slot(autojump_clock: trio.testing.MockClock) -> None:
    server = make_server()
    server.settings = GrpcSettings(max_concurrent_streams=2)
    async with open_memory_channel(server) as channel:
        # Until the server's SETTINGS arrive the client assumes 100 streams (RFC 9113's
        # recommended minimum); one call first makes sure they have.
        assert await channel.unary("/test.Echo/Unary", b"first") == b"first"
        results: list[bytes] = []

        async def one(i: int) -> None:
            results.append(await channel.unary("/test.Echo/Unary", bytes([i]), timeout=60))

        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(one, i)
        assert sorted(results) == [bytes([i]) for i in range(10)]
