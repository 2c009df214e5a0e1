"""A gRPC server on Trio: a task per connection, a task per call.

Handlers take and return bytes; (de)serialisation is the service's business (see
``protobuf.py`` for helpers). Each call runs in its own cancel scope, cancelled by the
client's RST_STREAM, by the ``grpc-timeout`` deadline (answered with DEADLINE_EXCEEDED), or
at the end of a shutdown's grace period. Calls, their statuses and the unary ones' times
are counted per method (``metrics.py``).
"""

from __future__ import annotations

import logging
import math
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NoReturn

import trio

from vdl.net.limits import ConnectionLimits, peer_host, refuse
from vdl.net.listen import open_listeners

from . import events as ev
from .connection import GrpcConnection, GrpcSettings
from .driver import READ_SIZE, CallIO, ConnectionDriver
from .metadata import Metadata, MetadataLike
from .metrics import (
    BYTES_IN,
    BYTES_OUT,
    CONNECTIONS_ACCEPTED,
    CONNECTIONS_REFUSED,
    MethodMetrics,
    unknown_method,
)
from .status import GrpcError, StatusCode
from .tls_stream import TlsStream

logger = logging.getLogger("vdl.net.grpc")

_TLS_HANDSHAKE_TIMEOUT = 10.0


class ServerContext:
    """What a handler knows about its call, and how it sets the call's outcome."""

    def __init__(
        self, method: str, metadata: Metadata, peer: str, authority: str, deadline: float | None
    ) -> None:
        self.method = method
        self.metadata = metadata
        self.peer = peer
        self.authority = authority
        #: Absolute deadline on the Trio clock, from ``grpc-timeout``; None if unbounded.
        self.deadline = deadline
        self.status = StatusCode.OK
        self.status_message = ""
        self.trailing_metadata: MetadataLike = None
        self.initial_metadata: MetadataLike = None

    def time_remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - trio.current_time())

    def set_status(self, status: StatusCode, message: str = "") -> None:
        """Status sent in the trailers when the handler returns normally."""
        self.status = status
        self.status_message = message

    def set_trailing_metadata(self, metadata: MetadataLike) -> None:
        self.trailing_metadata = metadata

    def set_initial_metadata(self, metadata: MetadataLike) -> None:
        """Metadata for the response headers; effective until the first message is sent."""
        self.initial_metadata = metadata

    def abort(self, status: StatusCode, message: str = "") -> NoReturn:
        """End the call now with ``status`` (raises; do not catch it in the handler)."""
        raise GrpcError(status, message)


class ServerStream:
    """The message side of a bidi-streaming call, as a handler sees it."""

    def __init__(self, call: _ServerCall) -> None:
        self._call = call

    async def receive(self) -> bytes | None:
        """The next request message, or None once the client has half-closed."""
        return await self._call.receive()

    async def send(self, message: bytes | bytearray | memoryview) -> None:
        """Send a response message; blocks while the client's windows are exhausted."""
        await self._call.send(message)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[bytes]:
        while (message := await self.receive()) is not None:
            yield message


UnaryHandler = Callable[[bytes, ServerContext], Awaitable[bytes]]
StreamHandler = Callable[[ServerStream, ServerContext], Awaitable[None]]
# Runs on the request headers, before any of the body is read: returns a response to send
# at once (the call then ends OK without reading its request), or None to go on.
Precheck = Callable[[ServerContext], bytes | None]


@dataclass(frozen=True, slots=True)
class _Method:
    kind: Literal["unary", "stream"]
    handler: UnaryHandler | StreamHandler
    precheck: Precheck | None
    metrics: MethodMetrics


class _ServerCall(CallIO):
    def __init__(
        self, driver: _ServerConnection, stream_id: int, context: ServerContext, started: float
    ) -> None:
        super().__init__(driver, stream_id)
        self.context = context
        self.scope = trio.CancelScope(deadline=context.deadline or math.inf)
        #: ``time.perf_counter()`` when the request headers arrived.
        self.started = started

    async def receive(self) -> bytes | None:
        while True:
            if self.failure is not None:
                raise GrpcError(*self.failure)
            message = self.take_message()
            if message is not None:
                return message
            if self.remote_ended:
                return None
            if self.is_reset:
                # The scope is cancelled too; this only avoids waiting for nothing.
                raise GrpcError(StatusCode.CANCELLED, "call reset by the client")
            await self.changed.wait()

    async def send(self, message: bytes | bytearray | memoryview) -> None:
        if self.context.initial_metadata is not None:
            self.driver.conn.send_response_headers(self.stream_id, self.context.initial_metadata)
        await self.send_message(message)


