"""How Python's GIL switch interval weighs on a durable write while the event loop is busy.

    .venv/bin/python bench/gil_handoff.py [--seconds S] [--rounds R] [--rate-mb M]
        [--batch-kib K] [--busy-ms B] [--busy-share F] [--intervals 5,0.5]

A node's flusher thread comes back from each write and fdatasync needing the GIL; while the
event loop's thread runs Python code, the flusher waits until that thread lets go, which
CPython forces after the switch interval (`sys.setswitchinterval`, 5 ms by default). This
bench runs the one-replica write path of a node (`LogStream` over a segment store with its
`Flusher`, in one Trio loop) at a paced rate while a task of the same loop keeps the CPU busy
in bursts (pure Python, as request decoding and Raft bookkeeping are), and reports the
append -> committed latency that a produce waits for, per switch interval.

Every setting runs R times, interleaved (5 ms, 0.5 ms, 5 ms, ...), so a noisy disk or a busy
neighbour weighs on all of them alike; the reference is the same run without the busy task.
Reports, never asserts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import trio
from disk_ceiling import tail_percentiles_ms
from machine import machine_info, save_result

from vdl.backends.api import LogStoreOptions
from vdl.backends.registry import open_log_store
from vdl.log.appender import LocalAppender
from vdl.log.flusher import Flusher
from vdl.log.record_batch import Record, build_batch, validate_produced_batch
from vdl.log.stream import LogStream


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per setting and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate-mb", type=float, default=50.0, help="MB/s appended")
    parser.add_argument("--batch-kib", type=int, default=16)
    parser.add_argument("--busy-ms", type=float, default=2.0, help="length of a busy burst")
    parser.add_argument("--busy-share", type=float, default=0.3, help="share of time busy")
    parser.add_argument("--intervals", default="5,0.5", help="switch intervals to compare (ms)")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the work directory")
    parser.add_argument("--no-save", action="store_true")
    return parser.parse_args(argv)


def _spin(seconds: float) -> None:
    """Hold the GIL in pure Python for `seconds`."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1


async def _busy(burst_s: float, share: float) -> None:
    idle_s = burst_s * (1 - share) / share
    while True:
        _spin(burst_s)
        await trio.sleep(idle_s)


async def _one_setting(
    directory: Path, seconds: float, rate_mb: float, batch_kib: int, busy: tuple[float, float]
) -> list[float]:
    """Append paced batches for `seconds`; each one's append -> committed latency."""
    payload = b"x" * (batch_kib * 1024 - 100)
    flusher = Flusher()
    store = open_log_store("segment", directory, LogStoreOptions())
    stream = LogStream("bench-0", store, LocalAppender.factory(flusher), lambda: 0)
    per_s = rate_mb * 1e6 / (batch_kib * 1024)
    outstanding: deque[tuple[int, float]] = deque()
    latencies: list[float] = []
    more = trio.Event()

    async def acker() -> None:
        while True:
            if not outstanding:
                await more.wait()
                continue
            await stream.wait_committed(outstanding[0][0])
            now = time.perf_counter()
            hw = stream.high_watermark
            while outstanding and outstanding[0][0] < hw:
                latencies.append(now - outstanding.popleft()[1])

    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        nursery.start_soon(acker)
        if busy[1] > 0:
            nursery.start_soon(_busy, *busy)
        start = time.perf_counter()
        sent = 0
        while (now := time.perf_counter()) - start < seconds:
            due = start + sent / per_s
            if due > now:
                await trio.sleep(due - now)
            batch = build_batch([Record(None, payload, 0, [])])
            info = validate_produced_batch(batch, max_batch_bytes=1 << 24, allow_zstd=True)
            appended = stream.append(batch, info)
            outstanding.append((appended.last_offset, time.perf_counter()))
            more.set()
            more = trio.Event()
            sent += 1
        while outstanding:
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    await stream.close()
    shutil.rmtree(directory, ignore_errors=True)
    return latencies


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    intervals = [float(v) / 1000 for v in args.intervals.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="vdl-gil-bench-", dir=args.dir))
    busy = (args.busy_ms / 1000, args.busy_share)
    settings = [(i, busy) for i in intervals] + [(intervals[0], (0.0, 0.0))]
    samples: dict[int, list[float]] = {k: [] for k in range(len(settings))}
    default = sys.getswitchinterval()
    try:
        for round_ in range(args.rounds):
            for k, (interval, load) in enumerate(settings):
                sys.setswitchinterval(interval)
                directory = workdir / f"r{round_}-s{k}"
                samples[k] += trio.run(
                    _one_setting, directory, args.seconds, args.rate_mb, args.batch_kib, load
                )
    finally:
        sys.setswitchinterval(default)
        shutil.rmtree(workdir, ignore_errors=True)
    rows = []
    for k, (interval, load) in enumerate(settings):
        p50, p99, p999 = tail_percentiles_ms(samples[k])
        rows.append(
            {
                "switch_interval_ms": interval * 1000,
                "busy_ms": load[0] * 1000,
                "busy_share": load[1],
                "appends": len(samples[k]),
                "p50_ms": p50,
                "p99_ms": p99,
                "p999_ms": p999,
            }
        )
    floor = rows[-1]["p99_ms"]
    print(
        f"{args.rate_mb:g} MB/s in {args.batch_kib} KiB batches, one replica; busy task: "
        f"{args.busy_ms:g} ms bursts, {args.busy_share:.0%} of the time; "
        f"{args.rounds} x {args.seconds:g} s per setting, interleaved"
    )
    print(
        f"{'switch interval':>16} {'busy':>6} {'appends':>8} {'p50':>8} {'p99':>8} {'p999':>8}"
        f" {'p99 / idle p99':>15}"
    )
    for row in rows:
        busy_text = "yes" if row["busy_share"] else "no"
        print(
            f"{row['switch_interval_ms']:>13.2f} ms {busy_text:>6} {row['appends']:>8}"
            f" {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} {row['p999_ms']:>8.2f}"
            f" {row['p99_ms'] / floor:>14.1f}x"
        )
    result: dict[str, Any] = {
        "bench": "gil_handoff",
        "started_utc": started.isoformat(timespec="seconds"),
        "parameters": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": machine_info(workdir.parent),
        "settings": rows,
    }
    if not args.no_save:
        save_result("gil-handoff", started, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
