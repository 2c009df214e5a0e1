"""Produce/consume throughput of one node against this disk's raw ceiling, in one run.

    .venv/bin/python bench/produce.py [--backend segment|rocks] [--messages N] [--size B]

Phases, in order: raw disk ceiling (before), node start, one-at-a-time durable acks,
throughput produce (confluent-kafka, acks=all, idempotent), consume from the start
(confluent-kafka, then kafka-python for comparison), node stop, raw disk ceiling (after).
The raw ceiling is measured in a directory next to the node's data directory so both sit on
the same filesystem; the higher of the two raw measurements is the reference, so a noisy
shared disk cannot make the ratio look better than it is.

Targets (from the Foundation issue): produce >= 75% of the raw 1 MiB/16 MiB-fdatasync
ceiling; consume >= 300 MB/s. This is a benchmark, not a test: it reports, never asserts.
Everything it starts (node, temp directories, py-spy) is stopped and removed on exit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from disk_ceiling import (
    MB,
    MIB,
    BulkResult,
    SmallSyncResult,
    bulk_append,
    percentiles_ms,
    small_append_sync,
)
from machine import machine_info
from node_launcher import REPO_ROOT, BenchNode, NodeStartError
from profiler import ProfileRecorder

PRODUCE_TARGET_FRACTION = 0.75
CONSUME_TARGET_MB_S = 300.0
RESULTS_DIR = Path(__file__).resolve().parent / "results"
TOPIC = "bench"
SEQUENTIAL_TOPIC = "bench-sequential"
# Distinct random values, so nothing downstream (page cache, compression) sees one repeated
# buffer; 64 of them are enough and cost nothing to keep.
VALUE_POOL = 64
# librdkafka's batch.size and message.max.bytes defaults, and Kafka's 1 MB batch limit.
DEFAULT_BATCH_SIZE = 1_000_000


def producer_config(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    """What a user would set for throughput with durable acks; printed with the results."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "batch.num.messages": args.batch_messages,
        # librdkafka's idempotent producer keeps one request per partition in flight, so a
        # few batches per partition keep it busy; more buffering only adds queueing latency.
        "queue.buffering.max.kbytes": args.buffer_kib,
        "queue.buffering.max.messages": 1_000_000,
        "compression.type": "none",
        "message.max.bytes": (
            _max_request_bytes(args) if args.batch_size > DEFAULT_BATCH_SIZE else DEFAULT_BATCH_SIZE
        ),
        "statistics.interval.ms": 1000,
    }


def _max_request_bytes(args: argparse.Namespace) -> int:
    # librdkafka may add one message past batch.size; leave room for it and the framing.
    return int(args.batch_size) + max(int(args.size), 0) + 64 * 1024


def topic_config(args: argparse.Namespace) -> dict[str, str]:
    """Raise the topic's batch limit only when asked for batches beyond Kafka's default."""
    if args.batch_size <= DEFAULT_BATCH_SIZE:
        return {}
    return {"max.message.bytes": str(_max_request_bytes(args))}


def consumer_config(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        # Consumer groups are not served yet: assign() with explicit positions, no commits.
        "group.id": "vdl-bench",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 50 * MIB,
        "max.partition.fetch.bytes": 8 * MIB,
        "fetch.wait.max.ms": 100,
    }


@dataclass(slots=True)
class ProduceResult:
    messages: int
    value_bytes: int
    seconds: float
    delivered: int
    errors: list[str]
    p50_ms: float
    p99_ms: float
    max_ms: float
    node_cpu_s: float | None
    client_cpu_s: float
    requests: int | None
    rtt_p50_ms: float | None
    rtt_p99_ms: float | None
    rtt_mean_ms: float | None

    @property
    def mb_per_s(self) -> float:
        return float(self.value_bytes / self.seconds / MB)

    @property
    def msgs_per_s(self) -> float:
        return self.delivered / self.seconds


@dataclass(slots=True)
class SequentialResult:
    acks: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: list[str]

    @property
    def per_s(self) -> float:
        return self.acks / self.seconds if self.seconds else 0.0


