"""Pins of ``h2_workarounds``: the h2 versions they were written for, and the stream-limit
and oversized-header behaviour of a server connection, byte for byte, without sockets."""

from __future__ import annotations

from importlib import metadata

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from hyperframe.frame import DataFrame, Frame, GoAwayFrame, HeadersFrame, RstStreamFrame

from vdl.net.grpc import events as ev
from vdl.net.grpc.connection import GrpcConnection, GrpcSettings


def test_tested_h2_versions() -> None:
    # The workarounds reach into h2 internals; a new version must be checked against them.
    versions = {name: metadata.version(name) for name in ("h2", "hpack", "hyperframe")}
    assert versions == {"h2": "4.4.1", "hpack": "4.2.0", "hyperframe": "6.1.0"}


def _frames(data: bytes) -> list[Frame]:
    frames = []
    while data:
        frame, length = Frame.parse_frame_header(memoryview(data[:9]))
        frame.parse_body(memoryview(data[9 : 9 + length]))
        frames.append(frame)
        data = data[9 + length :]
    return frames


def _request(path: str, *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.encode()),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        *extra,
    ]


class RawClient:
    """A plain h2 client next to a server GrpcConnection, able to break the rules."""

    def __init__(self, settings: GrpcSettings) -> None:
        self.server = GrpcConnection(client_side=False, settings=settings)
        self.h2 = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        self.h2.initiate_connection()
        self.events: list[ev.Event] = []
        self.from_server: list[Frame] = []
        self.send(self.h2.data_to_send())

    def send(self, data: bytes) -> None:
        self.events += self.server.receive_data(data)
        reply = self.server.data_to_send()
        self.from_server += _frames(reply)
        if not self.server.closed:
            self.h2.receive_data(reply)
            ack = self.h2.data_to_send()
            if ack:
                self.events += self.server.receive_data(ack)

    def headers_frame(self, stream_id: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        """HEADERS for a stream h2 would not let us open, encoded with the connection's
        HPACK encoder so its table stays what the server's decoder must mirror."""
        frame = HeadersFrame(stream_id, data=self.h2.encoder.encode(headers))
        frame.flags.add("END_HEADERS")
        return frame.serialize()


def test_stream_over_the_limit_is_refused_alone() -> None:
    raw = RawClient(GrpcSettings(max_concurrent_streams=2))
    for sid in (1, 3):
        raw.h2.send_headers(sid, _request("/t.S/M"))
    raw.send(raw.h2.data_to_send())
    assert [e.stream_id for e in raw.events if isinstance(e, ev.RequestReceived)] == [1, 3]
    # Stream 5 adds an entry to the HPACK table that stream 7 refers to.
    raw.send(raw.headers_frame(5, _request("/t.S/M", (b"x-once", b"value-5"))))
    resets = [f for f in raw.from_server if isinstance(f, RstStreamFrame)]
    assert [(f.stream_id, f.error_code) for f in resets] == [(5, ErrorCodes.REFUSED_STREAM)]
    assert not raw.server.closed and not raw.server.is_open(5)
    # DATA the client sent before it saw the reset: refused too, the connection lives on.
    raw.send(DataFrame(5, data=b"\x00\x00\x00\x00\x01x").serialize())
    resets = [f for f in raw.from_server if isinstance(f, RstStreamFrame)]
    assert [(f.stream_id, f.error_code) for f in resets][-1] == (5, ErrorCodes.STREAM_CLOSED)
    assert not raw.server.closed
    # Once a slot is free a new stream is served, its headers decoded against the table.
    raw.server.reset_stream(1)
    raw.send(b"")
    raw.h2.send_headers(7, _request("/t.S/M", (b"x-once", b"value-5")))
    raw.send(raw.h2.data_to_send())
    (last,) = [e for e in raw.events if isinstance(e, ev.RequestReceived) and e.stream_id == 7]
    assert ("x-once", "value-5") in last.metadata
    assert not [f for f in raw.from_server if isinstance(f, GoAwayFrame)]


def test_reused_stream_id_is_still_a_connection_error() -> None:
    raw = RawClient(GrpcSettings(max_concurrent_streams=1))
    raw.h2.send_headers(3, _request("/t.S/M"))
    raw.send(raw.h2.data_to_send())
    raw.send(raw.headers_frame(1, _request("/t.S/M")))
    assert any(isinstance(e, ev.ConnectionFailed) for e in raw.events)
    (goaway,) = [f for f in raw.from_server if isinstance(f, GoAwayFrame)]
    assert goaway.error_code == ErrorCodes.PROTOCOL_ERROR


def test_oversized_header_list_fails_the_connection() -> None:
    # A header block beyond MAX_HEADER_LIST_SIZE cannot be half-decoded (HPACK state is
    # per connection), so the connection ends with ENHANCE_YOUR_CALM.
    raw = RawClient(GrpcSettings(max_header_list_size=16 << 10))
    raw.h2.send_headers(1, _request("/t.S/M", (b"x-big", b"v" * (32 << 10))))
    raw.send(raw.h2.data_to_send())
    assert any(isinstance(e, ev.ConnectionFailed) for e in raw.events)
    assert not any(isinstance(e, ev.RequestReceived) for e in raw.events)
    (goaway,) = [f for f in raw.from_server if isinstance(f, GoAwayFrame)]
    assert goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
