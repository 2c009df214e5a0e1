"""The client for asyncio programs, through trio-asyncio.

::

    import asyncio
    import vdl.client.aio as vdl_aio  # before asyncio.run: see below

    async def main() -> None:
        async with vdl_aio.connect("grpc://a:2135,grpc://b:2135") as client:
            await client.admin.create_topic("orders", consumers=["billing"])
            async with client.writer("orders") as writer:
                await writer.write(b"hello")
                await writer.flush()
            async with client.reader("orders", "billing") as reader:
                batch = await reader.receive_batch(timeout=10)
                await reader.commit(batch)

    asyncio.run(main())

The client is the Trio one (:mod:`vdl.client`): its connection, writers and readers run as
Trio tasks, and every method here is the Trio method run through the loop's
``trio_as_future``. Importing this module imports trio-asyncio, which installs its event
loop policy: from then on ``asyncio.run`` (and ``asyncio.new_event_loop``) run on
trio-asyncio's loop, an asyncio event loop that drives a Trio run, so asyncio code and this
client share one thread. Import it before the program's loop starts; on any other loop
:func:`connect` raises RuntimeError.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, ParamSpec, TypeVar

import trio
import trio_asyncio

from vdl.client.client import Client
from vdl.client.client import connect as trio_connect
from vdl.client.errors import ClientError
from vdl.client.messages import WriteResult
from vdl.client.reader import Batch, Reader, ReaderSettings, StartFrom
from vdl.client.writer import MessageLike, Writer, WriterSettings

P = ParamSpec("P")
T = TypeVar("T")

__all__ = ["AioAdmin", "AioClient", "AioReader", "AioWriter", "connect"]


class _Bridge:
    """Runs Trio functions on the Trio side of the running trio-asyncio loop."""

    def __init__(self, loop: Any) -> None:
        self._loop = loop

    def future(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> Any:
        return self._loop.trio_as_future(functools.partial(fn, *args, **kwargs))

    async def call(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = await self.future(fn, *args, **kwargs)
        return result


def _bridge() -> _Bridge:
    loop = asyncio.get_running_loop()
    if not isinstance(loop, trio_asyncio.BaseTrioEventLoop):
        raise RuntimeError(
            "vdl.client.aio needs trio-asyncio's event loop: import vdl.client.aio before "
            "the program's event loop starts (asyncio.run)"
        )
    return _Bridge(loop)


class AioWriter:
    """:class:`vdl.client.Writer` for asyncio; see it for what each method does."""

    def __init__(self, writer: Writer, bridge: _Bridge) -> None:
        self._writer = writer
        self._bridge = bridge

    @property
    def producer_id(self) -> str:
        return self._writer.producer_id

    @property
    def partition(self) -> int | None:
        return self._writer.partition

    @property
    def buffered(self) -> tuple[int, int]:
        return self._writer.buffered

    async def write(
        self, messages: MessageLike | Sequence[MessageLike], *, timeout: float | None = None
    ) -> None:
        await self._bridge.call(self._writer.write, messages, timeout=timeout)

    async def write_with_ack(
        self, messages: MessageLike | Sequence[MessageLike], *, timeout: float | None = None
    ) -> list[WriteResult]:
        return await self._bridge.call(self._writer.write_with_ack, messages, timeout=timeout)

    async def flush(self, timeout: float | None = None) -> None:
        await self._bridge.call(self._writer.flush, timeout)

    async def wait_init(self) -> int:
        return await self._bridge.call(self._writer.wait_init)

    async def close(self, timeout: float | None = None) -> None:
        await self._bridge.call(self._writer.close, timeout)


class AioReader:
    """:class:`vdl.client.Reader` for asyncio; see it for what each method does."""

    def __init__(self, reader: Reader, bridge: _Bridge) -> None:
        self._reader = reader
        self._bridge = bridge

    async def receive_batch(self, timeout: float | None = None) -> Batch:
        return await self._bridge.call(self._reader.receive_batch, timeout)

    async def commit(self, batch: Batch) -> None:
        await self._bridge.call(self._reader.commit, batch)

    async def commit_with_ack(self, batch: Batch, timeout: float | None = None) -> None:
        await self._bridge.call(self._reader.commit_with_ack, batch, timeout)

    async def close(self, timeout: float | None = None) -> None:
        await self._bridge.call(self._reader.close, timeout)


class AioAdmin:
    """:class:`vdl.client.Admin` for asyncio: the same methods, awaited from asyncio
    (``await client.admin.create_topic("orders", partitions=4)``)."""

    def __init__(self, client: Client, bridge: _Bridge) -> None:
        self._client = client
        self._bridge = bridge

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self._client.admin, name)
        if not callable(method):
            raise AttributeError(name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._bridge.call(method, *args, **kwargs)

        return call


class AioClient:
    def __init__(self, client: Client, nursery: trio.Nursery, bridge: _Bridge) -> None:
        self._client = client
        self._nursery = nursery
        self._bridge = bridge
        self.admin = AioAdmin(client, bridge)

    @asynccontextmanager
    async def writer(
        self, topic: str, settings: WriterSettings | None = None
    ) -> AsyncIterator[AioWriter]:
        """``async with client.writer(topic) as w``: closed (acks awaited) on exit."""
        writer = await self._bridge.call(self._client.start_writer, self._nursery, topic, settings)
        try:
            yield AioWriter(writer, self._bridge)
        except BaseException:
            await _abandon(self._bridge.future(writer.close, 0))
            raise
        await self._bridge.call(writer.close)

    @asynccontextmanager
    async def reader(
        self,
        topic: str,
        consumer: str | None,
        *,
        start_from: StartFrom = None,
        partitions: tuple[int, ...] | None = None,
    ) -> AsyncIterator[AioReader]:
        """``async with client.reader(topic, consumer) as r``: closed (commit acks awaited)
        on exit."""
        settings = ReaderSettings(consumer, partitions=partitions, start_from=start_from)
        reader = await self._bridge.call(self._client.start_reader, self._nursery, topic, settings)
        try:
            yield AioReader(reader, self._bridge)
        except BaseException:
            await _abandon(self._bridge.future(reader.close, 0))
            raise
        await self._bridge.call(reader.close)


async def _abandon(future: Any) -> None:
    """Wait for a close on the way out of a failed block; its own error adds nothing."""
    try:
        await future
    except (ClientError, TimeoutError):
        pass


@asynccontextmanager
async def connect(endpoint: str | Sequence[str], **options: Any) -> AsyncIterator[AioClient]:
    """:func:`vdl.client.connect` for asyncio: the same arguments; the connection and every
    writer and reader opened through it end with the block."""
    bridge = _bridge()
    started: asyncio.Future[AioClient] = asyncio.get_running_loop().create_future()
    stop = trio.Event()

    async def keep() -> None:
        async with trio_connect(endpoint, **options) as client:
            async with trio.open_nursery() as nursery:
                started.set_result(AioClient(client, nursery, bridge))
                await stop.wait()
                nursery.cancel_scope.cancel()

    running = bridge.future(keep)
    await asyncio.wait([started, running], return_when=asyncio.FIRST_COMPLETED)
    if not started.done():
        await running  # it ended before connecting: raises why
        raise ClientError("the connection ended before it was ready")
    try:
        yield started.result()
    finally:
        await bridge.call(_set, stop)
        await running


async def _set(event: trio.Event) -> None:
    event.set()
