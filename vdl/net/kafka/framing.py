"""Kafka size-prefixed framing, sans-I/O.

A frame is an int32 big-endian size followed by that many bytes.  The decoder
keeps received chunks as a queue of memoryviews and copies a frame's bytes at
most once: a frame that lies inside one received chunk is returned as a slice
of it (no copy); one spread over several chunks is joined once when its last
byte arrives.  So a 100 MiB frame arriving in 64 KiB pieces costs one copy,
not one per piece, and nothing is allocated before the bytes actually arrive
(the announced size is untrusted).
"""

from __future__ import annotations

import struct
from collections import deque

__all__ = ["FrameDecoder", "FrameTooLarge", "frame"]

_SIZE = struct.Struct(">i")


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

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames (for diagnostics)."""
        return self._buffered + (4 if self._need is not None else 0)

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Add received bytes; return every frame payload completed by them.

        Returned memoryviews may alias ``data``.  A mutable buffer is copied
        first so that a caller reusing its receive buffer cannot corrupt
        frames already handed out.
        """
        if not data:
            return []
        view = memoryview(data if isinstance(data, bytes) else bytes(data))
        self._chunks.append(view)
        self._buffered += len(view)
        out: list[memoryview] = []
        while True:
            if self._need is None:
                if self._buffered < 4:
                    break
                (size,) = _SIZE.unpack(self._take(4))
                if size < 0 or size > self._limit:
                    raise FrameTooLarge(size, self._limit, out)
                self._need = size
            if self._buffered < self._need:
                break
            out.append(self._take(self._need))
            self._need = None
        return out

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
