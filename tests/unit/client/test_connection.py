"""Endpoint parsing, and the connection keeper: a dead channel (no PING answers) is noticed
and replaced, and the writer on it carries on over the new one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio
import trio.testing

from tests.unit.client.fake_topic_server import FakeTopicServer
from vdl.client import ClientConfig, ConnectError, Connection, Endpoint, Writer, WriterSettings
from vdl.net.grpc import GrpcChannel


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("grpc://127.0.0.1:2135", Endpoint("127.0.0.1", 2135, False)),
        ("grpcs://node.example:443", Endpoint("node.example", 443, True)),
        ("localhost:9000", Endpoint("localhost", 9000, False)),
        ("grpc://[::1]:2135/", Endpoint("::1", 2135, False)),
    ],
)
def test_endpoint_parses(text: str, expected: Endpoint) -> None:
    assert Endpoint.parse(text) == expected


def test_endpoint_round_trips() -> None:
    assert str(Endpoint.parse("grpcs://[::1]:5")) == "grpcs://[::1]:5"


@pytest.mark.parametrize(
    "text",
    ["http://h:1", "grpc://h", "grpc://h:0", "grpc://h:99999", "grpc://h:1/db", "grpc://:1"],
)
def test_bad_endpoints_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        Endpoint.parse(text)


@asynccontextmanager
async def silent_channel() -> AsyncIterator[GrpcChannel]:
    """A channel to a peer that never reads or answers: a hung node."""
    client_stream, _peer = trio.testing.memory_stream_pair()
    async with GrpcChannel.over_stream(client_stream) as channel:
        yield channel


async def test_a_dead_connection_is_detected_by_ping_and_replaced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeTopicServer()
    made: list[int] = []

    def factory() -> AbstractAsyncContextManager[GrpcChannel]:
        made.append(1)
        return silent_channel() if len(made) == 1 else fake.channel()

    config = ClientConfig(ping_interval=1.0, ping_timeout=2.0)
    async with Connection.open(config, channel_factory=factory) as connection:
        async with trio.open_nursery() as nursery:
            writer = Writer(connection, "t", WriterSettings(producer_id="p"))
            await nursery.start(writer.run)
            started = trio.current_time()
            [result] = await writer.write_with_ack(b"hello")
            # One ping interval plus one ping timeout, then the new channel.
            assert 2.0 < trio.current_time() - started < 10.0
            assert result.offset == 0
            await writer.close()
    assert connection.channels_opened == 2
    assert fake.log == [1]


async def test_fail_fast_reports_an_unreachable_endpoint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def refused() -> AbstractAsyncContextManager[GrpcChannel]:
        raise ConnectionRefusedError(111, "Connection refused")

    config = ClientConfig(fail_fast=True)
    async with Connection.open(config, channel_factory=refused) as connection:
        with pytest.raises(ConnectError, match="Connection refused"):
            await connection.channel()


async def test_channel_waits_up_to_its_timeout_while_reconnecting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def refused() -> AbstractAsyncContextManager[GrpcChannel]:
        raise ConnectionRefusedError(111, "Connection refused")

    async with Connection.open(ClientConfig(), channel_factory=refused) as connection:
        started = trio.current_time()
        with pytest.raises(ConnectError, match="cannot reach"):
            await connection.channel(timeout=5)
        assert trio.current_time() - started == pytest.approx(5)
