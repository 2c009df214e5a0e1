"""Several endpoints: parsing ``a,b,c``, and the connection keeper going round the pool
(each endpoint tried in turn, fail_fast giving up only after every one refused)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest
import trio
import trio.testing

from vdl.client import ClientConfig, ConnectError, Connection, Endpoint
from vdl.net.grpc import GrpcChannel


def test_endpoint_lists_parse_in_order_without_duplicates() -> None:
    parsed = Endpoint.parse_list("grpc://a:1, b:2,grpc://a:1")
    assert parsed == (Endpoint("a", 1, False), Endpoint("b", 2, False))
    assert Endpoint.parse_list(["a:1,b:2", "grpcs://c:3"])[-1] == Endpoint("c", 3, True)


@pytest.mark.parametrize("text", ["", " , ", "a:1,http://b:2", "a:1,b"])
def test_bad_endpoint_lists_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        Endpoint.parse_list(text)


async def test_fail_fast_tries_every_endpoint_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first, *more = Endpoint.parse_list("a:1,b:2,c:3")
    tried: list[Endpoint] = []
    holder: list[Connection] = []

    def refused() -> AbstractAsyncContextManager[GrpcChannel]:
        tried.append(holder[0].endpoint)
        raise ConnectionRefusedError(111, "Connection refused")

    config = ClientConfig(endpoint=first, more_endpoints=tuple(more), fail_fast=True)
    connection = Connection(config, channel_factory=refused)
    holder.append(connection)
    async with trio.open_nursery() as nursery:
        await nursery.start(connection.run)
        with pytest.raises(ConnectError, match="any of grpc://a:1, grpc://b:2, grpc://c:3"):
            await connection.channel()
        await connection.aclose()
    assert tried == [first, *more]


async def test_the_keeper_goes_round_the_pool_until_one_answers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first, *more = Endpoint.parse_list("a:1,b:2,c:3")
    tried: list[Endpoint] = []
    holder: list[Connection] = []

    def refused() -> AbstractAsyncContextManager[GrpcChannel]:
        tried.append(holder[0].endpoint)
        raise ConnectionRefusedError(111, "Connection refused")

    config = ClientConfig(endpoint=first, more_endpoints=tuple(more))
    connection = Connection(config, channel_factory=refused)
    holder.append(connection)
    async with trio.open_nursery() as nursery:
        await nursery.start(connection.run)
        with pytest.raises(ConnectError):
            await connection.channel(timeout=30)
        await connection.aclose()
    # Round after round, in order, never stuck on one endpoint.
    assert len(tried) >= 9
    assert tried[:9] == [first, *more] * 3
