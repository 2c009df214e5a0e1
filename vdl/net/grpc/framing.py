"""gRPC length-prefixed messages: a 1-byte compressed flag, a 4-byte big-endian length, data.

Sans-I/O: :class:`MessageDecoder` is fed the DATA payloads of one stream in order and hands
back whole messages; it never holds more than one incomplete message, whose size is checked
against the limit as soon as its 5-byte prefix is in, before any of its body is buffered.
"""

from __future__ import annotations

import struct

from .status import StatusCode

MESSAGE_PREFIX_SIZE = 5
# What the YDB SDK configures on grpcio both ways (64 * 10**6, deliberately not 64 MiB).
DEFAULT_MAX_MESSAGE_SIZE = 64_000_000

_PREFIX = struct.Struct(">BI")


class FramingError(Exception):
    """The peer's message stream cannot be decoded; ``status`` is what to answer with."""

    def __init__(self, status: StatusCode, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def encode_message_prefix(length: int, *, compressed: bool = False) -> bytes:
    """The 5-byte prefix for a message of ``length`` bytes."""
    return _PREFIX.pack(1 if compressed else 0, length)


def encode_message(payload: bytes) -> bytes:
    """One uncompressed message with its prefix (copies; the connection avoids this)."""
    return encode_message_prefix(len(payload)) + payload


class MessageDecoder:
    """Turns a stream's DATA payloads into messages, enforcing a maximum message size."""

    def __init__(self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        self.max_message_size = max_message_size
        self._buffer = bytearray()
        # Body length of the message being assembled, once its prefix has been read.
        self._expected: int | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for the incomplete message (prefix included)."""
        return len(self._buffer) + (MESSAGE_PREFIX_SIZE if self._expected is not None else 0)

    @property
    def expected_size(self) -> int | None:
        """Size (prefix included) of the message being assembled, once its prefix is in."""
        return None if self._expected is None else self._expected + MESSAGE_PREFIX_SIZE

    def feed(self, data: bytes | memoryview) -> list[bytes]:
        """Add received bytes; return the messages they complete, in order."""
        messages: list[bytes] = []
        view = memoryview(data)
        while view:
            if self._expected is None:
                need = MESSAGE_PREFIX_SIZE - len(self._buffer)
                self._buffer += view[:need]
                view = view[need:]
                if len(self._buffer) < MESSAGE_PREFIX_SIZE:
                    break
                flag, length = _PREFIX.unpack(self._buffer)
                self._buffer.clear()
                self._check_prefix(flag, length)
                self._expected = length
            need = self._expected - len(self._buffer)
            if not self._buffer and len(view) >= need:
                # The whole body is in this chunk: slice it out without going via the buffer.
                messages.append(bytes(view[:need]))
            else:
                self._buffer += view[:need]
                if len(self._buffer) < self._expected:
                    break
                messages.append(bytes(self._buffer))
                self._buffer.clear()
            view = view[need:]
            self._expected = None
        return messages

    def _check_prefix(self, flag: int, length: int) -> None:
        if flag == 1:
            # We never advertise a grpc-encoding other than identity, so a peer that
            # compresses anyway is out of spec.
            raise FramingError(StatusCode.INTERNAL, "compressed message without grpc-encoding")
        if flag != 0:
            raise FramingError(StatusCode.INTERNAL, f"invalid compressed flag {flag}")
        if length > self.max_message_size:
            raise FramingError(
                StatusCode.RESOURCE_EXHAUSTED,
                f"received message larger than max ({length} vs. {self.max_message_size})",
            )

    def at_message_boundary(self) -> bool:
        """True when no partial message is pending (the stream may end cleanly here)."""
        return self._expected is None and not self._buffer