@dataclass(slots=True)
class ConsumeResult:
    client: str
    messages: int
    value_bytes: int
    seconds: float
    complete: bool
    node_cpu_s: float | None
    first_message_s: float | None = None  # from assign() to the first record in hand
    errors: list[str] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes / self.seconds / MB if self.seconds else 0.0


def create_topic(
    bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})
    futures = admin.create_topics([new])
    futures[name].result(timeout=30)


def run_sequential(bootstrap: str, size: int, seconds: float) -> SequentialResult:
    """One message in flight at a time: the durable-ack rate a lone synchronous writer sees."""
    errors: list[str] = []
    latencies: list[float] = []
    done: list[bool] = [False]

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        done[0] = True
        latency = msg.latency()
        if err is not None:
            errors.append(str(err))
        elif latency is not None:
            latencies.append(latency)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
            "max.in.flight.requests.per.connection": 1,
        }
    )
    value = os.urandom(size)
    # The first message pays for metadata, the producer id and the connection: not timed.
    producer.produce(SEQUENTIAL_TOPIC, value, on_delivery=on_delivery)
    producer.flush(30)
    latencies.clear()
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline and len(errors) < 10:
        done[0] = False
        producer.produce(SEQUENTIAL_TOPIC, value, on_delivery=on_delivery)
        while not done[0]:
            producer.poll(1.0)
    elapsed = time.perf_counter() - start
    producer.flush(30)
    p50, p99 = percentiles_ms(latencies, (50, 99))
    return SequentialResult(len(latencies), elapsed, p50, p99, errors[:5])


def _client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def run_produce(
    node: BenchNode, args: argparse.Namespace, profile: ProfileRecorder | None
) -> tuple[ProduceResult, dict[str, Any]]:
    errors: list[str] = []
    latencies: list[float] = []
    stats: list[dict[str, Any]] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            if len(errors) < 5:
                errors.append(str(err))
            errors_count[0] += 1
        else:
            # latency() is librdkafka's own produce()-to-delivery-report clock, so no
            # per-message closure or timestamp bookkeeping is needed here.
            latency = msg.latency()
            if latency is not None:
                latencies.append(latency)

    def on_stats(text: str) -> None:
        stats.append(json.loads(text))

    errors_count = [0]  # a list, so the callback can count without `nonlocal`
    config = producer_config(node.bootstrap, args)
    producer = Producer({**config, "on_delivery": on_delivery, "stats_cb": on_stats})
    values = [os.urandom(args.size) for _ in range(VALUE_POOL)]
    # Connection, metadata and InitProducerId happen before the clock starts, as they would
    # in a long-running producer: a first delivered message proves all three are done (it
    # goes to the other topic, so the consume phase reads exactly what was timed).
    producer.list_topics(TOPIC, timeout=30)
    producer.produce(SEQUENTIAL_TOPIC, values[0])
    producer.flush(30)
    latencies.clear()
    errors.clear()
    errors_count[0] = 0
    if profile is not None:
        profile.start()
    try:
        node_cpu_before, client_cpu_before = node.cpu_seconds(), _client_cpu_s()
        start = time.perf_counter()
        for i in range(args.messages):
            value = values[i % VALUE_POOL]
            while True:
                try:
                    producer.produce(TOPIC, value)
                    break
                except BufferError:
                    # Full local queue: serve delivery reports until space frees up.
                    producer.poll(0.05)
            # Delivery reports run only inside poll(); polling often keeps the measured
            # latency from including time spent waiting for this loop to look.
            if i & 63 == 0:
                producer.poll(0)
        remaining = producer.flush(120)
        elapsed = time.perf_counter() - start
        node_cpu_after, client_cpu_after = node.cpu_seconds(), _client_cpu_s()
    finally:
        # Also on Ctrl-C: py-spy must detach and write what it has.
        if profile is not None:
            profile.stop()
    # One more stats window after the run, so request counters cover all of it.
    deadline = time.monotonic() + 2.5
    seen = len(stats)
    while len(stats) == seen and time.monotonic() < deadline:
        producer.poll(0.1)
    if errors_count[0] > len(errors):
        errors.append(f"{errors_count[0]} delivery errors in total")
    if remaining:
        errors.append(f"{remaining} messages still undelivered after flush")
    requests, rtt_p50, rtt_p99, rtt_mean = _request_stats(stats)
    p50, p99 = percentiles_ms(latencies, (50, 99))
    result = ProduceResult(
        messages=args.messages,
        value_bytes=len(latencies) * args.size,
        seconds=elapsed,
        delivered=len(latencies),
        errors=errors,
        p50_ms=p50,
        p99_ms=p99,
        max_ms=max(latencies) * 1000 if latencies else float("nan"),
        node_cpu_s=_cpu_delta(node_cpu_before, node_cpu_after),
        client_cpu_s=client_cpu_after - client_cpu_before,
        requests=requests,
        rtt_p50_ms=rtt_p50,
        rtt_p99_ms=rtt_p99,
        rtt_mean_ms=rtt_mean,
    )
    return result, {k: v for k, v in config.items() if k != "bootstrap.servers"}


