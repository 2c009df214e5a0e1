"""A small HTTP/1.1 server on Trio for the admin listener: h11 parses, this shell does I/O.

h11 is the sans-I/O core (bytes in, events out, as our gRPC layer uses h2); this module
only moves bytes between it and a Trio stream, bounds what a client may cost, and calls
one handler per request. Only GET and HEAD are served: the admin API reads state.

What a client may cost: a connection sends its request head within `request_timeout`
(a slow-loris client is dropped), a head larger than `max_head_bytes` is answered 431, a
request body is refused (413) since no endpoint takes one, and every listener shares its
connection limits (`ConnectionLimits`) with the node's other listeners' settings. A bad
request gets 400 and one log line; the node serves everyone else meanwhile.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

import h11
import trio

from vdl.net.limits import ConnectionLimits
from vdl.net.listen import open_listeners

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
_READ_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]  # lower-case names; a repeated header keeps its last value
    peer: str


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def text(cls, status: int, text: str) -> Response:
        return cls(status, (text + "\n").encode())


Handler = Callable[[Request], Awaitable[Response]]


class _BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


async def _linger(stream: trio.abc.Stream, seconds: float = 1.0, limit: int = 1 << 20) -> None:
    """Before closing on a request we did not read to its end: stop sending and read
    (and drop) what the client still sends, a little while. Closing with unread bytes
    would make the kernel reset the connection, and the client could lose our answer
    (RFC 9112, section 9.6)."""
    if isinstance(stream, trio.SocketStream):
        try:
            await stream.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return
    with trio.move_on_after(seconds):
        drained = 0
        while drained < limit:
            data = await stream.receive_some(_READ_BYTES)
            if not data:
                return
            drained += len(data)


class HttpServer:
    def __init__(
        self,
        handler: Handler,
        *,
        ssl_context: ssl.SSLContext | None = None,
        limits: ConnectionLimits | None = None,
        request_timeout: float = 10.0,
        idle_timeout: float = 60.0,
        max_head_bytes: int = MAX_HEAD_BYTES,
        name: str = "admin HTTP",
    ) -> None:
        self._handler = handler
        self._ssl = ssl_context
        self._limits = limits or ConnectionLimits(name)
        self._request_timeout = request_timeout
        self._idle_timeout = idle_timeout
        self._max_head = max_head_bytes
        self._name = name
        self.ports: list[int] = []

    async def serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on host:port and serve until cancelled; started() with the bound port."""
        listeners = await open_listeners(host, port, f"the {self._name} API")
        self.ports = [ln.socket.getsockname()[1] for ln in listeners]
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(self._accept_loop, listener, nursery)
            task_status.started(self.ports[0])

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    log.warning("%s accept failed: %s", self._name, exc)
                    await trio.sleep(0.1)
                    continue
                nursery.start_soon(self._connection, stream)

    async def _connection(self, stream: trio.SocketStream) -> None:
        try:
            peer = stream.socket.getpeername()
            host = str(peer[0])
            peer_text = f"{host}:{peer[1]}"
        except OSError:
            await trio.aclose_forcefully(stream)
            return
        if not self._limits.admit(host):
            await trio.aclose_forcefully(stream)
            return
        try:
            transport: trio.abc.Stream = stream
            if self._ssl is not None:
                tls = trio.SSLStream(stream, self._ssl, server_side=True)
                with trio.move_on_after(self._request_timeout) as handshake:
                    try:
                        await tls.do_handshake()
                    except trio.BrokenResourceError as exc:
                        # Plain HTTP to a TLS port, an untrusted client certificate, ...
                        reason = exc.__cause__ or exc
                        log.info(
                            "%s: TLS handshake from %s failed: %s", self._name, peer_text, reason
                        )
                        return
                if handshake.cancelled_caught:
                    log.info("%s: TLS handshake from %s timed out", self._name, peer_text)
                    return
                transport = tls
            await self._serve_connection(transport, peer_text)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
            pass
        finally:
            self._limits.release(host)
            await trio.aclose_forcefully(stream)

    async def _serve_connection(self, stream: trio.abc.Stream, peer: str) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self._max_head)
        first = True
        while True:
            # The first request may take request_timeout to arrive; later ones idle_timeout.
            wait = self._request_timeout if first else self._idle_timeout
            try:
                request = await self._read_request(conn, stream, wait, peer)
            except _BadRequest as bad:
                log.info("%s: bad request from %s: %s", self._name, peer, bad)
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await self._send(
                        conn, stream, Response.text(bad.status, str(bad)), head_only=False
                    )
                    await _linger(stream)
                return
            if request is None:
                return
            first = False
            try:
                response = await self._handler(request)
            except Exception:
                log.exception("%s: %s %s failed", self._name, request.method, request.path)
                response = Response.text(500, "internal error")
            await self._send(conn, stream, response, head_only=request.method == "HEAD")
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _read_request(
        self, conn: h11.Connection, stream: trio.abc.Stream, wait: float, peer: str
    ) -> Request | None:
        """The next request (body refused), None when the client closed or went quiet."""
        with trio.move_on_after(wait):
            head: h11.Request | None = None
            received = 0  # bytes read for this request's head
            while True:
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError as exc:
                    status = 431 if "too long" in str(exc).lower() else exc.error_status_hint
                    raise _BadRequest(status, str(exc) or "malformed request") from None
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(_READ_BYTES)
                    if not data:
                        # A client that closes mid-request is not an error of ours.
                        return None
                    if head is None:
                        received += len(data)
                        if received > self._max_head + _READ_BYTES:
                            raise _BadRequest(431, "request head too large")
                    conn.receive_data(bytes(data))
                    continue
                if isinstance(event, h11.ConnectionClosed):
                    return None
                if isinstance(event, h11.Request):
                    if sum(len(n) + len(v) + 4 for n, v in event.headers) > self._max_head:
                        raise _BadRequest(431, "request head too large")
                    head = event
                    method = event.method.decode("ascii", "replace")
                    if method not in ("GET", "HEAD"):
                        raise _BadRequest(405, f"method {method} not allowed")
                    continue
                if isinstance(event, h11.Data):
                    raise _BadRequest(413, "the admin API takes no request body")
                if isinstance(event, h11.EndOfMessage) and head is not None:
                    target = head.target.decode("ascii", "replace")
                    parts = urlsplit(target)
                    headers = {
                        name.decode("ascii", "replace").lower(): value.decode("latin-1")
                        for name, value in head.headers
                    }
                    return Request(
                        method=head.method.decode("ascii"),
                        path=parts.path or "/",
                        query=parse_qs(parts.query),
                        headers=headers,
                        peer=peer,
                    )
        return None

    async def _send(
        self, conn: h11.Connection, stream: trio.abc.Stream, response: Response, *, head_only: bool
    ) -> None:
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
            *response.headers,
        ]
        if response.status >= 400 and conn.their_state is not h11.DONE:
            # The request was not read to its end: this connection cannot carry another.
            headers.append(("Connection", "close"))
        try:
            reason = HTTPStatus(response.status).phrase.encode()
        except ValueError:
            reason = b""
        out = conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
        if not head_only and response.body:
            out = (out or b"") + (conn.send(h11.Data(data=response.body)) or b"")
        out = (out or b"") + (conn.send(h11.EndOfMessage()) or b"")
        with trio.move_on_after(self._idle_timeout):
            await stream.send_all(out)
