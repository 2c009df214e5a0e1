"""The two places where we deliberately step around h2 4.x behaviour.

Tested with h2 4.4.1 / hyperframe 6.1.0; ``tests/unit/grpc/test_h2_workarounds.py`` pins both
so an h2 upgrade that changes them fails loudly instead of silently slowing or breaking us.

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
"""

from __future__ import annotations

from typing import Any

from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import ConnectionTerminated
from hyperframe.frame import DataFrame, Frame, GoAwayFrame


def _data_frame_body_repr(self: DataFrame) -> str:
    return f"<{len(self.data)} data bytes>, pad_length={self.pad_length}"


def install_cheap_data_frame_repr() -> None:
    """Make ``repr(DataFrame)`` independent of the payload size (idempotent)."""
    DataFrame._body_repr = _data_frame_body_repr  # type: ignore[method-assign,assignment]


class DrainableH2Connection(H2Connection):
    """An H2Connection that survives a graceful (NO_ERROR) GOAWAY from its peer."""

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
