"""This disk's raw durable-write ceiling, measured with plain os.write/os.fdatasync.

The node cannot be faster than the filesystem it writes to, so its produce throughput is
reported as a fraction of what a trivial Python writer achieves on the same filesystem in the
same run. Two shapes matter:

- bulk: 1 MiB appends with one fdatasync per 16 MiB, the best case for a log whose group
  commit gathers many batches into one flush;
- small: 4 KiB append + fdatasync, one at a time, the floor for a lone acks=all write.

Files are fresh appends (not preallocated), as a new log segment's tail is.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
MB = 1_000_000  # throughput is reported in decimal MB/s, like the node's numbers


@dataclass(frozen=True, slots=True)
class BulkResult:
    bytes_written: int
    seconds: float
    append_bytes: int
    sync_every_bytes: int

    @property
    def mb_per_s(self) -> float:
        return self.bytes_written / self.seconds / MB

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mb_per_s": self.mb_per_s}


@dataclass(frozen=True, slots=True)
class SmallSyncResult:
    syncs: int
    seconds: float
    append_bytes: int
    p50_ms: float
    p99_ms: float

    @property
    def per_s(self) -> float:
        return self.syncs / self.seconds

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "per_s": self.per_s}


def _write_all(fd: int, data: memoryview) -> None:
    # os.write may write less than asked (signals, odd filesystems); a short write would
    # silently shrink the measured volume.
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _open_fresh(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)


def bulk_append(
    directory: Path,
    total_bytes: int,
    *,
    append_bytes: int = MIB,
    sync_every_bytes: int = 16 * MIB,
) -> BulkResult:
    """Append `total_bytes` in `append_bytes` writes, fdatasync every `sync_every_bytes`."""
    path = directory / "bulk.raw"
    # Random bytes: a filesystem or device that compresses or dedups must not flatter us.
    chunk = memoryview(os.urandom(append_bytes))
    count = max(1, -(-total_bytes // append_bytes))
    fd = _open_fresh(path)
    try:
        unsynced = 0
        start = time.perf_counter()
        for _ in range(count):
            _write_all(fd, chunk)
            unsynced += append_bytes
            if unsynced >= sync_every_bytes:
                os.fdatasync(fd)
                unsynced = 0
        # The tail counts too: a write is only done once it is durable.
        os.fdatasync(fd)
        seconds = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return BulkResult(count * append_bytes, seconds, append_bytes, sync_every_bytes)


def small_append_sync(
    directory: Path,
    *,
    seconds: float = 2.0,
    append_bytes: int = 4096,
    max_syncs: int = 100_000,
) -> SmallSyncResult:
    """Append `append_bytes` then fdatasync, repeatedly, for about `seconds`."""
    path = directory / "small.raw"
    chunk = memoryview(os.urandom(append_bytes))
    latencies: list[float] = []
    fd = _open_fresh(path)
    try:
        start = time.perf_counter()
        deadline = start + seconds
        now = start
        while now < deadline and len(latencies) < max_syncs:
            _write_all(fd, chunk)
            os.fdatasync(fd)
            after = time.perf_counter()
            latencies.append(after - now)
            now = after
        elapsed = now - start
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return SmallSyncResult(
        len(latencies), elapsed, append_bytes, *percentiles_ms(latencies, (50, 99))
    )


def percentiles_ms(samples_s: list[float], points: tuple[int, ...]) -> tuple[float, ...]:
    """Percentiles of samples in seconds, as milliseconds (nan when there are too few)."""
    if len(samples_s) < 2:
        value = samples_s[0] * 1000 if samples_s else float("nan")
        return tuple(value for _ in points)
    cuts = statistics.quantiles(samples_s, n=100, method="inclusive")
    return tuple(cuts[p - 1] * 1000 for p in points)
