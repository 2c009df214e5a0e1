"""One Kafka client connection: read frames, run requests, write responses in request order.

Each request's order-sensitive part runs inline as it is read (so pipelined produce
requests append in order); the waiting parts run concurrently, and a writer task sends
their responses strictly in request order, as every Kafka client requires.

A Fetch starts reading only when it is next in line, i.e. once every earlier response has
been handed to the socket: a client that pipelines fetches and never reads their answers
makes the node hold at most one fetch response (at most ``--fetch-max-bytes``) for it,
not one per request in flight. Kafka goes further and handles one request per connection
at a time; Kafka clients send one fetch per connection at a time, so this costs them
nothing, while pipelined produce requests still run concurrently.

A response that is next in line when it becomes ready is written straight from its
request's task (plain sockets, and only what the kernel takes without blocking): waking the
writer task first costs a loop turn, which on a busy event loop (or a loaded machine) is a
good part of an acks=all produce's latency. The writer sends whatever is left, and every
response after it, in order.

Stopping (node shutdown) differs by transport. A plain socket's read is simply cancelled.
A TLS read should not be: trio documents that a `trio.SSLStream` receive cancelled while
the TLS layer has to write (a handshake, renegotiation, post-handshake messages) leaves
the stream broken for good, and the responses still owed on it would be lost. So a TLS
connection is put in *draining*: the read in progress may still return (its requests are
admitted and answered), no further read starts, and the blocked read is cancelled only
once every response is written, when breaking the stream can no longer lose anything.

Each request is counted as Kafka's RequestMetrics count it (request_metrics.py): its api,
its time from the frame read off the socket to its response handed to the writer, and the
requests refused before they had a response (with the error Kafka would name).
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import trio

from vdl.broker.broker import Broker
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import (
    FETCH_MAX_BYTES,
    NodeInfo,
    Pending,
    RequestContext,
    Response,
)
from vdl.net.kafka.apis.dispatch import UnsupportedRequest, dispatch
from vdl.net.kafka.apis.sasl import ConnectionAuth
from vdl.net.kafka.errors import KafkaError
from vdl.net.kafka.framing import FrameDecoder, FrameTooLarge
from vdl.net.kafka.header import MalformedRequest, parse_request_header
from vdl.net.kafka.quotas import KafkaQuotas
from vdl.net.kafka.request_metrics import (
    AUTHENTICATION_FAILURES,
    BYTES_IN,
    BYTES_OUT,
    ApiMetrics,
    api_metrics,
)
from vdl.net.kafka.versions import ApiKey
from vdl.security.service import NO_SECURITY, Security

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 64  # requests read ahead of their responses, per connection
READ_SIZE = 256 * 1024
SEND_CHUNK = 256 * 1024  # larger responses are sent in pieces of about this size
_API_KEY = struct.Struct(">h")


@dataclass(slots=True)
class _Admitted:
    """A request admitted by its inline part: what runs the rest, and what it counts into."""

    pending: Pending
    # Whether it waits for its turn to start (a Fetch: see the module docstring).
    in_turn: bool
    # None for a bare SASL token after a v0 handshake: not a Kafka request.
    metrics: ApiMetrics | None


@dataclass(slots=True)
class _Slot:
    done: trio.Event = field(default_factory=trio.Event)
    response: Response = None
    # Set when the writer reaches this slot: every earlier response is written.
    turn: trio.Event = field(default_factory=trio.Event)


class KafkaConnection:
    def __init__(
        self,
        stream: trio.abc.Stream,
        peer: str,
        broker: Broker,
        node: NodeInfo,
        max_request_bytes: int,
        security: Security = NO_SECURITY,
        tls_principal: str | None = None,
        *,
        quotas: KafkaQuotas | None = None,
        idle_timeout_s: float | None = None,
        max_pre_auth_bytes: int | None = None,
        fetch_max_bytes: int = FETCH_MAX_BYTES,
    ) -> None:
        self._stream = stream
        self._fetch_max_bytes = fetch_max_bytes
        self._quotas = quotas if quotas is not None and quotas.enabled else None
        # Kafka's connections.max.idle.ms: no bytes either way and nothing in flight.
        self._idle_timeout_s = idle_timeout_s
        self._last_active = trio.current_time()
        self._in_flight = 0
        self._idle_watch = trio.CancelScope()
        self._security = security
        self._auth = ConnectionAuth(security, peer, tls_principal) if security.enabled else None
        self._peer = peer
        self._broker = broker
        self._node = node
        self._max_request_bytes = max_request_bytes
        # Until SASL succeeds a frame may be at most this large (Kafka's
        # sasl.server.max.receive.size): an unauthenticated client cannot make the node
        # buffer a max-request-bytes frame.
        self._pre_auth = (
            self._auth is not None
            and self._auth.sasl is not None
            and max_pre_auth_bytes is not None
        )
        limit = max_request_bytes
        if self._pre_auth and max_pre_auth_bytes is not None:
            limit = min(max_request_bytes, max_pre_auth_bytes)
        self._decoder = FrameDecoder(limit)
        self._reading = trio.CancelScope()
        self._draining = False
        # Set when reading is cut: data a read returned at that very moment must not be
        # admitted (a produce would be stored and never answered).
        self._admitting = True
        # Only a plain socket survives a cancelled read (see the module docstring).
        self._cancel_safe = isinstance(stream, trio.SocketStream)
        # The slot the writer task waits for: while it is set, the writer is not writing,
        # so that slot's own task may write its response directly.
        self._head: _Slot | None = None
        self._nursery: trio.Nursery

    def stop_reading(self) -> None:
        """Accept no more requests; those already read are still answered."""
        self._draining = True
        if self._cancel_safe or self._in_flight == 0:
            self._stop_admitting()

    def _stop_admitting(self) -> None:
        self._admitting = False
        self._reading.cancel()

    async def serve(self) -> None:
        send, receive = trio.open_memory_channel[_Slot](MAX_IN_FLIGHT)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_responses, receive)
                if self._idle_timeout_s is not None:
                    nursery.start_soon(self._close_when_idle, self._idle_timeout_s)
                async with send:
                    with self._reading:
                        await self._read_requests(nursery, send)
                # Reading is over (client gone, or shutdown): let the answers drain alone.
                self._idle_watch.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            log.debug("connection from %s broken", self._peer)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self._stream.aclose()

    async def _read_requests(
        self, nursery: trio.Nursery, send: trio.MemorySendChannel[_Slot]
    ) -> None:
        # A large frame is received straight into its own buffer (see framing.py): no
        # join of chunks, and the batches in it can be stamped in place and stored as is.
        sock = self._stream.socket if isinstance(self._stream, trio.SocketStream) else None
        decoder = self._decoder
        while not self._draining:
            if self._pre_auth and self._authenticated():
                self._pre_auth = False
                decoder.limit = self._max_request_bytes
            direct = decoder.direct_buffer() if sock is not None else None
            if sock is not None and direct is not None:
                n = await sock.recv_into(direct)
                if not n:
                    return
                self._last_active = trio.current_time()
                BYTES_IN.inc(n)
                frames = decoder.direct_received(n)
            else:
                data = await self._stream.receive_some(READ_SIZE)
                if not data:
                    return
                self._last_active = trio.current_time()
                BYTES_IN.inc(len(data))
                try:
                    frames = decoder.feed(data)
                except FrameTooLarge as exc:
                    before = " before SASL authentication" if self._pre_auth else ""
                    log.warning("closing connection from %s: %s%s", self._peer, exc, before)
                    return
            received = time.perf_counter()
            for frame in frames:
                if self._quotas is not None and await self._quota_pause(self._quotas, frame):
                    # Kafka mutes a throttled client's socket (KIP-219): the request would
                    # not have been read yet, so the throttle is not part of its time.
                    received = time.perf_counter()
                if not self._admitting:
                    # Reading was cut while this read returned: its requests were never
                    # accepted, so nothing of them is stored (the client sees them fail).
                    return
                admitted = self._admit(frame)
                if admitted is None:
                    return
                slot = _Slot()
                self._in_flight += 1
                # Shielded: an admitted request (a produce is stored by now) must reach
                # the writer, or its answer would be lost if reading is cut meanwhile.
                with trio.CancelScope(shield=True):
                    await send.send(slot)
                nursery.start_soon(self._run, slot, admitted, received)
                if self._auth is not None and self._auth.failed:
                    return  # Kafka closes after a failed SASL step (once it is answered)

    def _authenticated(self) -> bool:
        sasl = self._auth.sasl if self._auth is not None else None
        return sasl is not None and sasl.authenticated

    async def _quota_pause(self, quotas: KafkaQuotas, frame: memoryview) -> bool:
        """Hold this client's next request back while it is over its quota; True if held."""
        try:
            client_id = parse_request_header(frame).client_id or ""
        except MalformedRequest:
            return False  # _admit reports it
        pause = quotas.pause_s(client_id, trio.current_time())
        if pause > 0:
            await trio.sleep(pause)
            return True
        return False

    async def _close_when_idle(self, limit_s: float) -> None:
        with self._idle_watch:
            while True:
                await trio.sleep_until(self._last_active + limit_s)
                now = trio.current_time()
                if self._in_flight:
                    # A long poll or a held JoinGroup is activity, not idleness.
                    self._last_active = now
                elif now - self._last_active >= limit_s:
                    log.info("closing connection from %s: idle for %.1f s", self._peer, limit_s)
                    self._nursery.cancel_scope.cancel()
                    return

    def _admit(self, frame: memoryview) -> _Admitted | None:
        """Run the request's inline part (see `_Admitted`). None closes the connection
        (after earlier replies); the request is then counted as failed with the error
        Kafka would name."""
        auth = self._auth
        if auth is not None and auth.raw_tokens:
            try:
                return _Admitted(auth.raw_token(frame), False, None)
            except Exception:
                AUTHENTICATION_FAILURES.inc()
                log.exception("closing connection from %s: SASL token failed", self._peer)
                return None
        try:
            header = parse_request_header(frame)
        except MalformedRequest as exc:
            if len(frame) >= _API_KEY.size:
                metrics = api_metrics(_API_KEY.unpack_from(frame)[0])
                metrics.requests.inc()
                metrics.error(ErrorCode.INVALID_REQUEST)
            log.warning("closing connection from %s: malformed request header: %s", self._peer, exc)
            return None
        metrics = api_metrics(header.api_key)
        metrics.requests.inc()
        if auth is None:
            ctx = RequestContext(
                header,
                frame,
                self._broker,
                self._node,
                quotas=self._quotas,
                fetch_max_bytes=self._fetch_max_bytes,
            )
        else:
            if not auth.admits(header.api_key):
                # Kafka: IllegalSaslStateException, an authentication failure.
                metrics.error(ErrorCode.ILLEGAL_SASL_STATE)
                AUTHENTICATION_FAILURES.inc()
                log.warning(
                    "closing connection from %s: api %d before SASL authentication",
                    self._peer,
                    header.api_key,
                )
                return None
            principal, sasl = auth.principal, auth.sasl is not None
            authorizer = self._security.authorizer
            ctx = RequestContext(
                header,
                frame,
                self._broker,
                self._node,
                principal,
                authorizer,
                sasl,
                quotas=self._quotas,
                fetch_max_bytes=self._fetch_max_bytes,
                security=self._security,
            )
        try:
            if auth is not None and (handled := auth.handle(header, frame)) is not None:
                return _Admitted(handled, False, metrics)
            return _Admitted(dispatch(ctx), header.api_key == ApiKey.FETCH, metrics)
        except UnsupportedRequest as exc:
            metrics.error(ErrorCode.UNSUPPORTED_VERSION)
            log.warning("closing connection from %s: %s", self._peer, exc)
        except MalformedRequest as exc:
            metrics.error(exc.code)
            log.warning(
                "closing connection from %s: malformed request (api %d v%d): %s",
                self._peer,
                header.api_key,
                header.api_version,
                exc,
            )
        except Exception as exc:
            metrics.error(
                exc.code if isinstance(exc, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
            )
            log.exception(
                "closing connection from %s: request api %d v%d failed",
                self._peer,
                header.api_key,
                header.api_version,
            )
        return None

    async def _run(self, slot: _Slot, admitted: _Admitted, received: float) -> None:
        metrics = admitted.metrics
        try:
            if admitted.in_turn:
                await slot.turn.wait()
            response = slot.response = await admitted.pending()
            if metrics is not None:
                metrics.answered(received)
            if response is not None:
                BYTES_OUT.inc(_size(response))
            if slot is self._head and self._cancel_safe:
                self._write_now(slot)
        except Exception:
            if metrics is not None:
                metrics.error(ErrorCode.UNKNOWN_SERVER_ERROR)
            # A bug in one request must not take the node down: drop only this connection.
            log.exception("request from %s failed; closing its connection", self._peer)
            self._nursery.cancel_scope.cancel()
        finally:
            slot.done.set()

    async def _write_responses(self, receive: trio.MemoryReceiveChannel[_Slot]) -> None:
        async with receive:
            async for slot in receive:
                slot.turn.set()
                if not slot.done.is_set():
                    self._head = slot
                    try:
                        await slot.done.wait()
                    finally:
                        self._head = None
                response = slot.response
                if response is not None:
                    for chunk in _chunks(response):
                        await self._stream.send_all(chunk)
                self._in_flight -= 1
                self._last_active = trio.current_time()
                if self._draining and self._in_flight == 0:
                    # Every response is out: the blocked read may be cut now.
                    self._stop_admitting()
                failed = self._auth is not None and self._auth.failed
                if failed and not receive.statistics().current_buffer_used:
                    # Kafka closes after answering a failed SASL step (always the last one
                    # read). Only now: cancelling a read on a TLS stream earlier would break
                    # it before the answer is out.
                    self._nursery.cancel_scope.cancel()
                    return

    def _write_now(self, slot: _Slot) -> None:
        """Write what the socket takes of `slot`'s response without waiting; the writer
        task sends the rest (and meets any error, which this leaves to it)."""
        response = slot.response
        if response is None or _size(response) > SEND_CHUNK:
            return  # a large response goes out in chunks, from the writer task
        assert isinstance(self._stream, trio.SocketStream)
        fd = self._stream.socket.fileno()
        if fd < 0:
            return
        data = _joined(response)
        try:
            # Trio's sockets are non-blocking, and the writer task is parked on this slot.
            written = os.write(fd, data)
        except OSError:
            written = 0
        if written:
            self._last_active = trio.current_time()
        slot.response = [memoryview(data)[written:]] if written < len(data) else None


def _size(response: list[bytes | memoryview] | bytes) -> int:
    if isinstance(response, bytes | bytearray):
        return len(response)
    return sum(memoryview(part).nbytes for part in response)


def _chunks(response: list[bytes | memoryview] | bytes) -> Iterator[bytes | memoryview]:
    """The response in pieces of about SEND_CHUNK bytes: small parts joined (one send each
    piece), large ones as they are. Never the whole response joined: that would copy a
    55 MiB fetch response once more, on the event loop, and hold it twice."""
    if isinstance(response, bytes | bytearray):
        yield response
        return
    group: list[bytes | memoryview] = []
    grouped = 0
    for part in response:
        size = memoryview(part).nbytes
        if size >= SEND_CHUNK:
            if group:
                yield _joined(group)
                group, grouped = [], 0
            yield part
            continue
        group.append(part)
        grouped += size
        if grouped >= SEND_CHUNK:
            yield _joined(group)
            group, grouped = [], 0
    if group:
        yield _joined(group)


def _joined(response: list[bytes | memoryview] | bytes) -> bytes | memoryview:
    if isinstance(response, bytes | bytearray):
        return response
    return response[0] if len(response) == 1 else b"".join(response)
