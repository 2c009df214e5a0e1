"""An in-memory client-server pair: the real server and client code over memory streams,
so protocol behaviour is tested without sockets (and under MockClock)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from .client import GrpcChannel
from .connection import GrpcSettings
from .driver import unwrap_single_exception
from .server import GrpcServer


@asynccontextmanager
async def open_memory_channel(
    server: GrpcServer,
    *,
    settings: GrpcSettings | None = None,
    lockstep: bool = False,
) -> AsyncIterator[GrpcChannel]:
    """A client channel connected to ``server`` through a memory stream pair.

    ``lockstep`` uses unbuffered streams, where every send waits for the peer's read; by
    default sends never block, so only HTTP/2 flow control pushes back.
    """
    # Imported here: trio.testing brings in pytest, which a node has no use for.
    import trio.testing

    pair = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
    client_stream: trio.abc.Stream
    server_stream: trio.abc.Stream
    client_stream, server_stream = pair()
    with unwrap_single_exception():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.serve_connection, server_stream, "memory")
            try:
                async with GrpcChannel.over_stream(client_stream, settings=settings) as channel:
                    yield channel
            finally:
                # The server side ends when the client closes; do not wait on a hung handler.
                nursery.cancel_scope.cancel()
