"""This disk's raw durable-write ceiling, measured with plain os.write/os.fdatasync.

The node cannot be faster than the filesystem it writes to, so its produce throughput is
reported as a fraction of what a trivial Python writer achieves on the same filesystem in the
same run. Two shapes matter:

- bulk: 1 MiB appends with one fdatasync per 16 MiB, the best case for a log whose group
  commit gathers many batches into one flush;
- small: 4 KiB append + fdatasync, one at a time, the floor for a lone acks=all write.

And one shape taken from the node itself (`paced_sync_writers`): what the disk answers at
the node's own load. One writer *process* per replica (the replicas share the disk), each
appending chunks of the size the node made durable per fdatasync and syncing after each, at
the rate the node received, reporting the latency of every fdatasync. Each writer is this
file run as a script (`--paced-writer`), so the three sync independently of each other and
of the bench's process, as three nodes do.

Files are fresh appends (not preallocated), as a new log segment's tail is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
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


def tail_percentiles_ms(samples_s: list[float]) -> tuple[float, float, float]:
    """p50, p99 and p999 of samples in seconds, as milliseconds (0.0 when empty)."""
    p50, p99 = percentiles_ms(samples_s, (50, 99))
    ordered = sorted(samples_s)
    p999 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.999))] * 1000 if ordered else 0.0
    return p50, p99, p999


@dataclass(frozen=True, slots=True)
class PacedSyncResult:
    """`writers` processes, each appending `append_bytes` + fdatasync at `target_mb_per_s`."""

    writers: int
    append_bytes: int
    target_mb_per_s: float  # per writer
    seconds: float  # asked for
    syncs: int  # all writers
    mb_per_s: list[float]  # each writer's achieved rate (below the target: the disk lagged)
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def paced_sync_writers(
    directories: list[Path],
    *,
    append_bytes: int,
    mb_per_s: float,
    seconds: float,
) -> PacedSyncResult:
    """One writer process per directory, all started together: each appends `append_bytes`
    and fdatasyncs, paced at `mb_per_s` (decimal MB/s) for `seconds`; fdatasync latencies
    of all writers together."""
    start_at = time.time() + 1.0  # every writer imported and its file open by then
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--paced-writer",
                str(directory / "paced-sync.raw"),
                str(append_bytes),
                str(mb_per_s * MB),
                str(seconds),
                str(start_at),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for directory in directories
    ]
    latencies: list[float] = []
    rates: list[float] = []
    errors: list[str] = []
    try:
        for writer in writers:
            out, err = writer.communicate(timeout=seconds + 120)
            lines = [line for line in out.splitlines() if line.startswith("{")]
            if writer.returncode != 0 or not lines:
                errors.append(f"writer exited with {writer.returncode}: {err[-300:]}")
                continue
            report = json.loads(lines[-1])
            latencies.extend(report["fdatasync_s"])
            rates.append(report["bytes"] / report["seconds"] / MB)
    finally:
        for writer in writers:
            if writer.poll() is None:
                writer.kill()
                writer.wait(10)
    if errors:
        raise RuntimeError("; ".join(errors))
    p50, p99, p999 = tail_percentiles_ms(latencies)
    return PacedSyncResult(
        writers=len(directories),
        append_bytes=append_bytes,
        target_mb_per_s=mb_per_s,
        seconds=seconds,
        syncs=len(latencies),
        mb_per_s=rates,
        p50_ms=p50,
        p99_ms=p99,
        p999_ms=p999,
        max_ms=max(latencies, default=0.0) * 1000,
    )


def _paced_writer(
    path: Path, append_bytes: int, bytes_per_s: float, seconds: float, start_at: float
) -> dict[str, Any]:
    """One writer of `paced_sync_writers`: append + fdatasync on a fixed schedule (a late
    write goes at once, none is skipped) until `seconds` have passed."""
    chunk = memoryview(os.urandom(append_bytes))
    interval = append_bytes / bytes_per_s
    latencies: list[float] = []
    fd = _open_fresh(path)
    try:
        time.sleep(max(0.0, start_at - time.time()))
        start = time.perf_counter()
        now = start
        sent = 0
        while now - start < seconds:
            due = start + sent * interval
            if due > now:
                time.sleep(due - now)
            _write_all(fd, chunk)
            before = time.perf_counter()
            os.fdatasync(fd)
            now = time.perf_counter()
            latencies.append(now - before)
            sent += 1
        elapsed = now - start
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {"bytes": sent * append_bytes, "seconds": elapsed, "fdatasync_s": latencies}


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one paced append+fdatasync writer")
    parser.add_argument("--paced-writer", type=Path, required=True, metavar="FILE")
    parser.add_argument("append_bytes", type=int)
    parser.add_argument("bytes_per_s", type=float)
    parser.add_argument("seconds", type=float)
    parser.add_argument("start_at", type=float, help="time.time() to start at")
    args = parser.parse_args(argv)
    report = _paced_writer(
        args.paced_writer, args.append_bytes, args.bytes_per_s, args.seconds, args.start_at
    )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
