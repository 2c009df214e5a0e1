"""Whole-buffer positional reads and writes (the OS may return short counts)."""

from __future__ import annotations

import os


def pread_all(fd: int, n: int, at: int) -> bytes:
    """Up to `n` bytes at `at`; fewer only at end of file."""
    data = os.pread(fd, n, at)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = os.pread(fd, n - got, at + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, at: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, at)
        view, at = view[written:], at + written
