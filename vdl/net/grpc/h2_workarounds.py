"""The four places where we deliberately step around h2 4.x behaviour.

Tested with h2 4.4.1 / hpack 4.2.0 / hyperframe 6.1.0. ``tests/unit/grpc/test_h2_workarounds.py``
pins those versions and the stream limit, ``test_grpc_connection.py`` the other two, so an h2
upgrade that changes them fails loudly instead of silently slowing or breaking us.

1. **DATA frame repr cost.** ``H2Connection._receive_frame`` calls
   ``logger.trace("Received frame: %s", repr(frame))`` for every frame: the ``repr`` runs
   eagerly, whatever the logger, so no h2 configuration or logger can avoid it. For a DATA
   frame hyperframe's repr serialises the body and hex-encodes all of it before truncating
   to 20 characters (~100 µs per 64 KiB, more than the rest of h2's DATA path). The
   ``%r`` of the raw input in ``receive_data`` is lazy and h2's default ``DummyLogger``
   discards it, so that one costs nothing as long as we never hand h2 a real logger
   (a ``logging.Logger`` would not even work: h2 calls ``.trace``). We therefore give
   DATA frames a repr that reports the payload size instead of its bytes. It is a
   process-wide change of one class attribute, harmless to anyone else: a repr is only
   ever read by humans.

2. **Graceful GOAWAY (python-hyper/h2#1181).** On receiving *any* GOAWAY, h2 moves the
   connection to CLOSED, after which every DATA/HEADERS frame on the streams the peer
   promised to finish raises ProtocolError, and it also drops bytes it had prepared (PING
   ACKs). RFC 9113 §6.8 says streams up to ``last_stream_id`` may complete, and grpcio
   servers rely on that for graceful shutdown. :class:`DrainableH2Connection` keeps the
   connection open on a NO_ERROR GOAWAY and only reports it; the gRPC connection then
   refuses to open new streams. The *sending* side of a graceful GOAWAY is done in
   ``connection.py`` by writing the frame ourselves, for the same reason.

3. **A stream beyond MAX_CONCURRENT_STREAMS.** h2 raises ``TooManyStreamsError``, a
   connection error, so one client opening one stream too many would end every call on its
   connection. RFC 9113 §5.1.2 makes it a stream error (PROTOCOL_ERROR or REFUSED_STREAM),
   and REFUSED_STREAM tells the client the request was not processed and may be retried.
   :class:`DrainableH2Connection` answers exactly that stream with RST_STREAM
   (REFUSED_STREAM). Its header block is still decoded, because the HPACK table is shared
   by the whole connection and skipping a block would corrupt every later one.

4. **Connection credit held back.** h2's ``WindowManager`` announces acknowledged bytes
   only once they reach half the window, or when the window is exactly empty at the time
   of an acknowledgement. When some streams' bytes are deliberately left unacknowledged
   (the memory budget in ``connection.py``), the window can run dry after the last
   acknowledgement, and the credit already given would never be announced: every stream
   of the connection would stall. ``announce_connection_credit`` sends it now.
"""

from __future__ import annotations

from typing import Any

from h2.connection import ConnectionInputs, H2Connection, _decode_headers
from h2.errors import ErrorCodes
from h2.events import ConnectionTerminated
from h2.exceptions import ProtocolError, StreamIDTooLowError, TooManyStreamsError
from h2.stream import StreamClosedBy
from hyperframe.frame import (
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    RstStreamFrame,
    WindowUpdateFrame,
)


def _data_frame_body_repr(self: DataFrame) -> str:
    return f"<{len(self.data)} data bytes>, pad_length={self.pad_length}"


def install_cheap_data_frame_repr() -> None:
    """Make ``repr(DataFrame)`` independent of the payload size (idempotent)."""
    DataFrame._body_repr = _data_frame_body_repr  # type: ignore[method-assign,assignment]


class DrainableH2Connection(H2Connection):
    """An H2Connection that survives a graceful (NO_ERROR) GOAWAY from its peer and refuses
    single streams over the concurrency limit instead of failing the connection."""

    def _receive_headers_frame(self, frame: HeadersFrame) -> tuple[list[Frame], list[Any]]:
        try:
            result: tuple[list[Frame], list[Any]] = super()._receive_headers_frame(frame)
            return result
        except TooManyStreamsError:
            # Raised before h2 touched any state (the check comes first).
            pass
        _decode_headers(self.decoder, frame.data)
        self.state_machine.process_input(ConnectionInputs.RECV_HEADERS)
        stream_id = frame.stream_id
        # Not a valid new stream of the peer's: the connection errors h2 reports for them.
        if stream_id % 2 != (0 if self.config.client_side else 1):
            raise ProtocolError(f"stream {stream_id} cannot be opened by the peer")
        if stream_id <= self.highest_inbound_stream_id:
            raise StreamIDTooLowError(stream_id, self.highest_inbound_stream_id)
        self.highest_inbound_stream_id = stream_id
        # Later frames of this stream (DATA in flight) then get h2's own treatment of a
        # stream we reset: RST_STREAM back, connection flow control still accounted.
        self._closed_streams[stream_id] = StreamClosedBy.SEND_RST_STREAM
        refuse = RstStreamFrame(stream_id)
        refuse.error_code = ErrorCodes.REFUSED_STREAM
        return [refuse], []

    def announce_connection_credit(self) -> None:
        """Send a connection WINDOW_UPDATE for every acknowledged byte not yet announced."""
        manager = self._inbound_flow_control_window_manager
        pending = manager._bytes_processed
        increment = min(pending, manager.max_window_size - manager.current_window_size)
        if increment <= 0:
            return
        manager._bytes_processed = 0
        manager.current_window_size += increment
        frame = WindowUpdateFrame(0)
        frame.window_increment = increment
        self._prepare_for_sending([frame])

    @property
    def queued_bytes(self) -> int:
        """Bytes serialised and waiting for ``data_to_send`` (h2 has no public accessor)."""
        return len(self._data_to_send)

    def _receive_goaway_frame(self, frame: GoAwayFrame) -> tuple[list[Frame], list[Any]]:
        if frame.error_code != ErrorCodes.NO_ERROR:
            # The peer is failing the connection: h2's teardown is exactly right.
            result: tuple[list[Frame], list[Any]] = super()._receive_goaway_frame(frame)
            return result
        event = ConnectionTerminated()
        event.error_code = ErrorCodes.NO_ERROR
        event.last_stream_id = frame.last_stream_id
        event.additional_data = frame.additional_data or None
        return [], [event]


install_cheap_data_frame_repr()
