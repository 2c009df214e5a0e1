"""What observability costs: acks=all produce with the admin listener off, and on and scraped.

    .venv/bin/python bench/metrics_overhead.py [--quick] [--messages N] [--size B]
        [--skip-cluster] [--no-save]

The same produce load as bench/produce.py's (`run_produce`: confluent-kafka, acks=all,
idempotent, linger 5 ms, 1 KiB values) against one node, then against a 3-node cluster
(RF 3), each in two modes:

- off: every node started with `--admin-listen none`, nothing scraping;
- on: the admin listener on, and a scraper thread in this process that GETs `/metrics`
  and `/v1/partitions` from every node once per second (Prometheus' default interval is
  15 s, so this is 15x harsher), counting scrapes, their latency and response size.

Phases alternate off, on, off, on (fresh nodes and data directories each), so drift on a
shared machine hits both modes alike; each mode reports the median of its runs, and the
ratio on/off of the median MB/s is held to >= 0.97 (observability costs <= 3%). The
scraper thread shares this process with the producer, as a sidecar would share the
machine; its own CPU is reported with the scrape statistics.

Before the nodes start, a micro-measure times the recording that stays on with the
listener off (vdl/metrics/stages.py: `Histogram.observe`, `Histogram.since`,
`Counter.inc`, and the set of them one Produce request records at the Kafka front end):
the part of the cost `--admin-listen none` does not remove.

A benchmark reports, never asserts. Every node listens on loopback and is stopped, and
the temporary directory removed, on exit (also on failure).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path
from typing import Any, cast

from cluster import Cluster, _leaders_ready, start_cluster
from cluster_phases import create_topics
from disk_ceiling import percentiles_ms
from machine import machine_info, save_result
from node_launcher import BenchNode
from produce import DEFAULT_BATCH_SIZE, SEQUENTIAL_TOPIC, TOPIC, create_topic, run_produce

from vdl.metrics.stages import Counter, Histogram

TARGET_RATIO = 0.97  # on/off throughput: observability may cost at most 3%
MODES = ("off", "on")
ONE_NODE, CLUSTER = "one node", "3 nodes, RF 3"
# About 10 s of produce per phase on this machine (one node ~130-250 MB/s with a few
# partitions, the cluster ~80-100 MB/s), and a short smoke run for --quick.
DEFAULT_MESSAGES = {ONE_NODE: 1_500_000, CLUSTER: 800_000}
QUICK_MESSAGES = {ONE_NODE: 150_000, CLUSTER: 100_000}
SCRAPE_PATHS = ("/metrics", "/v1/partitions")
SCRAPE_TIMEOUT_S = 10.0
MICRO_CALLS = 200_000


# --- the recording that is always on -------------------------------------------------


def _best_ns(run: Callable[[], None], rounds: int = 3) -> int:
    """The fastest of `rounds` runs, in ns: the least disturbed by the rest of the machine."""
    best = math.inf
    for _ in range(rounds):
        start = time.perf_counter_ns()
        run()
        best = min(best, time.perf_counter_ns() - start)
    return int(best)


def micro_recording(calls: int = MICRO_CALLS) -> dict[str, float]:
    """ns per call of the stage registry's recording, net of the loop around it.

    Objects are called as the node's code calls them (`_DECODE.observe(...)`,
    `metrics.requests.inc()`): an attribute lookup and a method call each. The values are
    spread over the latency buckets (log-normal around 1 ms), as real observations are.
    """
    rng = random.Random(1)
    values = [rng.lognormvariate(math.log(1e-3), 1.5) for _ in range(calls)]
    hist = Histogram("bench_observe_seconds")
    counter = Counter("bench_inc_total")
    # One Kafka Produce request's recordings on its way through the front end
    # (vdl/net/kafka/connection.py, apis/produce.py): kafka_bytes_in, kafka_requests,
    # decode, append, commit-to-response, kafka_request_seconds, kafka_bytes_out.
    bytes_in, requests, bytes_out = Counter("in"), Counter("requests"), Counter("out")
    decode, append = Histogram("decode"), Histogram("append")
    to_response, request_seconds = Histogram("to_response"), Histogram("request_seconds")

    def loop() -> None:
        for _v in values:
            pass

    def observe() -> None:
        for v in values:
            hist.observe(v)

    def since() -> None:
        start = time.perf_counter()
        for _v in values:
            hist.since(start)

    def inc() -> None:
        for _v in values:
            counter.inc()

    def produce_request() -> None:
        start = time.perf_counter()
        for v in values:
            bytes_in.inc(1100)
            requests.inc()
            decode.observe(v)
            append.since(start)
            to_response.since(start)
            request_seconds.since(start)
            bytes_out.inc(60)

    base = _best_ns(loop)
    result = {"calls": float(calls), "loop_ns": base / calls}
    for name, run in (
        ("observe_ns", observe),
        ("since_ns", since),
        ("inc_ns", inc),
        ("produce_request_ns", produce_request),
    ):
        result[name] = max(_best_ns(run) - base, 0) / calls
    return result


# --- the scraper -----------------------------------------------------------------------


@dataclass(slots=True)
class EndpointStats:
    latencies_s: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    error_count: int = 0

    def merge(self, other: EndpointStats) -> None:
        self.latencies_s += other.latencies_s
        self.sizes += other.sizes
        self.errors += other.errors[: max(0, 5 - len(self.errors))]
        self.error_count += other.error_count

    def as_dict(self) -> dict[str, Any]:
        (p99,) = percentiles_ms(self.latencies_s, (99,))
        return {
            "count": len(self.latencies_s),
            "errors": self.error_count,
            "error_samples": self.errors,
            "mean_ms": (
                1000 * statistics.fmean(self.latencies_s) if self.latencies_s else float("nan")
            ),
            "p99_ms": p99,
            "max_ms": 1000 * max(self.latencies_s) if self.latencies_s else float("nan"),
            "mean_bytes": statistics.fmean(self.sizes) if self.sizes else float("nan"),
            "max_bytes": max(self.sizes, default=0),
        }


class Scraper:
    """A thread that GETs every path from every node once per `interval` (a fixed rate:
    a slow round delays the next one, it is not made up with a burst)."""

    def __init__(self, ports: list[int], interval: float) -> None:
        self.ports = ports
        self.interval = interval
        self.stats = {path: EndpointStats() for path in SCRAPE_PATHS}
        self.rounds = 0
        self.thread_cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def start(self) -> None:
        # One round first, not counted: it proves the endpoints answer, and pays for
        # whatever a first scrape costs once (imports, collectors' first walk).
        probe = {path: EndpointStats() for path in SCRAPE_PATHS}
        self._round(probe)
        failed = [(p, s.errors[0]) for p, s in probe.items() if s.error_count]
        if failed:
            raise RuntimeError(f"admin endpoints do not answer: {failed}")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(SCRAPE_TIMEOUT_S * len(self.ports) * len(SCRAPE_PATHS) + 5)

    def _run(self) -> None:
        cpu_start = time.thread_time()
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._round(self.stats)
            self.rounds += 1
            self.thread_cpu_s = time.thread_time() - cpu_start
            next_at += self.interval
            now = time.monotonic()
            next_at = max(next_at, now)
            self._stop.wait(next_at - now)

    def _round(self, into: dict[str, EndpointStats]) -> None:
        for port in self.ports:
            for path in SCRAPE_PATHS:
                stats = into[path]
                start = time.perf_counter()
                try:
                    url = f"http://127.0.0.1:{port}{path}"
                    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
                        body = response.read()
                except (OSError, HTTPException) as exc:
                    stats.error_count += 1
                    if len(stats.errors) < 5:
                        stats.errors.append(f"{port}{path}: {exc}")
                    continue
                stats.latencies_s.append(time.perf_counter() - start)
                stats.sizes.append(len(body))


# --- one phase -------------------------------------------------------------------------


def start_nodes(workdir: Path, topology: str, mode: str, tick_ms: int) -> Cluster:
    """One node, or three on loopback; `mode` off starts them with `--admin-listen none`."""
    admin = ["--admin-listen", "none"] if mode == "off" else []
    if topology != ONE_NODE:
        return start_cluster(workdir, tick_ms, *admin)
    node = BenchNode(workdir / "node1", workdir / "node1.log", "--log-level", "WARNING", *admin)
    cluster = Cluster({1: node})
    try:
        node.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def produce_args(args: argparse.Namespace, messages: int) -> argparse.Namespace:
    """What `run_produce` reads: bench/produce.py's defaults, linger 5 ms."""
    return argparse.Namespace(
        messages=messages,
        size=args.size,
        linger_ms=args.linger_ms,
        batch_size=DEFAULT_BATCH_SIZE,
        batch_messages=10_000,
        buffer_kib=16 * 1024,
    )


