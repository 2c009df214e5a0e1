"""Kafka size-prefixed framing, sans-I/O.

A frame is an int32 big-endian size followed by that many bytes.  The decoder
keeps received chunks as a queue of memoryviews and copies a frame's bytes at
most once: a frame that lies inside one received chunk is returned as a slice
of it (no copy); one spread over several chunks is joined once when its last
byte arrives.  So a 100 MiB frame arriving in 64 KiB pieces costs one copy,
not one per piece.

A large frame still arriving gets a buffer of its own, a bytearray of exactly
its size: the bytes already received are copied in once, and the caller can
receive the rest straight into it (`direct_buffer` / `direct_received`, e.g.
with `recv_into`), so most of a produce request is never copied in user space.
Such a frame is returned as a *writable* memoryview, and only such a frame:
its bytes belong to that frame alone, so its consumer may modify them in place
(stamping offsets into a record batch).  Read-only frames may share a chunk
with other frames.  The announced size is untrusted: the buffer is allocated
up front only up to `DIRECT_UPFRONT_MAX`; a larger frame gets its own buffer
only once half of it has arrived, so memory stays within twice what the peer
actually sent.
"""

from __future__ import annotations

import struct
from collections import deque

__all__ = ["FrameDecoder", "FrameTooLarge", "frame"]

_SIZE = struct.Struct(">i")
# Frames from this size on get their own buffer when they are not complete in
# what was already received: below it, a copy costs less than the extra read.
DIRECT_MIN = 64 * 1024
DIRECT_UPFRONT_MAX = 2 * 1024 * 1024


class FrameTooLarge(Exception):
    """A size prefix is negative or above the configured limit.

    ``frames`` holds the complete frames that preceded the bad prefix in the
    same ``feed`` call, in case the caller wants to answer them before closing.
    """

    def __init__(self, size: int, limit: int, frames: list[memoryview]) -> None:
        super().__init__(f"frame size {size} outside [0, {limit}]")
        self.size = size
        self.limit = limit
        self.frames = frames


class FrameDecoder:
    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self._limit = max_frame_bytes
        self._chunks: deque[memoryview] = deque()
        self._buffered = 0
        # Size of the frame being collected once its prefix has been read.
        self._need: int | None = None
        # The own buffer of the frame being collected, if it has one, and how much of
        # it is filled; while it exists, nothing is left in _chunks.
        self._frame: bytearray | None = None
        self._filled = 0

    @property
    def limit(self) -> int:
        """The largest frame accepted; may change between reads (e.g. once a client has
        authenticated, Kafka's sasl.server.max.receive.size no longer applies)."""
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        if value < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self._limit = value

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames (for diagnostics)."""
        return self._buffered + self._filled + (4 if self._need is not None else 0)

    def direct_buffer(self) -> memoryview | None:
        """Where the next received bytes may go directly: the unfilled rest of the
        frame being collected in its own buffer; None when there is no such frame
        (then receive into a fresh buffer and `feed` it)."""
        if self._frame is None:
            return None
        return memoryview(self._frame)[self._filled :]

    def direct_received(self, n: int) -> list[memoryview]:
        """`n` bytes were received into `direct_buffer()`; return the frame if done."""
        if self._frame is None or not 0 <= n <= len(self._frame) - self._filled:
            raise ValueError(f"{n} bytes received directly, not expected")
        self._filled += n
        return self._finish_direct()

    def _finish_direct(self) -> list[memoryview]:
        frame = self._frame
        if frame is None or self._filled < len(frame):
            return []
        self._frame, self._filled, self._need = None, 0, None
        return [memoryview(frame)]

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Add received bytes; return every frame payload completed by them.

        Returned memoryviews may alias ``data``.  A mutable buffer is copied
        first so that a caller reusing its receive buffer cannot corrupt
        frames already handed out.
        """
        if not data:
            return []
        view = memoryview(data).cast("B")
        out: list[memoryview] = []
        if self._frame is not None:
            n = min(len(view), len(self._frame) - self._filled)
            self._frame[self._filled : self._filled + n] = view[:n]
            self._filled += n
            out.extend(self._finish_direct())
            view = view[n:]
            if not view:
                return out
        if not isinstance(data, bytes):
            view = memoryview(bytes(view))
        self._chunks.append(view)
        self._buffered += len(view)
        while True:
            if self._need is None:
                if self._buffered < 4:
                    break
                (size,) = _SIZE.unpack(self._take(4))
                if size < 0 or size > self._limit:
                    raise FrameTooLarge(size, self._limit, out)
                self._need = size
            if self._buffered < self._need:
                need = self._need
                if need >= DIRECT_MIN and (
                    need <= DIRECT_UPFRONT_MAX or 2 * self._buffered >= need
                ):
                    self._start_direct(need)
                break
            out.append(self._take(self._need))
            self._need = None
        return out

    def _start_direct(self, need: int) -> None:
        """Move what is buffered (all of it belongs to this frame) into its own buffer."""
        frame = bytearray(need)
        at = 0
        for chunk in self._chunks:
            frame[at : at + len(chunk)] = chunk
            at += len(chunk)
        self._chunks.clear()
        self._buffered = 0
        self._frame, self._filled = frame, at

    def _take(self, n: int) -> memoryview:
        """Remove and return the next n buffered bytes (n <= buffered)."""
        if n == 0:
            return memoryview(b"")
        self._buffered -= n
        first = self._chunks[0]
        if len(first) > n:
            self._chunks[0] = first[n:]
            return first[:n]
        if len(first) == n:
            self._chunks.popleft()
            return first
        pieces: list[memoryview] = []
        remaining = n
        while remaining:
            chunk = self._chunks[0]
            if len(chunk) <= remaining:
                pieces.append(self._chunks.popleft())
                remaining -= len(chunk)
            else:
                pieces.append(chunk[:remaining])
                self._chunks[0] = chunk[remaining:]
                remaining = 0
        return memoryview(b"".join(pieces))


def frame(parts: list[bytes | memoryview]) -> list[bytes | memoryview]:
    """Prefix parts with their total int32 size, for a scatter-gather send."""
    total = 0
    for part in parts:
        total += len(part) if isinstance(part, bytes) else part.nbytes
    out: list[bytes | memoryview] = [_SIZE.pack(total)]
    out.extend(parts)
    return out