def _request_stats(
    stats: list[dict[str, Any]],
) -> tuple[int | None, float | None, float | None, float | None]:
    """Produce requests sent; request round trip p50/p99 (busiest window) and mean (all).

    librdkafka's stats windows are per interval; the busiest one is the steady state, while
    the mean over all windows feeds Little's law (requests in flight = rate x mean RTT).
    """
    if not stats:
        return None, None, None, None
    brokers = [b for b in stats[-1].get("brokers", {}).values() if b.get("nodeid", -1) >= 0]
    requests = sum(int(b.get("req", {}).get("Produce", 0)) for b in brokers) if brokers else None
    busiest: dict[str, Any] | None = None
    total_us = total_cnt = 0
    for sample in stats:
        for broker in sample.get("brokers", {}).values():
            rtt = broker.get("rtt", {})
            cnt = int(rtt.get("cnt", 0))
            if not cnt:
                continue
            total_us += rtt["avg"] * cnt
            total_cnt += cnt
            if busiest is None or cnt > busiest["cnt"]:
                busiest = rtt
    if busiest is None:
        return requests, None, None, None
    return requests, busiest["p50"] / 1000, busiest["p99"] / 1000, total_us / total_cnt / 1000


def consume_confluent(node: BenchNode, partitions: int, expected: int) -> ConsumeResult:
    consumer = Consumer(consumer_config(node.bootstrap))
    count = size = 0
    errors: list[str] = []
    first: float | None = None
    try:
        # Connect and learn metadata before the clock starts, as the producer does.
        consumer.list_topics(TOPIC, timeout=30)
        node_before = node.cpu_seconds()
        start = time.perf_counter()
        last_progress = start
        consumer.assign([CKTopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
        while count < expected and time.perf_counter() - last_progress < 30:
            batch = consumer.consume(num_messages=10_000, timeout=1.0)
            for msg in batch:
                if msg.error() is not None:
                    if len(errors) < 5:
                        errors.append(str(msg.error()))
                    continue
                count += 1
                size += len(msg.value() or b"")
            if batch:
                last_progress = time.perf_counter()
                if first is None:
                    first = last_progress - start
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    return ConsumeResult(
        "confluent-kafka",
        count,
        size,
        elapsed,
        count >= expected,
        _cpu_delta(node_before, node.cpu_seconds()),
        first,
        errors,
    )


def consume_kafka_python(
    node: BenchNode, partitions: int, expected: int, budget_s: float
) -> ConsumeResult:
    """kafka-python for comparison: time-boxed, since it is pure Python and much slower."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=node.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_bytes=50 * MIB,
        max_partition_fetch_bytes=8 * MIB,
        fetch_max_wait_ms=100,
    )
    count = size = 0
    first: float | None = None
    node_before = node.cpu_seconds()
    start = time.perf_counter()
    try:
        tps = [KTopicPartition(TOPIC, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        while count < expected and time.perf_counter() - start < budget_s:
            for records in consumer.poll(timeout_ms=1000, max_records=10_000).values():
                if first is None and records:
                    first = time.perf_counter() - start
                count += len(records)
                size += sum(len(r.value or b"") for r in records)
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    return ConsumeResult(
        "kafka-python",
        count,
        size,
        elapsed,
        count >= expected,
        _cpu_delta(node_before, node.cpu_seconds()),
        first,
    )


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def _cpu_pct(cpu_s: float | None, seconds: float) -> str:
    return "n/a" if cpu_s is None else f"{100 * cpu_s / seconds:.0f}%"


def render_table(
    backend: str,
    raw_bulk: BulkResult,
    raw_bulk_runs: list[BulkResult],
    raw_small: SmallSyncResult,
    sequential: SequentialResult,
    produce: ProduceResult,
    consumes: list[ConsumeResult],
    producer_settings: dict[str, Any],
    args: argparse.Namespace,
    load_average: tuple[float, float, float],
) -> str:
    produce_ratio = produce.mb_per_s / raw_bulk.mb_per_s
    seq_ratio = sequential.per_s / raw_small.per_s if raw_small.per_s else 0.0
    rows: list[tuple[str, str, str, str]] = [
        (
            "raw disk: 1 MiB appends, fdatasync/16 MiB",
            f"{raw_bulk.mb_per_s:8.1f} MB/s",
            "reference: best of " + ", ".join(f"{r.mb_per_s:.0f}" for r in raw_bulk_runs),
            "",
        ),
        (
            "raw disk: 4 KiB append+fdatasync",
            f"{raw_small.per_s:8.0f} /s",
            f"p50 {raw_small.p50_ms:.2f} ms, p99 {raw_small.p99_ms:.2f} ms",
            "",
        ),
        (
            "produce, acks=all",
            f"{produce.mb_per_s:8.1f} MB/s",
            f"{produce_ratio:.0%} of raw (target >= {PRODUCE_TARGET_FRACTION:.0%})",
            _verdict(produce_ratio >= PRODUCE_TARGET_FRACTION),
        ),
        ("produce, acks=all", f"{produce.msgs_per_s:8.0f} msg/s", f"{args.size} B values", ""),
        (
            "ack latency under load p50 / p99",
            f"{produce.p50_ms:.1f} / {produce.p99_ms:.1f} ms",
            "produce() -> delivery report",
            "",
        ),
    ]
    if produce.rtt_p50_ms is not None and produce.rtt_p99_ms is not None:
        rows.append(
            (
                "produce request RTT p50 / p99",
                f"{produce.rtt_p50_ms:.1f} / {produce.rtt_p99_ms:.1f} ms",
                "librdkafka, busiest 1 s window",
                "",
            )
        )
    if produce.requests:
        rate = produce.requests / produce.seconds
        # Little's law: how many requests the client really kept in flight. librdkafka's
        # idempotent producer holds one per partition, whatever max.in.flight says.
        in_flight = (
            f", ~{rate * produce.rtt_mean_ms / 1000:.1f} in flight"
            if produce.rtt_mean_ms is not None
            else ""
        )
        rows.append(
            (
                "produce requests",
                f"{rate:8.0f} /s",
                f"{produce.delivered / produce.requests:.0f} msg/request{in_flight}",
                "",
            )
        )
    rows += [
        (
            "node / client CPU during produce",
            f"{_cpu_pct(produce.node_cpu_s, produce.seconds)} / "
            f"{_cpu_pct(produce.client_cpu_s, produce.seconds)}",
            f"of one core, {os.cpu_count()} cores",
            "",
        ),
        (
            "one in flight: durable acks",
            f"{sequential.per_s:8.0f} /s",
            f"{seq_ratio:.0%} of raw 4 KiB fdatasync/s; p50 {sequential.p50_ms:.2f}"
            f" p99 {sequential.p99_ms:.2f} ms",
            "",
        ),
    ]
    for consume in consumes:
        complete = "" if consume.complete else f" ({consume.messages} msgs, time-boxed)"
        target = consume.client == "confluent-kafka"
        rows.append(
            (
                f"consume from start, {consume.client}",
                f"{consume.mb_per_s:8.1f} MB/s",
                (f"target >= {CONSUME_TARGET_MB_S:.0f} MB/s" if target else "comparison")
                + complete
                + f"; node CPU {_cpu_pct(consume.node_cpu_s, consume.seconds)}"
                + (
                    f", first record after {consume.first_message_s * 1000:.0f} ms"
                    if consume.first_message_s is not None
                    else ""
                ),
                _verdict(consume.mb_per_s >= CONSUME_TARGET_MB_S) if target else "",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    header = (
        f"VDL produce bench: backend={backend}, {produce.delivered}/{produce.messages} x "
        f"{args.size} B, partitions={args.partitions} (MB = 10^6 bytes)"
    )
    load = ", ".join(f"{x:.2f}" for x in load_average)
    header += f"\nload average at start: {load} (the machine may be shared)"
    lines = [header, "-" * max(len(h) for h in header.splitlines())]
    for row in rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    settings = ", ".join(
        f"{k}={v}" for k, v in producer_settings.items() if k != "statistics.interval.ms"
    )
    lines.append(f"producer: {settings}")
    lines.append(
        "consumer: "
        + ", ".join(f"{k}={v}" for k, v in consumer_config("").items() if k != "bootstrap.servers")
    )
    problems = produce.errors + sequential.errors + [e for c in consumes for e in c.errors]
    if problems:
        lines.append("errors: " + "; ".join(problems[:5]))
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("segment", "rocks"), default="segment")
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024, help="value bytes per message")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--linger-ms", type=float, default=5)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="bytes per batch; above 1000000 the topic's max.message.bytes is raised to match",
    )
    parser.add_argument("--batch-messages", type=int, default=10_000)
    parser.add_argument(
        "--buffer-kib", type=int, default=16 * 1024, help="producer queue.buffering.max.kbytes"
    )
    parser.add_argument(
        "--sequential-seconds", type=float, default=2.0, help="duration of the one-in-flight phase"
    )
    parser.add_argument(
        "--raw-mib",
        type=int,
        default=None,
        help="raw bulk write volume (default: the produced volume)",
    )
    parser.add_argument("--raw-small-seconds", type=float, default=2.0)
    parser.add_argument(
        "--kafka-python-seconds",
        type=float,
        default=20.0,
        help="time box for the kafka-python consume (0 skips it)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="parent of the temporary work directory (picks the filesystem)",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        help="record the node with py-spy during produce (.svg, .json or raw)",
    )
    parser.add_argument("--no-save", action="store_true", help="do not write the JSON result")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    parent = args.dir or Path(tempfile.gettempdir())
    workdir = Path(tempfile.mkdtemp(prefix="vdl-bench-", dir=parent))
    data_dir, raw_dir = workdir / "node-data", workdir / "raw-disk"
    raw_dir.mkdir()
    raw_bytes = (args.raw_mib * MIB) if args.raw_mib else max(64 * MIB, args.messages * args.size)
    started = dt.datetime.now(dt.UTC)
    machine = machine_info(workdir)
    node = BenchNode(
        data_dir, workdir / "node.log", "--log-backend", args.backend, "--log-level", "WARNING"
    )
    try:
        print(
            f"raw disk ({raw_bytes // MIB} MiB bulk, {args.raw_small_seconds:.0f} s small)...",
            file=sys.stderr,
        )
        raw_runs = [bulk_append(raw_dir, raw_bytes)]
        raw_small = small_append_sync(raw_dir, seconds=args.raw_small_seconds)
        print(f"node ({args.backend}) on {node.bootstrap}...", file=sys.stderr)
        node.start()
        create_topic(node.bootstrap, TOPIC, args.partitions, topic_config(args))
        create_topic(node.bootstrap, SEQUENTIAL_TOPIC, 1)
        print("one-in-flight acks...", file=sys.stderr)
        sequential = run_sequential(node.bootstrap, args.size, args.sequential_seconds)
        print(f"produce {args.messages} x {args.size} B...", file=sys.stderr)
        profile = ProfileRecorder(node.pid, args.py_spy) if args.py_spy else None
        produce, producer_settings = run_produce(node, args, profile)
        print("consume...", file=sys.stderr)
        consumes = [consume_confluent(node, args.partitions, produce.delivered)]
        if args.kafka_python_seconds > 0:
            consumes.append(
                consume_kafka_python(
                    node, args.partitions, produce.delivered, args.kafka_python_seconds
                )
            )
        exit_code = node.stop()
        if exit_code != 0:
            print(f"node exited {exit_code}:\n{node.log_tail()}", file=sys.stderr)
        # Again once the node is gone: the disk is shared, so take the better of two.
        raw_runs.append(bulk_append(raw_dir, raw_bytes))
    except NodeStartError:
        raise
    except BaseException:
        print(f"node log tail:\n{node.log_tail()}", file=sys.stderr)
        raise
    finally:
        node.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    raw_bulk = max(raw_runs, key=lambda r: r.mb_per_s)
    table = render_table(
        backend=args.backend,
        raw_bulk=raw_bulk,
        raw_bulk_runs=raw_runs,
        raw_small=raw_small,
        sequential=sequential,
        produce=produce,
        consumes=consumes,
        producer_settings=producer_settings,
        args=args,
        load_average=machine["load_average"],
    )
    print(table)
    result = {
        "bench": "produce",
        "started_utc": started.isoformat(timespec="seconds"),
        "backend": args.backend,
        "parameters": {
            "messages": args.messages,
            "size": args.size,
            "partitions": args.partitions,
            "producer": producer_settings,
            "consumer": {k: v for k, v in consumer_config("").items() if k != "bootstrap.servers"},
            "raw_bytes": raw_bytes,
        },
        "machine": machine,
        "raw_disk": {
            "bulk_runs": [r.as_dict() for r in raw_runs],
            "bulk_reference_mb_per_s": raw_bulk.mb_per_s,
            "small_append_fdatasync": raw_small.as_dict(),
        },
        "sequential": {
            "acks": sequential.acks,
            "seconds": sequential.seconds,
            "per_s": sequential.per_s,
            "p50_ms": sequential.p50_ms,
            "p99_ms": sequential.p99_ms,
            "ratio_to_raw_small": sequential.per_s / raw_small.per_s if raw_small.per_s else None,
            "errors": sequential.errors,
        },
        "produce": {
            "delivered": produce.delivered,
            "value_bytes": produce.value_bytes,
            "seconds": produce.seconds,
            "mb_per_s": produce.mb_per_s,
            "msgs_per_s": produce.msgs_per_s,
            "ack_p50_ms": produce.p50_ms,
            "ack_p99_ms": produce.p99_ms,
            "ack_max_ms": produce.max_ms,
            "produce_requests": produce.requests,
            "rtt_p50_ms": produce.rtt_p50_ms,
            "rtt_p99_ms": produce.rtt_p99_ms,
            "rtt_mean_ms": produce.rtt_mean_ms,
            "node_cpu_s": produce.node_cpu_s,
            "client_cpu_s": produce.client_cpu_s,
            "errors": produce.errors,
            "ratio_to_raw": produce.mb_per_s / raw_bulk.mb_per_s,
            "target_ratio": PRODUCE_TARGET_FRACTION,
            "met": produce.mb_per_s / raw_bulk.mb_per_s >= PRODUCE_TARGET_FRACTION,
        },
        "consume": [
            {
                "client": c.client,
                "messages": c.messages,
                "value_bytes": c.value_bytes,
                "seconds": c.seconds,
                "mb_per_s": c.mb_per_s,
                "complete": c.complete,
                "node_cpu_s": c.node_cpu_s,
                "first_message_s": c.first_message_s,
                "errors": c.errors,
                "target_mb_per_s": CONSUME_TARGET_MB_S if c.client == "confluent-kafka" else None,
                "met": c.mb_per_s >= CONSUME_TARGET_MB_S if c.client == "confluent-kafka" else None,
            }
            for c in consumes
        ],
    }
    if not args.no_save:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        stamp = started.strftime("%Y%m%dT%H%M%SZ")
        path = RESULTS_DIR / f"produce-{args.backend}-{stamp}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"saved {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