def run_phase(
    workdir: Path, topology: str, mode: str, round_: int, args: argparse.Namespace, messages: int
) -> dict[str, Any]:
    phase_dir = workdir / f"{'one' if topology == ONE_NODE else 'cluster'}-{mode}-{round_}"
    phase_dir.mkdir()
    cluster: Cluster | None = None
    scraper: Scraper | None = None
    try:
        cluster = start_nodes(phase_dir, topology, mode, args.raft_tick_ms)
        topics = {TOPIC: args.partitions, SEQUENTIAL_TOPIC: 1}
        if topology == ONE_NODE:
            for name, partitions in topics.items():
                create_topic(cluster.bootstrap, name, partitions)
        else:
            create_topics(cluster.bootstrap, topics)
        _leaders_ready(cluster.bootstrap, topics)
        if mode == "on":
            ports = [n.admin_port for n in cluster.nodes.values()]
            if any(p is None for p in ports):
                raise RuntimeError("a node has no admin listener (does it take --admin-listen?)")
            scraper = Scraper([p for p in ports if p is not None], args.scrape_interval)
            scraper.start()
        try:
            # run_produce reads only `.bootstrap` and `.cpu_seconds()` of its node: the
            # cluster's are every node's (CPU summed), so one call serves both topologies.
            produce, settings = run_produce(
                cast(BenchNode, cluster), produce_args(args, messages), None
            )
        finally:
            if scraper is not None:
                scraper.stop()
        exits = cluster.stop()
        cluster = None
    finally:
        if cluster is not None:
            cluster.stop_after_failure()
        shutil.rmtree(phase_dir, ignore_errors=True)
    cpu = produce.node_cpu_s
    result: dict[str, Any] = {
        "topology": topology,
        "mode": mode,
        "delivered": produce.delivered,
        "seconds": produce.seconds,
        "mb_per_s": produce.mb_per_s,
        "msgs_per_s": produce.msgs_per_s,
        "ack_p50_ms": produce.p50_ms,
        "ack_p99_ms": produce.p99_ms,
        "ack_max_ms": produce.max_ms,
        "produce_requests": produce.requests,
        "node_cpu_s": cpu,
        "node_cpu_pct": None if cpu is None else 100 * cpu / produce.seconds,
        "node_cpu_us_per_msg": (
            None if cpu is None or not produce.delivered else 1e6 * cpu / produce.delivered
        ),
        "client_cpu_s": produce.client_cpu_s,
        "errors": produce.errors,
        "node_exit_codes": exits,
        "producer": settings,
    }
    if scraper is not None:
        result["scrape"] = {
            "rounds": scraper.rounds,
            "thread_cpu_s": scraper.thread_cpu_s,
            "endpoints": {p: s.as_dict() for p, s in scraper.stats.items()},
        }
        result["_scrape_stats"] = scraper.stats  # merged per topology, then dropped
    return result