def _client_cancelled(call: _ServerCall, exc: BaseException) -> bool:
    """Whether ``exc`` is only what the client's reset of ``call`` makes the handler's
    tasks raise (the reset GrpcErrors, CANCELLED, and Cancelled), and nothing else."""
    if not call.is_reset:
        return False
    if isinstance(exc, BaseExceptionGroup):
        return all(_client_cancelled(call, inner) for inner in exc.exceptions)
    if isinstance(exc, trio.Cancelled):
        return True
    return isinstance(exc, GrpcError) and exc.status is StatusCode.CANCELLED


def _failed(call: _ServerCall, exc: Exception, how: str) -> tuple[StatusCode, str]:
    """The status a handler's exception ends its call with, logged once: CANCELLED at debug
    level when the client reset the call, else INTERNAL with the traceback."""
    if _client_cancelled(call, exc):
        logger.debug("%s: cancelled by the client", call.context.method)
        return StatusCode.CANCELLED, "call reset by the client"
    logger.exception("handler for %s %s", call.context.method, how)
    return StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"


class _ServerConnection(ConnectionDriver):
    def __init__(self, server: GrpcServer, transport: trio.abc.Stream, peer: str) -> None:
        super().__init__(
            transport,
            GrpcConnection(client_side=False, settings=server.settings),
            read_size=READ_SIZE,
            bytes_in=BYTES_IN,
            bytes_out=BYTES_OUT,
        )
        self.server = server
        self.peer = peer
        self._nursery: trio.Nursery | None = None
        self._draining = False

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self.writer)
                if self.server.idle_timeout is not None:
                    nursery.start_soon(self._close_when_idle, self.server.idle_timeout)
                await self.flush()  # our SETTINGS first: the client waits for them
                await self.reader()
                # The peer is gone or broke the protocol: nothing left to answer to.
                nursery.cancel_scope.cancel()
        finally:
            await self.close_transport()

    async def _close_when_idle(self, idle: float) -> None:
        """GOAWAY and close once no call has been open and no frame has arrived for
        ``idle`` seconds (grpc-go's MaxConnectionIdle, which counts calls only)."""
        while True:
            deadline = self.last_activity + idle
            if self.calls or self.conn.open_stream_count:
                deadline = max(deadline, trio.current_time() + idle)
            elif trio.current_time() >= deadline:
                break
            with trio.move_on_at(deadline):
                await self.calls_changed.wait()
                # A call ended: the idle time counts from now.
                self.last_activity = max(self.last_activity, trio.current_time())
        logger.info("closing gRPC connection from %s: idle for %.0f s", self.peer, idle)
        self.conn.close(message="idle")
        await self.close_transport()
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()

    def handle_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.RequestReceived):
            self._start_call(event)
        else:
            super().handle_event(event)

    def on_call_reset(self, call: CallIO) -> None:
        assert isinstance(call, _ServerCall)
        call.scope.cancel()

    def on_call_failed(self, call: CallIO) -> None:
        assert isinstance(call, _ServerCall)
        call.scope.cancel()

    def _start_call(self, request: ev.RequestReceived) -> None:
        started = time.perf_counter()
        method = self.server.methods.get(request.method)
        if method is None:
            unknown = unknown_method()
            unknown.requests.inc()
            self.conn.send_trailers(
                request.stream_id, StatusCode.UNIMPLEMENTED, f"unknown method {request.method}"
            )
            unknown.finished(StatusCode.UNIMPLEMENTED, started)
            return
        method.metrics.requests.inc()
        deadline = None
        if request.timeout is not None:
            deadline = trio.current_time() + request.timeout
        context = ServerContext(
            request.method, request.metadata, self.peer, request.authority, deadline
        )
        if method.precheck is not None:
            try:
                early = method.precheck(context)
            except Exception as exc:
                logger.exception("precheck for %s failed", context.method)
                self.conn.send_trailers(request.stream_id, StatusCode.INTERNAL, str(exc))
                method.metrics.finished(StatusCode.INTERNAL, started)
                return
            if early is not None:
                # The response leaves now; the body the client is still sending is refused
                # with RST_STREAM(NO_ERROR) and never buffered (RFC 9113 §8.1).
                self.conn.send_message(request.stream_id, early)
                self.conn.send_trailers(request.stream_id, StatusCode.OK)
                method.metrics.finished(StatusCode.OK, started)
                return
        call = _ServerCall(self, request.stream_id, context, started)
        self.add_call(call)
        assert self._nursery is not None
        self._nursery.start_soon(self._run_call, call, method)

    async def _run_call(self, call: _ServerCall, method: _Method) -> None:
        context = call.context
        status, message = StatusCode.OK, ""
        # Until the call ends normally, its end is a cancellation (the connection's).
        ended = StatusCode.CANCELLED
        try:
            try:
                with call.scope:
                    try:
                        if method.kind == "unary":
                            await self._run_unary(call, method.handler)  # type: ignore[arg-type]
                        else:
                            await method.handler(ServerStream(call), context)  # type: ignore[arg-type]
                        status, message = context.status, context.status_message
                    except GrpcError as exc:
                        status, message = exc.status, exc.message
                    except Exception as exc:
                        status, message = _failed(call, exc, "failed")
            except Exception as exc:
                # An error raised together with this call's cancellation (a group holding
                # both) gets past the handler's except clauses once the scope has taken
                # its Cancelled out; it must still end only this call. A client that
                # resets its call (an SDK reader closed while its session starts) leaves
                # every task of the handler failing with "reset": normal, not an error.
                status, message = _failed(call, exc, "failed while cancelled")
            if call.failure is not None:
                # Whatever the handler made of it, the request stream was broken.
                status, message = call.failure
            elif call.scope.cancelled_caught:
                if context.deadline is not None and trio.current_time() >= context.deadline:
                    status, message = StatusCode.DEADLINE_EXCEEDED, "deadline exceeded"
                else:
                    status, message = StatusCode.CANCELLED, "call cancelled by the server"
            if not call.is_reset:
                self.conn.send_trailers(
                    call.stream_id,
                    status,
                    message,
                    context.trailing_metadata,
                    discard_pending=status is not StatusCode.OK,
                )
                self.wake_writer()
            ended = status
        finally:
            method.metrics.finished(ended, call.started)
            self.remove_call(call)

    async def _run_unary(self, call: _ServerCall, handler: UnaryHandler) -> None:
        request = await call.receive()
        if request is None:
            raise GrpcError(StatusCode.INTERNAL, "unary call without a request message")
        if await call.receive() is not None:
            raise GrpcError(StatusCode.INTERNAL, "unary call with more than one request")
        response = await handler(request, call.context)
        await call.send(response)

    async def drain_and_close(self, grace: float) -> None:
        """GOAWAY, let open calls finish for ``grace`` seconds, cancel the rest, close."""
        if not self._draining:
            self._draining = True
            self.conn.start_graceful_shutdown()
            self.wake_writer()
        with trio.move_on_after(grace):
            while self.calls and not self.closed:
                await self.calls_changed.wait()
        for call in list(self.calls.values()):
            assert isinstance(call, _ServerCall)
            call.scope.cancel()
        while self.calls and not self.closed:
            await self.calls_changed.wait()
        self.conn.close()
        await self.close_transport()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()


