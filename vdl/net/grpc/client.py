"""A gRPC client channel on Trio over the same sans-I/O core as the server.

A channel is one HTTP/2 connection and lives inside an ``async with``: its reader and
writer tasks belong to a nursery it opens, so nothing outlives the block::

    async with GrpcChannel.connect("127.0.0.1", 2135) as channel:
        reply = await channel.unary("/pkg.Svc/Method", request_bytes, timeout=5)
        async with channel.stream("/pkg.Svc/Chat") as call:
            await call.send(b"...")
            await call.close_send()
            async for message in call: ...
"""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import NoReturn

import trio
from h2.errors import ErrorCodes

from . import events as ev
from .connection import GrpcConnection, GrpcSettings, StreamGoneError
from .driver import READ_SIZE, CallIO, ConnectionDriver, unwrap_single_exception
from .metadata import Metadata, MetadataLike
from .status import GrpcError, StatusCode
from .tls_stream import TlsStream


class ClientStream(CallIO):
    """One call as the client sees it: send, half-close, receive until the status."""

    def __init__(self, channel: GrpcChannel, stream_id: int, deadline: float) -> None:
        super().__init__(channel._driver, stream_id)
        self._channel = channel
        self.deadline = deadline
        self.initial_metadata: Metadata | None = None
        self.status: StatusCode | None = None
        self.status_message = ""
        self.trailing_metadata: Metadata = ()
        self._send_closed = False

    @property
    def finished(self) -> bool:
        return self.status is not None

    async def send(self, message: bytes | bytearray | memoryview) -> None:
        """Send one message; blocks while the server's windows are exhausted.

        A send cancelled while blocked leaves its message queued: it is still delivered
        unless the call is cancelled too.
        """
        if self._send_closed:
            raise RuntimeError("send after close_send")
        self._raise_if_failed()
        if self.finished:
            # The server already answered; like grpcio, the outcome shows up on receive().
            return
        with trio.move_on_at(self.deadline):
            try:
                await self.send_message(message)
            except GrpcError:
                # The server answered (e.g. RESOURCE_EXHAUSTED for an oversized message) and
                # reset the stream mid-send: as above, its status is what receive() reports.
                if not self.finished:
                    raise
            return
        self._expire()

    async def close_send(self) -> None:
        """Half-close: tell the server no more messages will come."""
        if self._send_closed:
            return
        self._send_closed = True
        if self.finished or self.is_reset:
            return
        try:
            self.driver.conn.end_stream(self.stream_id)
        except StreamGoneError:
            return
        self.driver.wake_writer()

    async def receive(self) -> bytes | None:
        """The next response message; None after an OK status; GrpcError otherwise."""
        with trio.move_on_at(self.deadline):
            while True:
                if self.failure is not None:
                    self._raise_if_failed()
                message = self.take_message()
                if message is not None:
                    return message
                if self.status is not None:
                    if self.status is StatusCode.OK:
                        return None
                    raise GrpcError(self.status, self.status_message, self.trailing_metadata)
                self._raise_if_failed()
                await self.changed.wait()
        self._expire()

    async def cancel(self) -> None:
        """Abandon the call (RST_STREAM CANCEL) unless it has already finished."""
        if not self.finished and not self.is_reset:
            self.driver.reset_call(self, ErrorCodes.CANCEL)
            self.status, self.status_message = StatusCode.CANCELLED, "cancelled by the client"

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[bytes]:
        while (message := await self.receive()) is not None:
            yield message

    def _raise_if_failed(self) -> None:
        if self.failure is not None:
            status, message = self.failure
            self.driver.reset_call(self, ErrorCodes.CANCEL)
            self.status, self.status_message = status, message
            raise GrpcError(status, message)
        if self.is_reset and self.status is None:
            status = _status_for_reset(self.reset_code or 0)
            self.status, self.status_message = status, f"stream reset ({self.reset_code})"
            raise GrpcError(status, self.status_message)

    def _expire(self) -> NoReturn:
        self.driver.reset_call(self, ErrorCodes.CANCEL)
        self.status, self.status_message = StatusCode.DEADLINE_EXCEEDED, "deadline exceeded"
        raise GrpcError(StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")


def _status_for_reset(error_code: int) -> StatusCode:
    # grpc/doc/PROTOCOL-HTTP2.md "Errors": RST_STREAM codes seen by a client.
    if error_code == ErrorCodes.REFUSED_STREAM:
        return StatusCode.UNAVAILABLE
    if error_code == ErrorCodes.CANCEL:
        return StatusCode.CANCELLED
    if error_code == ErrorCodes.ENHANCE_YOUR_CALM:
        return StatusCode.RESOURCE_EXHAUSTED
    if error_code == ErrorCodes.INADEQUATE_SECURITY:
        return StatusCode.PERMISSION_DENIED
    return StatusCode.INTERNAL if error_code != ErrorCodes.NO_ERROR else StatusCode.UNAVAILABLE


class _ClientConnection(ConnectionDriver):
    def handle_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.ResponseHeadersReceived):
            call = self.calls.get(event.stream_id)
            if isinstance(call, ClientStream):
                call.initial_metadata = event.metadata
        elif isinstance(event, ev.TrailersReceived):
            call = self.calls.get(event.stream_id)
            if isinstance(call, ClientStream) and call.status is None:
                call.status, call.status_message = event.status, event.message
                call.trailing_metadata = event.metadata
                call.changed.fire()
        elif isinstance(event, ev.GoAwayReceived):
            for call in list(self.calls.values()):
                if call.stream_id > event.last_stream_id:
                    # Never processed by the server: safe for the caller to retry.
                    call.reset_code = ErrorCodes.REFUSED_STREAM
                    call.changed.fire()
        else:
            super().handle_event(event)


