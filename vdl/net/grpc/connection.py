"""The sans-I/O gRPC-over-HTTP/2 connection shared by our server and our client.

:class:`GrpcConnection` wraps an ``h2`` connection. The caller feeds it received bytes and
gets typed events (``events.py``) back; calls on it queue frames, and ``data_to_send()``
returns the bytes to write. It never touches a socket or a clock, so every protocol
behaviour can be driven from tests byte by byte.

Flow control, the part that makes a slow consumer slow down its peer:

* Inbound credit is returned only when the application takes a message out of its buffer
  (``message_consumed``), so the peer can have at most one stream window of messages
  waiting per stream and one connection window overall. The reader task therefore never
  blocks on a full per-stream buffer (which would stall every other stream): the buffer is
  bounded by the window the peer must respect, and h2 fails a peer that overruns it.
* Bytes of a message still being assembled are credited ahead while the application has
  nothing to read on that stream, otherwise a message larger than the window could never
  complete; while complete messages wait unread, they are held back too. Crediting ahead
  lets bytes in beyond the windows, so it is bounded per connection, as gRPC-core's
  resource quota bounds a transport: a message must first reserve its whole size against
  ``memory_budget``, and the reservation is released when the application consumes it. A
  message that does not fit waits, its bytes uncredited, until one does; a message alone
  on its connection is always admitted, so any message up to the size limit completes and
  admitted messages never wait on each other. Buffered request bytes are thus at most
  ``max(memory_budget, max_receive_message_size)`` plus the connection window.
* Outbound messages are queued per stream and written as far as the peer's windows allow;
  the rest follows on WINDOW_UPDATE. ``outbound_pending`` tells the Trio side when a send
  has fully left, which is what makes a sender block on an exhausted window.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

import h2.events
import h2.exceptions
from h2.config import H2Configuration
from h2.connection import ConnectionState
from h2.errors import ErrorCodes
from h2.settings import SettingCodes, Settings
from hyperframe.frame import GoAwayFrame

from . import events as ev
from .framing import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FramingError,
    MessageDecoder,
    encode_message_prefix,
)
from .h2_workarounds import DrainableH2Connection, install_cheap_data_frame_repr
from .metadata import (
    MetadataLike,
    decode_grpc_message,
    encode_grpc_message,
    header_value,
    headers_from_metadata,
    metadata_from_headers,
)
from .status import GrpcError, StatusCode, status_from_http
from .timeout import format_grpc_timeout, parse_grpc_timeout

logger = logging.getLogger("vdl.net.grpc")

# The window every HTTP/2 connection starts with, which SETTINGS cannot change.
_DEFAULT_CONNECTION_WINDOW = 65_535
_MAX_WINDOW = 2**31 - 1
_USER_AGENT = b"vdl-grpc/0.1"


@dataclass(frozen=True, slots=True)
class GrpcSettings:
    """Tunables of one connection; the same object configures servers and clients."""

    max_send_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_receive_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    # Go's net/http2 server allows 250 (its defaultMaxStreams); RFC 9113 §6.5.2
    # recommends no fewer than 100.
    max_concurrent_streams: int = 250
    # Large frames mean fewer h2 events per message, and per-frame cost dominates.
    max_frame_size: int = 1 << 20
    stream_window_size: int = 4 << 20
    connection_window_size: int = 32 << 20
    max_header_list_size: int = 64 << 10
    # Request bytes credited ahead of the windows per connection (see the module doc).
    memory_budget: int = 32 << 20

    def __post_init__(self) -> None:
        if not 16_384 <= self.max_frame_size <= 16_777_215:
            raise ValueError("max_frame_size must be within 2**14 .. 2**24-1")
        for name in ("stream_window_size", "connection_window_size"):
            value = getattr(self, name)
            if not 1 <= value <= _MAX_WINDOW:
                raise ValueError(f"{name} must be within 1 .. 2**31-1")
        if self.memory_budget < 1:
            raise ValueError("memory_budget must be positive")
        if self.max_concurrent_streams < 1:
            raise ValueError("max_concurrent_streams must be positive")


class StreamGoneError(Exception):
    """The stream was reset or finished; nothing more can be sent on it."""


@dataclass(slots=True)
class _Inbound:
    decoder: MessageDecoder
    # Messages handed out in MessageReceived and not yet consumed, and the credit they hold.
    held: int = 0
    # Per waiting message, in order: the budget reservation it releases when consumed.
    reservations: deque[int] = field(default_factory=deque)
    # Bytes of the incomplete message already credited back to the peer.
    acked_ahead: int = 0
    # Budget reserved by the incomplete message (0 until it is admitted).
    reserved: int = 0
    failed: bool = False

    @property
    def waiting(self) -> int:
        return len(self.reservations)


@dataclass(slots=True)
class _Outbound:
    chunks: deque[memoryview] = field(default_factory=deque)
    pending: int = 0
    sent: int = 0
    # Cumulative end offsets of queued messages, to know whether one is half-written.
    boundaries: deque[int] = field(default_factory=deque)
    last_boundary: int = 0
    # What to do once everything queued has left: trailers (server) or END_STREAM (client).
    final_headers: list[tuple[bytes, bytes]] | None = None
    end_stream: bool = False
    reset_after_end: bool = False

    def take(self, size: int) -> bytes | memoryview:
        first = self.chunks[0]
        if len(first) > size:
            self.chunks[0] = first[size:]
            chunk: bytes | memoryview = first[:size]
        elif len(first) == size or len(self.chunks) == 1:
            self.chunks.popleft()
            chunk = first
        else:
            # A frame spanning a 5-byte prefix and the payload: join at most one frame.
            parts: list[memoryview] = []
            remaining = size
            while remaining and self.chunks:
                head = self.chunks[0]
                if len(head) <= remaining:
                    parts.append(head)
                    self.chunks.popleft()
                    remaining -= len(head)
                else:
                    parts.append(head[:remaining])
                    self.chunks[0] = head[remaining:]
                    remaining = 0
            chunk = b"".join(parts)
        self.pending -= len(chunk)
        self.sent += len(chunk)
        while self.boundaries and self.boundaries[0] <= self.sent:
            self.last_boundary = self.boundaries.popleft()
        return chunk

    @property
    def mid_message(self) -> bool:
        return self.sent != self.last_boundary


@dataclass(slots=True)
class _Stream:
    inbound: _Inbound
    outbound: _Outbound = field(default_factory=_Outbound)
    headers_sent: bool = False
    local_ended: bool = False
    remote_ended: bool = False
    trailers_received: bool = False


class GrpcConnection:
    """One HTTP/2 connection carrying gRPC calls, client or server side."""

    def __init__(self, *, client_side: bool, settings: GrpcSettings | None = None) -> None:
        install_cheap_data_frame_repr()
        self.client_side = client_side
        self.settings = settings or GrpcSettings()
        config = H2Configuration(
            client_side=client_side,
            header_encoding=None,
            # Our own headers are built well-formed; validating them costs ~10 % per call.
            # What the peer sends is still validated.
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=True,
        )
        self._h2 = DrainableH2Connection(config=config)
        s = self.settings
        self._h2.local_settings = Settings(
            client=client_side,
            initial_values={
                SettingCodes.ENABLE_PUSH: 0,
                SettingCodes.MAX_CONCURRENT_STREAMS: s.max_concurrent_streams,
                SettingCodes.INITIAL_WINDOW_SIZE: s.stream_window_size,
                SettingCodes.MAX_FRAME_SIZE: s.max_frame_size,
                SettingCodes.MAX_HEADER_LIST_SIZE: s.max_header_list_size,
            },
        )
        # h2 applies a new inbound frame limit only when the peer ACKs our SETTINGS, yet the
        # peer may send big frames as soon as it has read them: a read holding the ACK and
        # a large frame would be rejected as "overlong". Accept the size we advertise now.
        self._h2.max_inbound_frame_size = s.max_frame_size
        self._h2.decoder.max_header_list_size = s.max_header_list_size
        self._h2.initiate_connection()
        if s.connection_window_size > _DEFAULT_CONNECTION_WINDOW:
            self._h2.increment_flow_control_window(
                s.connection_window_size - _DEFAULT_CONNECTION_WINDOW
            )
        self._streams: dict[int, _Stream] = {}
        # Bytes we wrote around h2 (the first GOAWAY of a graceful shutdown), in order.
        self._out = bytearray()
        self._sending: dict[int, None] = {}  # ordered set: streams with queued data
        # Budget reserved by messages credited ahead, and the streams waiting to reserve.
        self.reserved = 0
        self._starved: dict[int, None] = {}  # ordered set, first come first admitted
        self._replies_queued = 0
        self.remote_settings_received = False
        self.goaway_sent_last_stream_id: int | None = None
        self.goaway_received: ev.GoAwayReceived | None = None
        self.closed = False

    # ------------------------------------------------------------------ I/O boundary

    def receive_data(self, data: bytes | bytearray) -> list[ev.Event]:
        """Process bytes read from the transport; return what happened, in order."""
        if self.closed:
            return []
        queued = self._h2.queued_bytes
        try:
            h2_events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            # h2 has queued a GOAWAY with the right error code; the caller sends and closes.
            logger.warning("HTTP/2 protocol error from peer: %s", exc)
            self.closed = True
            return [ev.ConnectionFailed(str(exc) or type(exc).__name__)]
        # What h2 queued by itself while reading: ACKs, RST_STREAMs, its WINDOW_UPDATEs.
        self._replies_queued += self._h2.queued_bytes - queued
        out: list[ev.Event] = []
        for event in h2_events:
            try:
                self._translate(event, out)
            except h2.exceptions.ProtocolError as exc:
                # h2 reads a whole batch before we answer any of it, so a later frame of
                # the same read may have closed the stream (RST_STREAM, a higher stream
                # id) or the connection (GOAWAY) an answer to an earlier one is for.
                if self._h2.state_machine.state is not ConnectionState.CLOSED:
                    self._forget(getattr(event, "stream_id", 0) or 0)
                    continue
                logger.warning("HTTP/2 connection closed by the peer's own frames: %s", exc)
                self.closed = True
                out.append(ev.ConnectionFailed(str(exc) or type(exc).__name__))
                return out
        if self._starved:
            self._relieve_starvation(out)
        self._pump()
        return out

    def data_to_send(self) -> bytes:
        """Bytes to write to the transport now (possibly empty)."""
        if self._out:
            self._out += self._h2.data_to_send()
            data = bytes(self._out)
            self._out.clear()
            return data
        return self._h2.data_to_send()

    @property
    def queued_bytes(self) -> int:
        """Bytes ready to send and not yet taken by ``data_to_send``."""
        return len(self._out) + self._h2.queued_bytes

    def take_replies_queued(self) -> int:
        """Bytes of frames h2 queued in reply to received ones (PING and SETTINGS ACKs,
        RST_STREAM...) since the last call: the part of our output the peer controls."""
        replies, self._replies_queued = self._replies_queued, 0
        return replies

    def connection_lost(self) -> list[ev.Event]:
        """The transport is gone: every open stream counts as reset."""
        self.closed = True
        lost: list[ev.Event] = [
            ev.StreamReset(sid, ErrorCodes.CANCEL, remote=True) for sid in self._streams
        ]
        self._streams.clear()
        self._sending.clear()
        return lost

    # ------------------------------------------------------------------ calls

    def start_request(
        self,
        method: str,
        metadata: MetadataLike = None,
        *,
        authority: str,
        scheme: str = "http",
        timeout: float | None = None,
    ) -> int:
        """Client side: open a call and return its stream id."""
        assert self.client_side
        if self.closed or self.goaway_received is not None:
            raise GrpcError(StatusCode.UNAVAILABLE, "connection is shutting down")
        stream_id = self._h2.get_next_available_stream_id()
        headers = [
            (b":method", b"POST"),
            (b":scheme", scheme.encode("ascii")),
            (b":path", method.encode("ascii")),
            (b":authority", authority.encode("ascii")),
            (b"te", b"trailers"),
            (b"content-type", b"application/grpc"),
            (b"grpc-accept-encoding", b"identity"),
            (b"user-agent", _USER_AGENT),
        ]
        if timeout is not None:
            headers.append((b"grpc-timeout", format_grpc_timeout(timeout).encode("ascii")))
        headers.extend(headers_from_metadata(metadata))
        self._h2.send_headers(stream_id, headers)
        self._streams[stream_id] = _Stream(
            _Inbound(MessageDecoder(self.settings.max_receive_message_size)),
            headers_sent=True,
        )
        return stream_id

    def send_response_headers(self, stream_id: int, metadata: MetadataLike = None) -> None:
        """Server side: send initial metadata (done implicitly by the first message)."""
        stream = self._live_stream(stream_id)
        if stream.headers_sent:
            return
        stream.headers_sent = True
        headers = [
            (b":status", b"200"),
            (b"content-type", b"application/grpc"),
            (b"grpc-accept-encoding", b"identity"),
        ]
        headers.extend(headers_from_metadata(metadata))
        self._h2.send_headers(stream_id, headers)

    def send_message(self, stream_id: int, payload: bytes | bytearray | memoryview) -> None:
        """Queue one message; it leaves as the peer's windows allow."""
        stream = self._live_stream(stream_id)
        if stream.local_ended or stream.outbound.end_stream:
            raise StreamGoneError(f"stream {stream_id} is half-closed")
        size = len(payload)
        if size > self.settings.max_send_message_size:
            raise GrpcError(
                StatusCode.RESOURCE_EXHAUSTED,
                f"sent message larger than max ({size} vs. {self.settings.max_send_message_size})",
            )
        if not self.client_side and not stream.headers_sent:
            self.send_response_headers(stream_id)
        out = stream.outbound
        out.chunks.append(memoryview(encode_message_prefix(size)))
        if size:
            out.chunks.append(memoryview(payload).cast("B"))
        out.pending += size + 5
        out.boundaries.append(out.sent + out.pending)
        self._sending[stream_id] = None
        self._pump()

    def end_stream(self, stream_id: int) -> None:
        """Client side: half-close (no more messages) once queued messages have left."""
        stream = self._live_stream(stream_id)
        if stream.local_ended or stream.outbound.end_stream:
            return
        stream.outbound.end_stream = True
        self._sending[stream_id] = None
        self._pump()

    def send_trailers(
        self,
        stream_id: int,
        status: StatusCode,
        message: str = "",
        metadata: MetadataLike = None,
        *,
        discard_pending: bool = False,
    ) -> bool:
        """Server side: finish a call with ``status``.

        Queued messages go first unless ``discard_pending`` (used when the handler failed or
        was cancelled). If a message was already half-written, trailers would corrupt the
        stream, so it is reset instead. Returns False if the stream was reset.
        """
        assert not self.client_side
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_ended or stream.outbound.end_stream:
            return False
        out = stream.outbound
        if discard_pending and out.pending:
            if out.mid_message:
                self.reset_stream(stream_id, ErrorCodes.INTERNAL_ERROR)
                return False
            out.chunks.clear()
            out.boundaries.clear()
            out.pending = 0
        headers: list[tuple[bytes, bytes]] = []
        if not stream.headers_sent:
            # Trailers-only response: status and trailers in the one HEADERS frame.
            stream.headers_sent = True
            headers += [(b":status", b"200"), (b"content-type", b"application/grpc")]
        headers.append((b"grpc-status", str(int(status)).encode("ascii")))
        if message:
            headers.append((b"grpc-message", encode_grpc_message(message)))
        headers.extend(headers_from_metadata(metadata))
        out.final_headers = headers
        out.end_stream = True
        self._sending[stream_id] = None
        self._pump()
        return True

    def reset_stream(self, stream_id: int, error_code: int = ErrorCodes.CANCEL) -> None:
        """Abort a stream (RST_STREAM); a no-op if it is already gone."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        try:
            self._h2.reset_stream(stream_id, error_code)
        except h2.exceptions.StreamClosedError:
            pass
        self._forget(stream_id)

    def message_consumed(self, stream_id: int, flow_credit: int) -> None:
        """The application took a message out of its buffer: give the peer its credit."""
        stream = self._streams.get(stream_id)
        if stream is None:
            # The stream's credit was returned in full when it closed.
            return
        inbound = stream.inbound
        released = inbound.reservations.popleft() if inbound.reservations else 0
        inbound.held -= flow_credit
        credit = flow_credit
        if inbound.waiting == 0:
            # Nothing left to read: let the message being assembled come in.
            credit += self._credit_ahead(stream_id, inbound)
        if credit > 0:
            self._h2.acknowledge_received_data(credit, stream_id)
        if released:
            self._release(released)
        elif self._starved and not self.closed:
            self._h2.announce_connection_credit()

    def outbound_pending(self, stream_id: int) -> int:
        """Bytes queued on a stream and not yet handed to h2 (0 if the stream is gone)."""
        stream = self._streams.get(stream_id)
        return stream.outbound.pending if stream is not None else 0

    @property
    def stream_slot_free(self) -> bool:
        """Client side: the peer's concurrent-stream limit allows one more call now."""
        limit = self._h2.remote_settings.max_concurrent_streams
        if not self.remote_settings_received:
            # Before the peer's SETTINGS, assume the least RFC 9113 §6.5.2 recommends.
            limit = 100
        return self._h2.open_outbound_streams < limit

    def is_open(self, stream_id: int) -> bool:
        return stream_id in self._streams

    @property
    def open_stream_count(self) -> int:
        return len(self._streams)

    # ------------------------------------------------------------------ connection

    def ping(self, data: bytes) -> None:
        """Send a PING with 8 bytes of opaque data."""
        self._h2.ping(data)

    def start_graceful_shutdown(self) -> int:
        """Send GOAWAY(NO_ERROR) and refuse streams above the last one we have seen.

        h2's own ``close_connection`` would close the connection for every stream at once
        (see ``h2_workarounds``), so this first GOAWAY is written around it; ``close()``
        sends the final one when the open streams are done.
        """
        if self.goaway_sent_last_stream_id is None:
            last = self._h2.highest_inbound_stream_id
            self.goaway_sent_last_stream_id = last
            frame = GoAwayFrame(stream_id=0, last_stream_id=last, error_code=0)
            self._out += self._h2.data_to_send()
            self._out += frame.serialize()
        return self.goaway_sent_last_stream_id

    def close(self, error_code: int = ErrorCodes.NO_ERROR, message: str = "") -> None:
        """Send the final GOAWAY; afterwards only ``data_to_send`` is meaningful."""
        if self.closed:
            return
        self.closed = True
        try:
            self._h2.close_connection(
                error_code=error_code, additional_data=message.encode("utf-8") or None
            )
        except h2.exceptions.ProtocolError:
            pass

    # ------------------------------------------------------------------ internals

    def _live_stream(self, stream_id: int) -> _Stream:
        stream = self._streams.get(stream_id)
        if stream is None or self.closed:
            raise StreamGoneError(f"stream {stream_id} is closed")
        return stream

    def _forget(self, stream_id: int) -> None:
        """Drop a finished stream, returning any credit its unread data still holds."""
        stream = self._streams.pop(stream_id, None)
        self._sending.pop(stream_id, None)
        if stream is None:
            return
        self._starved.pop(stream_id, None)
        inbound = stream.inbound
        credit = inbound.held + inbound.decoder.buffered - inbound.acked_ahead
        if credit > 0 and not self.closed:
            # Only the connection window matters now; h2 ignores the closed stream's.
            self._h2.acknowledge_received_data(credit, stream_id)
        released = inbound.reserved + sum(inbound.reservations)
        inbound.reserved = 0
        inbound.reservations.clear()
        if released:
            self._release(released)

    def _credit_ahead(self, stream_id: int, inbound: _Inbound) -> int:
        """Credit the uncredited bytes of the message being assembled if its reservation
        fits the budget (see the module doc); returns the credit to give, else 0."""
        partial = inbound.decoder.buffered - inbound.acked_ahead
        if partial <= 0:
            return 0
        size = inbound.decoder.expected_size
        if size is not None and not inbound.reserved:
            if self.reserved and self.reserved + size > self.settings.memory_budget:
                self._starved[stream_id] = None
                return 0
            inbound.reserved = size
            self.reserved += size
        self._starved.pop(stream_id, None)
        inbound.acked_ahead += partial
        return partial

    def _relieve_starvation(self, out: list[ev.Event]) -> None:
        """Keep the connection window usable for admitted messages.

        Bytes of streams waiting for budget hold connection window; if they hold nearly
        all of it, admitted messages could never complete and the connection would stall
        for good. The streams that came last fail with RESOURCE_EXHAUSTED (their call ends,
        the client may retry) until a frame's worth of window is free again.
        """
        window = self.settings.connection_window_size
        limit = window - min(self.settings.max_frame_size, window // 4)
        held = {
            sid: stream.inbound.decoder.buffered - stream.inbound.acked_ahead
            for sid in self._starved
            if (stream := self._streams.get(sid)) is not None
        }
        total = sum(held.values())
        for sid in reversed(list(held)):
            if total <= limit:
                break
            stream = self._streams[sid]
            partial = held[sid]
            total -= partial
            self._starved.pop(sid)
            stream.inbound.failed = True
            stream.inbound.acked_ahead += partial
            if partial > 0:
                self._h2.acknowledge_received_data(partial, sid)
            out.append(
                ev.StreamFailed(
                    sid, StatusCode.RESOURCE_EXHAUSTED, "connection memory budget exhausted"
                )
            )
        # Credit given while the window was not yet empty must reach the peer now.
        self._h2.announce_connection_credit()

    def _release(self, amount: int) -> None:
        """Give back budget and admit the streams that were waiting for it, in order."""
        self.reserved -= amount
        if not self._starved:
            return
        for stream_id in list(self._starved):
            stream = self._streams.get(stream_id)
            if stream is None or stream.inbound.waiting or stream.inbound.failed:
                # Its partial is credited when its waiting messages are consumed.
                self._starved.pop(stream_id, None)
                continue
            credit = self._credit_ahead(stream_id, stream.inbound)
            if stream_id in self._starved:
                break
            if credit > 0 and not self.closed:
                self._h2.acknowledge_received_data(credit, stream_id)
        if not self.closed:
            self._h2.announce_connection_credit()

    def _maybe_finished(self, stream_id: int, stream: _Stream) -> None:
        if stream.local_ended and stream.remote_ended:
            self._forget(stream_id)

    def _pump(self) -> None:
        """Write queued data as far as windows allow, one frame per stream per round so
        that one large message does not starve the other streams."""
        if self.closed:
            return
        while self._sending:
            progressed = False
            for stream_id in list(self._sending):
                stream = self._streams.get(stream_id)
                if stream is None:
                    self._sending.pop(stream_id, None)
                    continue
                out = stream.outbound
                if out.pending:
                    window = min(
                        self._h2.local_flow_control_window(stream_id),
                        self._h2.max_outbound_frame_size,
                    )
                    if window <= 0:
                        continue
                    self._h2.send_data(stream_id, out.take(min(window, out.pending)))
                    progressed = True
                if not out.pending:
                    self._sending.pop(stream_id, None)
                    if out.end_stream:
                        self._finish_sending(stream_id, stream)
                        progressed = True
            if not progressed:
                break

    def _finish_sending(self, stream_id: int, stream: _Stream) -> None:
        out = stream.outbound
        if out.final_headers is not None:
            self._h2.send_headers(stream_id, out.final_headers, end_stream=True)
        else:
            self._h2.end_stream(stream_id)
        stream.local_ended = True
        if not self.client_side and not stream.remote_ended:
            # The response is complete while the client is still sending: ask it to stop
            # without error (RFC 9113 §8.1) rather than read what nobody will process.
            self.reset_stream(stream_id, ErrorCodes.NO_ERROR)
            return
        self._maybe_finished(stream_id, stream)

    def _translate(self, event: h2.events.Event, out: list[ev.Event]) -> None:
        if isinstance(event, h2.events.DataReceived):
            self._on_data(event, out)
        elif isinstance(event, h2.events.RequestReceived):
            self._on_request(event, out)
        elif isinstance(event, h2.events.ResponseReceived):
            self._on_response(event, out)
        elif isinstance(event, h2.events.TrailersReceived):
            self._on_trailers(event.stream_id, event.headers or [], out)
        elif isinstance(event, h2.events.StreamEnded):
            self._on_stream_ended(event.stream_id, out)
        elif isinstance(event, h2.events.StreamReset):
            sid = event.stream_id
            if sid in self._streams:
                self._forget(sid)
                out.append(ev.StreamReset(sid, int(event.error_code or 0), event.remote_reset))
        elif isinstance(event, h2.events.WindowUpdated):
            out.append(ev.WindowUpdated(event.stream_id or 0))
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self.remote_settings_received = True
            if SettingCodes.INITIAL_WINDOW_SIZE in event.changed_settings:
                out.append(ev.WindowUpdated(0))
        elif isinstance(event, h2.events.PingReceived):
            out.append(ev.PingReceived(event.ping_data or b""))
        elif isinstance(event, h2.events.PingAckReceived):
            out.append(ev.PingAcknowledged(event.ping_data or b""))
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._on_goaway(event, out)

    def _on_request(self, event: h2.events.RequestReceived, out: list[ev.Event]) -> None:
        sid = event.stream_id
        if sid is None:
            return
        if self.goaway_sent_last_stream_id is not None and sid > self.goaway_sent_last_stream_id:
            # We promised in the GOAWAY not to process it; the client may retry elsewhere.
            self._h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            return
        headers = event.headers or []
        stream = _Stream(_Inbound(MessageDecoder(self.settings.max_receive_message_size)))
        self._streams[sid] = stream
        method = header_value(headers, b":method")
        content_type = header_value(headers, b"content-type") or b""
        path = (header_value(headers, b":path") or b"").decode("ascii", "replace")
        if method != b"POST" or not content_type.startswith(b"application/grpc"):
            stream.headers_sent = True
            status = b"405" if method != b"POST" else b"415"
            self._h2.send_headers(sid, [(b":status", status)], end_stream=True)
            stream.local_ended = True
            self.reset_stream(sid, ErrorCodes.NO_ERROR)
            return
        timeout: float | None = None
        raw_timeout = header_value(headers, b"grpc-timeout")
        if raw_timeout is not None:
            try:
                timeout = parse_grpc_timeout(raw_timeout.decode("ascii"))
            except (ValueError, UnicodeDecodeError):
                self.send_trailers(sid, StatusCode.INTERNAL, "malformed grpc-timeout")
                return
        authority = (header_value(headers, b":authority") or b"").decode("ascii", "replace")
        out.append(
            ev.RequestReceived(sid, path, metadata_from_headers(headers), timeout, authority)
        )

    def _on_response(self, event: h2.events.ResponseReceived, out: list[ev.Event]) -> None:
        sid = event.stream_id
        if sid is None or sid not in self._streams:
            return
        headers = event.headers or []
        http_status = header_value(headers, b":status")
        if http_status != b"200":
            code = int(http_status) if http_status and http_status.isdigit() else 0
            self._streams[sid].trailers_received = True
            out.append(
                ev.TrailersReceived(
                    sid, status_from_http(code), f"unexpected HTTP status {code}", ()
                )
            )
            return
        if header_value(headers, b"grpc-status") is not None:
            # Trailers-only response: no initial metadata of its own.
            self._on_trailers(sid, headers, out)
            return
        out.append(ev.ResponseHeadersReceived(sid, metadata_from_headers(headers)))

    def _on_trailers(
        self, sid: int | None, headers: list[tuple[bytes, bytes]], out: list[ev.Event]
    ) -> None:
        stream = self._streams.get(sid) if sid is not None else None
        if sid is None or stream is None or stream.trailers_received:
            return
        stream.trailers_received = True
        raw_status = header_value(headers, b"grpc-status")
        if raw_status is None:
            status, message = StatusCode.INTERNAL, "missing grpc-status in trailers"
        else:
            try:
                status = StatusCode.from_wire(int(raw_status))
            except ValueError:
                status = StatusCode.UNKNOWN
            message = decode_grpc_message(header_value(headers, b"grpc-message") or b"")
        if status is StatusCode.OK and not stream.inbound.decoder.at_message_boundary():
            status, message = StatusCode.INTERNAL, "stream ended in the middle of a message"
        out.append(ev.TrailersReceived(sid, status, message, metadata_from_headers(headers)))

    def _on_data(self, event: h2.events.DataReceived, out: list[ev.Event]) -> None:
        sid = event.stream_id
        data = event.data or b""
        flow = event.flow_controlled_length or 0
        stream = self._streams.get(sid) if sid is not None else None
        if sid is None or stream is None or stream.inbound.failed:
            if sid is not None and flow:
                self._h2.acknowledge_received_data(flow, sid)
            return
        inbound = stream.inbound
        credit_now = flow - len(data)  # padding never belongs to a message
        try:
            messages = inbound.decoder.feed(data)
        except FramingError as exc:
            inbound.failed = True
            out.append(ev.StreamFailed(sid, exc.status, exc.message))
            # Nobody will consume this stream's data any more.
            self._h2.acknowledge_received_data(flow, sid)
            return
        for message in messages:
            credit = len(message) + 5 - inbound.acked_ahead
            inbound.acked_ahead = 0
            inbound.reservations.append(inbound.reserved)
            inbound.reserved = 0
            inbound.held += credit
            out.append(ev.MessageReceived(sid, message, credit))
        if inbound.waiting == 0:
            credit_now += self._credit_ahead(sid, inbound)
        else:
            self._starved.pop(sid, None)
        if credit_now > 0:
            self._h2.acknowledge_received_data(credit_now, sid)

    def _on_stream_ended(self, sid: int | None, out: list[ev.Event]) -> None:
        stream = self._streams.get(sid) if sid is not None else None
        if sid is None or stream is None:
            return
        stream.remote_ended = True
        if not stream.inbound.failed and not stream.inbound.decoder.at_message_boundary():
            stream.inbound.failed = True
            out.append(
                ev.StreamFailed(sid, StatusCode.INTERNAL, "stream ended in the middle of a message")
            )
        if self.client_side and not stream.trailers_received:
            stream.trailers_received = True
            out.append(
                ev.TrailersReceived(sid, StatusCode.INTERNAL, "stream ended without trailers", ())
            )
        out.append(ev.StreamEnded(sid))
        self._maybe_finished(sid, stream)

    def _on_goaway(self, event: h2.events.ConnectionTerminated, out: list[ev.Event]) -> None:
        goaway = ev.GoAwayReceived(
            int(event.last_stream_id or 0),
            int(event.error_code or 0),
            event.additional_data or b"",
        )
        self.goaway_received = goaway
        if goaway.error_code != ErrorCodes.NO_ERROR:
            self.closed = True
        out.append(goaway)
