"""The entry point: ``async with connect(...) as client`` gives writers, readers and admin
calls sharing one connection, with every background task inside the ``async with``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import trio

from vdl.client.admin import Admin
from vdl.client.connection import (
    DEFAULT_DATABASE,
    DEFAULT_ENDPOINT,
    ChannelFactory,
    ClientConfig,
    Connection,
    Endpoint,
)
from vdl.client.reader import Reader, ReaderSettings, StartFrom, open_reader
from vdl.client.writer import Writer, WriterSettings, open_writer


class Client:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.admin = Admin(connection)

    def writer(
        self, topic: str, settings: WriterSettings | None = None
    ) -> AbstractAsyncContextManager[Writer]:
        """``async with client.writer(topic) as w``: closed (acks awaited) on exit."""
        return open_writer(self.connection, topic, settings)

    def reader(
        self,
        topic: str,
        consumer: str | None,
        *,
        start_from: StartFrom = None,
        partitions: tuple[int, ...] | None = None,
    ) -> AbstractAsyncContextManager[Reader]:
        settings = ReaderSettings(consumer, partitions=partitions, start_from=start_from)
        return open_reader(self.connection, topic, settings)

    async def start_writer(
        self, nursery: trio.Nursery, topic: str, settings: WriterSettings | None = None
    ) -> Writer:
        """A writer whose background task runs in the caller's ``nursery``; the caller
        closes it with ``await writer.close()``."""
        writer = Writer(self.connection, topic, settings or WriterSettings())
        await nursery.start(writer.run)
        return writer

    async def start_reader(
        self, nursery: trio.Nursery, topic: str, settings: ReaderSettings
    ) -> Reader:
        reader = Reader(self.connection, topic, settings)
        await nursery.start(reader.run)
        return reader


@asynccontextmanager
async def connect(
    endpoint: str | Sequence[str] = DEFAULT_ENDPOINT,
    *,
    database: str = DEFAULT_DATABASE,
    discovery: bool = True,
    ca_file: str | None = None,
    user: str | None = None,
    password: str | None = None,
    token: str | None = None,
    connect_timeout: float = 10.0,
    fail_fast: bool = False,
    ping_interval: float = 10.0,
    ping_timeout: float = 10.0,
    channel_factory: ChannelFactory | None = None,
) -> AsyncIterator[Client]:
    """``endpoint``: one node, or several of one cluster (``"a,b,c"`` or a list); with
    ``discovery`` the other nodes the cluster lists join the pool too. Streams move to
    another node of the pool when theirs dies."""
    first, *more = Endpoint.parse_list(endpoint)
    config = ClientConfig(
        endpoint=first,
        more_endpoints=tuple(more),
        discovery=discovery,
        database=database,
        ca_file=ca_file,
        user=user,
        password=password,
        token=token,
        connect_timeout=connect_timeout,
        fail_fast=fail_fast,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
    )
    async with Connection.open(config, channel_factory=channel_factory) as connection:
        yield Client(connection)
