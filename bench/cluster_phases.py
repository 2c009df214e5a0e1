"""Phases of bench/cluster.py that drive clients: produce at a pace, fail over, PySyncObj."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from disk_ceiling import MB, percentiles_ms
from node_launcher import BenchNode, free_port

VALUE_POOL = 64


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """Create RF 3 topics, retrying while the metadata group elects its first leader."""
    deadline = time.monotonic() + 60
    pending = dict(topics)
    while pending:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=n, replication_factor=3) for t, n in pending.items()]
        )
        for name, future in futures.items():
            try:
                future.result(timeout=30)
                pending.pop(name)
            except Exception as exc:
                if "already exists" in str(exc):
                    pending.pop(name)
                elif time.monotonic() > deadline:
                    raise
        if pending:
            time.sleep(0.5)


@dataclass(slots=True)
class LatencyRun:
    delivered: int
    errors: int
    seconds: float
    size: int
    p50_ms: float
    p99_ms: float
    p999_ms: float

    @property
    def msgs_per_s(self) -> float:
        return self.delivered / self.seconds

    @property
    def mb_per_s(self) -> float:
        return float(self.delivered * self.size / self.seconds / MB)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "msgs_per_s": self.msgs_per_s, "mb_per_s": self.mb_per_s}


def paced_produce(
    bootstrap: str,
    topic: str,
    size: int,
    *,
    count: int | None = None,
    rate: float | None = None,
    seconds: float | None = None,
) -> LatencyRun:
    """acks=all, idempotent. As fast as possible for `count` messages, or at `rate` msg/s
    for `seconds`. Latency is librdkafka's produce() -> delivery report."""
    latencies: list[float] = []
    errors = [0]

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        latency = msg.latency()
        if err is not None:
            errors[0] += 1
        elif latency is not None:
            latencies.append(latency)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            # Paced: send at once (latency is the point); full load: let batches form.
            "linger.ms": 1 if rate else 5,
            "batch.size": 1_000_000,
            "batch.num.messages": 10_000,
            "queue.buffering.max.kbytes": 16 * 1024,
            "compression.type": "none",
            "on_delivery": on_delivery,
        }
    )
    values = [os.urandom(size) for _ in range(VALUE_POOL)]
    producer.list_topics(topic, timeout=30)
    producer.produce(topic, values[0])
    producer.flush(30)
    latencies.clear()
    sent = 0
    start = time.perf_counter()
    while True:
        now = time.perf_counter()
        if count is not None:
            if sent >= count:
                break
            due = count
        else:
            assert rate is not None and seconds is not None
            if now - start >= seconds:
                break
            due = int((now - start) * rate) + 1
        while sent < due:
            try:
                producer.produce(topic, values[sent % VALUE_POOL])
                sent += 1
            except BufferError:
                producer.poll(0.01)
            if count is not None and sent & 63 == 0:
                producer.poll(0)
        producer.poll(0.0005 if rate else 0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    p50, p99, p999 = _percentiles(latencies)
    return LatencyRun(len(latencies), errors[0], elapsed, size, p50, p99, p999)


def _percentiles(samples: list[float]) -> tuple[float, float, float]:
    p50, p99 = percentiles_ms(samples, (50, 99))
    ordered = sorted(samples)
    p999 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.999))] * 1000 if ordered else 0.0
    return p50, p99, p999


def _leader_of(bootstrap: str, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return int(md.topics[topic].partitions[0].leader)


def failover_once(bootstrap: str, topic: str, nodes: dict[int, BenchNode]) -> tuple[float, int]:
    """kill -9 the partition's leader under a one-in-flight producer; (seconds from the
    kill to the next successful ack, the killed node)."""
    acked: list[float] = []
    reports = [0]
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        reports[0] += 1
        if err is None:
            acked.append(time.perf_counter())
        elif len(errors) < 5:
            errors.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
            "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "topic.metadata.refresh.fast.interval.ms": 50,
            "message.timeout.ms": 30_000,
            "on_delivery": on_delivery,
        }
    )
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    victim = _leader_of(bootstrap, topic)
    killed_at: float | None = None
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline:
        before = reports[0]
        producer.produce(topic, b"x" * 1024)
        if killed_at is None and len(acked) > 200:
            nodes[victim].kill()  # with this message in flight
            killed_at = time.perf_counter()
        while reports[0] == before and time.perf_counter() < deadline:
            producer.poll(0.001)
        if killed_at is not None and acked and acked[-1] > killed_at:
            return acked[-1] - killed_at, victim
    raise RuntimeError(f"no ack after the leader was killed (errors: {errors})")


def pysyncobj_commits(size: int, seconds: float, window: int) -> dict[str, Any]:
    """Run bench/pysyncobj_peer.py as three processes; its client's result (or an error)."""
    script = Path(__file__).resolve().parent / "pysyncobj_peer.py"
    try:
        import pysyncobj  # noqa: F401
    except ImportError:
        return {"error": "pysyncobj is not installed (pip install pysyncobj)"}
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]

    def partners(i: int) -> str:
        return ",".join(a for j, a in enumerate(addresses) if j != i)

    peers = [
        subprocess.Popen(
            [sys.executable, str(script), addresses[i], partners(i)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in (1, 2)
    ]
    try:
        done = subprocess.run(
            [
                sys.executable,
                str(script),
                addresses[0],
                partners(0),
                "--client",
                str(seconds),
                str(window),
                str(size),
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 90,
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            return {"error": f"no result: {done.stderr[-300:]}"}
        result: dict[str, Any] = json.loads(lines[-1])
        if result.get("commits"):
            result["per_s"] = result["commits"] / result["seconds"]
        return result
    finally:
        for peer in peers:
            peer.kill()
            peer.wait(10)