class GrpcChannel:
    """A client connection; create it with :meth:`connect` or :meth:`over_stream`."""

    def __init__(self, driver: _ClientConnection, authority: str, scheme: str) -> None:
        self._driver = driver
        self.authority = authority
        self.scheme = scheme

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        *,
        server_hostname: str | None = None,
        settings: GrpcSettings | None = None,
    ) -> AsyncIterator[GrpcChannel]:
        """Open a TCP (and with ``ssl_context``, TLS + ALPN h2) connection."""
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
        if ssl_context is not None:
            tls = TlsStream(
                stream, ssl_context, server_side=False, server_hostname=server_hostname or host
            )
            try:
                await tls.do_handshake()
            except BaseException:
                await trio.aclose_forcefully(tls)
                raise
            if tls.selected_alpn_protocol() != "h2":
                await trio.aclose_forcefully(tls)
                raise GrpcError(StatusCode.UNAVAILABLE, "server did not negotiate ALPN h2")
            stream = tls
        authority = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
        scheme = "https" if ssl_context is not None else "http"
        async with cls.over_stream(
            stream, authority=authority, scheme=scheme, settings=settings
        ) as channel:
            yield channel

    @classmethod
    @asynccontextmanager
    async def over_stream(
        cls,
        transport: trio.abc.Stream,
        *,
        authority: str = "localhost",
        scheme: str = "http",
        settings: GrpcSettings | None = None,
        read_size: int = READ_SIZE,
    ) -> AsyncIterator[GrpcChannel]:
        """A channel over an already-open byte stream (memory streams in tests)."""
        conn = GrpcConnection(client_side=True, settings=settings)
        driver = _ClientConnection(transport, conn, read_size=read_size)
        channel = cls(driver, authority, scheme)
        try:
            with unwrap_single_exception():
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(driver.writer)
                    nursery.start_soon(driver.reader)
                    driver.wake_writer()
                    try:
                        yield channel
                    finally:
                        await channel.aclose()
                        nursery.cancel_scope.cancel()
        finally:
            await driver.close_transport()

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        metadata: MetadataLike = None,
        timeout: float | None = None,
    ) -> AsyncIterator[ClientStream]:
        """Open a streaming call; leaving the block cancels it if it has not finished."""
        driver = self._driver
        if driver.closed:
            raise GrpcError(StatusCode.UNAVAILABLE, "connection closed")
        deadline = trio.current_time() + timeout if timeout is not None else math.inf
        # The server's SETTINGS_MAX_CONCURRENT_STREAMS: wait for a slot, as grpc-go does.
        while not driver.conn.stream_slot_free and not driver.closed:
            if trio.current_time() >= deadline:
                raise GrpcError(StatusCode.DEADLINE_EXCEEDED, "no stream free before the deadline")
            # Streams close after their calls are removed, hence the bounded wait.
            with trio.move_on_at(min(deadline, trio.current_time() + 0.05)):
                await driver.calls_changed.wait()
        if driver.closed:
            raise GrpcError(StatusCode.UNAVAILABLE, "connection closed")
        stream_id = driver.conn.start_request(
            method, metadata, authority=self.authority, scheme=self.scheme, timeout=timeout
        )
        call = ClientStream(self, stream_id, deadline)
        driver.add_call(call)
        driver.wake_writer()
        try:
            yield call
        finally:
            if not call.finished and not call.is_reset:
                driver.reset_call(call, ErrorCodes.CANCEL)
            driver.remove_call(call)

    async def unary(
        self,
        method: str,
        request: bytes | bytearray | memoryview,
        metadata: MetadataLike = None,
        timeout: float | None = None,
    ) -> bytes:
        """One request, one response; raises GrpcError on a non-OK status."""
        async with self.stream(method, metadata, timeout) as call:
            await call.send(request)
            await call.close_send()
            response = await call.receive()
            if response is None:
                raise GrpcError(StatusCode.INTERNAL, "server sent no response message")
            if await call.receive() is not None:
                raise GrpcError(StatusCode.INTERNAL, "server sent more than one response")
            return response

    async def ping(self, timeout: float = 10.0) -> float:
        """Send an HTTP/2 PING and return the round-trip time; TimeoutError if no ACK."""
        return await self._driver.ping(timeout)

    @property
    def goaway_received(self) -> bool:
        return self._driver.conn.goaway_received is not None

    async def aclose(self) -> None:
        """Cancel open calls, send GOAWAY and close the connection."""
        driver = self._driver
        if driver.closed:
            return
        for call in list(driver.calls.values()):
            driver.reset_call(call, ErrorCodes.CANCEL)
        driver.conn.close()
        await driver.close_transport()
