"""Whole-buffer positional reads and writes (the OS may return short counts)."""

from __future__ import annotations

import os
from collections.abc import Sequence


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


# Linux's IOV_MAX; a larger list fails with EINVAL rather than being written in parts.
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024


def pwritev_all(fd: int, buffers: Sequence[bytes | bytearray | memoryview], at: int) -> int:
    """Write `buffers` back to back from `at`, gathering them in the kernel rather than
    joining them here (payloads are up to MiBs); return the bytes written."""
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    total = 0
    start = 0
    while start < len(views):
        chunk = views[start : start + _IOV_MAX]
        written = os.pwritev(fd, chunk, at)
        if not written:
            raise OSError(f"pwritev wrote nothing at {at}")
        total += written
        at += written
        # Skip the buffers written in full; a short write leaves the rest of one.
        while start < len(views) and written >= views[start].nbytes:
            written -= views[start].nbytes
            start += 1
        if written:
            views[start] = views[start][written:]
    return total
