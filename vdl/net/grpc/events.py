"""Typed events produced by :class:`vdl.net.grpc.connection.GrpcConnection`.

They are the whole contract between the sans-I/O core and the Trio code around it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .metadata import Metadata
from .status import StatusCode


@dataclass(frozen=True, slots=True)
class RequestReceived:
    """Server side: a client opened a call."""

    stream_id: int
    method: str
    metadata: Metadata
    timeout: float | None  # seconds, from grpc-timeout
    authority: str


@dataclass(frozen=True, slots=True)
class ResponseHeadersReceived:
    """Client side: the server's initial metadata arrived."""

    stream_id: int
    metadata: Metadata


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """A whole message. Hand ``flow_credit`` back via ``message_consumed`` once it is used."""

    stream_id: int
    data: bytes
    flow_credit: int


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The peer half-closed the stream: no more messages will arrive on it."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class TrailersReceived:
    """Client side: the call's final status (also for a trailers-only response)."""

    stream_id: int
    status: StatusCode
    message: str
    metadata: Metadata


@dataclass(frozen=True, slots=True)
class StreamReset:
    """The stream was reset (RST_STREAM from the peer, or by h2 on a stream error)."""

    stream_id: int
    error_code: int
    remote: bool


@dataclass(frozen=True, slots=True)
class StreamFailed:
    """Our side cannot continue a stream (bad or oversized message). Nothing was sent yet:
    the server answers with ``status`` in trailers, the client resets the stream."""

    stream_id: int
    status: StatusCode
    message: str


@dataclass(frozen=True, slots=True)
class WindowUpdated:
    """Send credit grew (``stream_id`` 0: the whole connection); blocked senders may go on."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class PingReceived:
    """The peer pinged us; the ACK is already queued in the outgoing bytes."""

    data: bytes


@dataclass(frozen=True, slots=True)
class PingAcknowledged:
    """The ACK for one of our PINGs."""

    data: bytes


@dataclass(frozen=True, slots=True)
class GoAwayReceived:
    """The peer will accept no stream above ``last_stream_id``; lower ones may complete
    when ``error_code`` is 0 (NO_ERROR), otherwise the connection is finished."""

    last_stream_id: int
    error_code: int
    debug_data: bytes


@dataclass(frozen=True, slots=True)
class ConnectionFailed:
    """A protocol error: the GOAWAY is queued, send it and close the transport."""

    message: str


Event = (
    RequestReceived
    | ResponseHeadersReceived
    | MessageReceived
    | StreamEnded
    | TrailersReceived
    | StreamReset
    | StreamFailed
    | WindowUpdated
    | PingReceived
    | PingAcknowledged
    | GoAwayReceived
    | ConnectionFailed
)