class GrpcServer:
    """Routes ``/package.Service/Method`` paths to handlers and serves connections."""

    def __init__(
        self,
        settings: GrpcSettings | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        idle_timeout: float | None = None,
        handshake_timeout: float = _TLS_HANDSHAKE_TIMEOUT,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self.settings = settings or GrpcSettings()
        # Kafka's max.connections / max.connections.per.ip, checked as a connection is
        # accepted (vdl/net/limits.py).
        self.limits = limits or ConnectionLimits("gRPC")
        #: With a context, connections are TLS with ALPN h2; without, h2 prior knowledge.
        self.ssl_context = ssl_context
        #: Seconds without calls or frames after which a connection is closed (None: never).
        self.idle_timeout = idle_timeout
        #: Seconds a client has to finish its TLS handshake before it is disconnected.
        self.handshake_timeout = handshake_timeout
        self.methods: dict[str, _Method] = {}
        self._connections: set[_ServerConnection] = set()
        self._accept_scope: trio.CancelScope | None = None
        self._shutting_down = False
        self._stopped = trio.Event()
        self.listeners: list[trio.SocketListener] = []

    def add_unary(
        self, path: str, handler: UnaryHandler, *, precheck: Precheck | None = None
    ) -> None:
        """Register ``async def handler(request: bytes, context) -> bytes``.

        ``precheck`` (e.g. an authentication check) sees the call's metadata before its
        request is received and may answer the call instead of the handler.
        """
        self._add(path, "unary", handler, precheck)

    def add_stream(self, path: str, handler: StreamHandler) -> None:
        """Register a bidi-streaming ``async def handler(stream, context) -> None``."""
        self._add(path, "stream", handler, None)

    def _add(
        self,
        path: str,
        kind: Literal["unary", "stream"],
        handler: UnaryHandler | StreamHandler,
        precheck: Precheck | None,
    ) -> None:
        if not path.startswith("/") or path.count("/") != 2:
            raise ValueError(f"method path must look like /package.Service/Method: {path!r}")
        if path in self.methods:
            raise ValueError(f"{path} is already registered")
        counted = MethodMetrics(path, timed=kind == "unary")
        self.methods[path] = _Method(kind, handler, precheck, counted)

    @property
    def ports(self) -> list[int]:
        """Ports the TCP listeners are bound to (useful with port 0)."""
        return [int(listener.socket.getsockname()[1]) for listener in self.listeners]

    async def serve(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``host:port`` and serve until :meth:`shutdown` completes.

        Use with ``await nursery.start(server.serve, host, port)``, which returns the
        listeners once they accept connections.
        """
        listeners = await open_listeners(host, port, "gRPC")
        await self.serve_listeners(listeners, task_status=task_status)

    async def serve_listeners(
        self,
        listeners: Sequence[trio.SocketListener],
        *,
        task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        self.listeners = list(listeners)
        try:
            async with trio.open_nursery() as connections:
                with trio.CancelScope() as accept_scope:
                    self._accept_scope = accept_scope
                    if self._shutting_down:
                        accept_scope.cancel()
                    async with trio.open_nursery() as accepters:
                        for listener in self.listeners:
                            accepters.start_soon(self._accept_loop, listener, connections)
                        task_status.started(self.listeners)
        finally:
            with trio.CancelScope(shield=True):
                for listener in self.listeners:
                    await listener.aclose()
            self._stopped.set()

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # EMFILE and friends: back off rather than spin
                logger.warning("accept failed: %s", exc)
                await trio.sleep(0.1)
                continue
            host = peer_host(stream)
            if not self.limits.admit(host):
                CONNECTIONS_REFUSED.inc()
                await refuse(stream)
                continue
            CONNECTIONS_ACCEPTED.inc()
            nursery.start_soon(self._serve_counted, stream, host)

    async def _serve_counted(self, stream: trio.SocketStream, host: str) -> None:
        try:
            await self.serve_connection(stream)
        finally:
            self.limits.release(host)

    async def serve_connection(self, stream: trio.abc.Stream, peer: str | None = None) -> None:
        """Serve one accepted connection until it closes (also used by ``memory.py``)."""
        if peer is None:
            peer = _peer_name(stream)
        transport: trio.abc.Stream = stream
        if self.ssl_context is not None:
            tls = TlsStream(stream, self.ssl_context, server_side=True)
            with trio.move_on_after(self.handshake_timeout) as handshake:
                try:
                    await tls.do_handshake()
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    logger.info("TLS handshake with %s failed: %s", peer, exc)
                    await trio.aclose_forcefully(tls)
                    return
            if handshake.cancelled_caught:
                logger.info("TLS handshake with %s timed out", peer)
                await trio.aclose_forcefully(tls)
                return
            alpn = tls.selected_alpn_protocol()
            if alpn not in (None, "h2"):
                logger.info("peer %s negotiated ALPN %r, not h2", peer, alpn)
                await trio.aclose_forcefully(tls)
                return
            transport = tls
        connection = _ServerConnection(self, transport, peer)
        self._connections.add(connection)
        try:
            if self._shutting_down:
                # Accepted in the shutdown race: say GOAWAY straight away.
                connection.conn.start_graceful_shutdown()
            await connection.run()
        except Exception:
            # A bug in one connection must not take the listener and its siblings down.
            logger.exception("connection from %s failed", peer)
        finally:
            self._connections.discard(connection)

    async def shutdown(self, grace: float = 10.0) -> None:
        """Stop accepting, send GOAWAY on every connection, let open calls finish for up to
        ``grace`` seconds, cancel what remains, then close all connections."""
        self._shutting_down = True
        if self._accept_scope is not None:
            self._accept_scope.cancel()
        async with trio.open_nursery() as nursery:
            for connection in list(self._connections):
                nursery.start_soon(connection.drain_and_close, grace)
        if self.listeners:
            await self._stopped.wait()


def _peer_name(stream: trio.abc.Stream) -> str:
    """gRPC-style peer string (``ipv4:127.0.0.1:5000``) for a socket stream."""
    inner: object = stream
    while isinstance(inner, TlsStream | trio.SSLStream):
        inner = inner.transport_stream
    if isinstance(inner, trio.SocketStream):
        try:
            address = inner.socket.getpeername()
        except OSError:
            return "unknown"
        if isinstance(address, tuple) and len(address) >= 2:
            host, port = address[0], address[1]
            if ":" in str(host):
                return f"ipv6:[{host}]:{port}"
            return f"ipv4:{host}:{port}"
        return f"unix:{address}"
    return "unknown"