# --- summary and table -----------------------------------------------------------------


def _median(phases: list[dict[str, Any]], key: str) -> float | None:
    values = [p[key] for p in phases if p.get(key) is not None]
    return statistics.median(values) if values else None


def summarize(phases: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode the medians of its runs, the on/off ratio and the scrape statistics."""
    keys = (
        "mb_per_s",
        "msgs_per_s",
        "ack_p50_ms",
        "ack_p99_ms",
        "node_cpu_pct",
        "node_cpu_us_per_msg",
    )
    modes: dict[str, Any] = {}
    for mode in MODES:
        runs = [p for p in phases if p["mode"] == mode]
        modes[mode] = {k: _median(runs, k) for k in keys}
        modes[mode]["runs_mb_per_s"] = [p["mb_per_s"] for p in runs]
    off, on = modes["off"]["mb_per_s"], modes["on"]["mb_per_s"]
    ratio = on / off if off else None
    cpu_off, cpu_on = modes["off"]["node_cpu_us_per_msg"], modes["on"]["node_cpu_us_per_msg"]
    merged = {path: EndpointStats() for path in SCRAPE_PATHS}
    rounds, scraper_cpu = 0, 0.0
    for phase in phases:
        stats = phase.pop("_scrape_stats", None)
        if stats is not None:
            for path, s in stats.items():
                merged[path].merge(s)
            rounds += phase["scrape"]["rounds"]
            scraper_cpu += phase["scrape"]["thread_cpu_s"]
    on_seconds = sum(p["seconds"] for p in phases if p["mode"] == "on")
    return {
        "modes": modes,
        "ratio_on_off": ratio,
        "cpu_per_msg_ratio_on_off": cpu_on / cpu_off if cpu_on and cpu_off else None,
        "target_ratio": TARGET_RATIO,
        "met": ratio is not None and ratio >= TARGET_RATIO,
        "scrape": {
            "rounds": rounds,
            "scraper_thread_cpu_s": scraper_cpu,
            "produce_seconds_scraped": on_seconds,
            "endpoints": {p: s.as_dict() for p, s in merged.items()},
        },
    }


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:{spec}}{unit}"


def render(
    summaries: dict[str, dict[str, Any]],
    micro: dict[str, float],
    args: argparse.Namespace,
    messages: dict[str, int],
    load_average: tuple[float, float, float],
) -> str:
    rows: list[tuple[str, str, str, str]] = []
    for topology, summary in summaries.items():
        for mode in MODES:
            m = summary["modes"][mode]
            runs = ", ".join(f"{x:.1f}" for x in m["runs_mb_per_s"])
            rows.append(
                (
                    f"{topology}, metrics {mode}",
                    _fmt(m["mb_per_s"], ".1f", " MB/s"),
                    f"{_fmt(m['msgs_per_s'], '.0f')} msg/s; ack p50 / p99 "
                    f"{_fmt(m['ack_p50_ms'], '.1f')} / {_fmt(m['ack_p99_ms'], '.1f')} ms; "
                    f"node CPU {_fmt(m['node_cpu_pct'], '.0f', '%')} of a core "
                    f"({_fmt(m['node_cpu_us_per_msg'], '.1f')} us/msg); runs: {runs}",
                    "",
                )
            )
        ratio = summary["ratio_on_off"]
        rows.append(
            (
                f"{topology}, on / off",
                _fmt(ratio, ".3f"),
                f"target >= {TARGET_RATIO} (cost <= {1 - TARGET_RATIO:.0%}); "
                f"node CPU per msg on / off {_fmt(summary['cpu_per_msg_ratio_on_off'], '.3f')}",
                _verdict(summary["met"]),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    per_topology = "; ".join(f"{t}: {n}" for t, n in messages.items())
    order = ", ".join(MODES * args.repetitions)
    header = (
        f"VDL metrics overhead: acks=all produce, {args.size} B values, linger "
        f"{args.linger_ms:g} ms, {args.partitions} partitions (MB = 10^6 B)"
        f"\nmessages per phase: {per_topology}; phases per topology: {order}"
        f"\non = admin listener on, /metrics and /v1/partitions of every node scraped every "
        f"{args.scrape_interval:g} s; off = --admin-listen none"
        f"\nload average at start: {', '.join(f'{x:.2f}' for x in load_average)} "
        "(the machine may be shared)"
    )
    lines = [header, "-" * max(len(h) for h in header.splitlines())]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    for topology, summary in summaries.items():
        scrape = summary["scrape"]
        parts = []
        for path, e in scrape["endpoints"].items():
            errors = f", {e['errors']} errors" if e["errors"] else ""
            parts.append(
                f"{path} {e['count']} (mean {_fmt(e['mean_ms'], '.1f')} / p99 "
                f"{_fmt(e['p99_ms'], '.1f')} ms, {_fmt(e['mean_bytes'] / 1000, '.1f')} kB{errors})"
            )
        cpu_pct = (
            100 * scrape["scraper_thread_cpu_s"] / scrape["produce_seconds_scraped"]
            if scrape["produce_seconds_scraped"]
            else None
        )
        lines.append(
            f"scrapes, {topology}: " + "; ".join(parts) + f"; scraper thread CPU "
            f"{_fmt(cpu_pct, '.1f', '%')} of a core"
        )
    # What one Produce request's recordings cost, at the rate the off runs served them.
    rate_note = ""
    for topology, summary in summaries.items():
        off = [p for p in summary["phases"] if p["mode"] == "off" and p["produce_requests"]]
        if off:
            rate = statistics.median(p["produce_requests"] / p["seconds"] for p in off)
            share = rate * micro["produce_request_ns"] / 1e9
            rate_note += f"; {topology}: {rate:.0f} req/s -> {share:.2%} of a core"
    lines.append(
        f"always-on recording (vdl/metrics/stages.py, {int(micro['calls'])} calls, net of "
        f"a {micro['loop_ns']:.0f} ns loop): Histogram.observe {micro['observe_ns']:.0f} ns, "
        f"Histogram.since {micro['since_ns']:.0f} ns, Counter.inc {micro['inc_ns']:.0f} ns; "
        f"one Produce request's 7 recordings {micro['produce_request_ns']:.0f} ns" + rate_note
    )
    problems = [e for s in summaries.values() for p in s["phases"] for e in p["errors"]]
    if problems:
        lines.append("errors: " + "; ".join(problems[:5]))
    return "\n".join(lines)


# --- main ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: short phases, one run per mode",
    )
    parser.add_argument(
        "--messages",
        type=int,
        default=None,
        help="messages per phase (default: about 10 s each; "
        + ", ".join(f"{t} {n}" for t, n in DEFAULT_MESSAGES.items())
        + ")",
    )
    parser.add_argument("--size", type=int, default=1024, help="value bytes per message")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--linger-ms", type=float, default=5)
    parser.add_argument(
        "--repetitions", type=int, default=None, help="runs per mode (default 2; --quick 1)"
    )
    parser.add_argument("--scrape-interval", type=float, default=1.0, help="seconds")
    parser.add_argument("--raft-tick-ms", type=int, default=50)
    parser.add_argument("--skip-cluster", action="store_true", help="one node only")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the work directory")
    parser.add_argument("--no-save", action="store_true", help="do not write the JSON result")
    args = parser.parse_args(argv)
    if args.repetitions is None:
        args.repetitions = 1 if args.quick else 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    topologies = [ONE_NODE] if args.skip_cluster else [ONE_NODE, CLUSTER]
    defaults = QUICK_MESSAGES if args.quick else DEFAULT_MESSAGES
    messages = {t: args.messages or defaults[t] for t in topologies}
    workdir = Path(tempfile.mkdtemp(prefix="vdl-metrics-bench-", dir=args.dir))
    started = dt.datetime.now(dt.UTC)
    machine = machine_info(workdir)
    summaries: dict[str, dict[str, Any]] = {}
    try:
        print(f"recording micro-measure ({MICRO_CALLS} calls)...", file=sys.stderr)
        micro = micro_recording()
        for topology in topologies:
            phases: list[dict[str, Any]] = []
            for round_ in range(args.repetitions):
                for mode in MODES:
                    print(
                        f"{topology}, metrics {mode} ({round_ + 1}/{args.repetitions}): "
                        f"{messages[topology]} x {args.size} B...",
                        file=sys.stderr,
                    )
                    phase = run_phase(workdir, topology, mode, round_, args, messages[topology])
                    print(
                        f"  {phase['mb_per_s']:.1f} MB/s, ack p99 {phase['ack_p99_ms']:.1f} ms",
                        file=sys.stderr,
                    )
                    phases.append(phase)
            summaries[topology] = {**summarize(phases), "phases": phases}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(render(summaries, micro, args, messages, machine["load_average"]))
    result = {
        "bench": "metrics-overhead",
        "started_utc": started.isoformat(timespec="seconds"),
        "parameters": {
            **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "messages_per_phase": messages,
            "scrape_paths": list(SCRAPE_PATHS),
        },
        "machine": machine,
        "recording_micro": micro,
        "topologies": summaries,
    }
    if not args.no_save:
        save_result("metrics-overhead", started, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
