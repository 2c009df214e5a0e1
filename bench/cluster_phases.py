"""Phases of bench/cluster.py that drive clients: produce at a pace, fail over, PySyncObj,
restart a node with a large log."""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from disk_ceiling import MB, tail_percentiles_ms
from node_launcher import BenchNode, free_port
from stage_report import NodeStages

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


def batched_produce(
    bootstrap: str,
    topic: str,
    partitions: int,
    size: int,
    *,
    seconds: float,
    batch_bytes: int = 1_000_000,
    window: int = 4,
    total_bytes: int | None = None,
) -> LatencyRun:
    """acks=all Produce requests (v7) of one ready-made batch of `size`-byte records, as
    much as a producer's `batch.size` holds, to each partition's leader over a connection
    of its own with `window` requests in flight, for `seconds`. The client does no work
    per message, so this is what the nodes take, not what a client library gives them.
    Latency is a request's send to its response. With `total_bytes`, each connection stops
    once its share of that many value bytes is sent (or at `seconds`, whichever is first)."""
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    from vdl.log.record_batch import Record, build_batch

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    leaders = {p: md.brokers[meta.leader] for p, meta in md.topics[topic].partitions.items()}
    now_ms = int(time.time() * 1000)
    values = [os.urandom(size) for _ in range(VALUE_POOL)]
    per_batch = max(1, batch_bytes // (size + 16))
    records = [Record(None, values[i % VALUE_POOL], now_ms) for i in range(per_batch)]
    batch = build_batch(records)
    latencies: list[float] = []
    errors = [0]
    delivered = [0]
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds
    budget = None
    if total_bytes is not None:
        budget = -(-total_bytes // (per_batch * size * len(leaders)))  # requests per connection

    def request(partition: int, correlation_id: int) -> bytes:
        produce = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=30_000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[
                        ProduceRequest.TopicProduceData.PartitionProduceData(
                            index=partition, records=batch
                        )
                    ],
                )
            ],
            version=7,
        )
        produce.with_header(correlation_id=correlation_id, client_id="bench")
        return bytes(produce.encode(header=True, framed=True))

    def drive(partition: int) -> None:
        leader = leaders[partition]
        sent: list[float] = []
        done: list[float] = []
        failed = acked = 0
        with socket.create_connection((leader.host, leader.port)) as sock:
            sock.settimeout(60)
            correlation = 0

            def more() -> bool:
                return time.perf_counter() < deadline and (budget is None or correlation < budget)

            while more() or correlation > len(done):
                while correlation - len(done) < window and more():
                    correlation += 1
                    sent.append(time.perf_counter())
                    sock.sendall(request(partition, correlation))
                head = sock.recv(4, socket.MSG_WAITALL)
                (length,) = struct.unpack(">i", head)
                body = sock.recv(length, socket.MSG_WAITALL)
                done.append(time.perf_counter())
                answer = ProduceResponse.decode(body[4:], version=7)
                if answer.responses[0].partition_responses[0].error_code:
                    failed += 1
                else:
                    acked += 1
        with lock:
            latencies.extend(d - s for s, d in zip(sent, done, strict=True))
            errors[0] += failed
            delivered[0] += acked * per_batch

    start = time.perf_counter()
    threads = [threading.Thread(target=drive, args=(p,)) for p in sorted(leaders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    p50, p99, p999 = tail_percentiles_ms(latencies)
    return LatencyRun(delivered[0], errors[0], elapsed, size, p50, p99, p999)


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
    return tail_percentiles_ms(samples)


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


def median_stage(per_node: Mapping[int, NodeStages], key: str, q: float) -> float | None:
    """Across nodes, the median of each node's `q`-quantile of stage `key` over a phase
    (a stage table's difference); None when no node recorded it."""
    values = [
        stages[key].quantile(q)
        for stages in per_node.values()
        if key in stages and stages[key].count > 0
    ]
    return statistics.median(values) if values else None


@dataclass(slots=True)
class RestartTiming:
    """One restart of a node on its data dir: every time is from just before the spawn."""

    how: str  # "SIGTERM" or "SIGKILL": how the previous process ended
    stop_seconds: float  # the signal to the process's exit
    exit_code: int | None
    listen_seconds: float  # the Kafka port accepts a connection
    ack_seconds: float  # a produce (acks=all) to the topic is acknowledged
    serving_seconds: float  # that ack, and the high watermark is the previous end + 1
    expected_high_watermark: int
    high_watermark: int


@dataclass(slots=True)
class RestartRun:
    topic: str
    fill_bytes: int  # value bytes produced
    fill_messages: int
    fill_seconds: float
    data_dir_bytes: int  # the node's data directory after the fill
    segment_files: int
    end_offset: int  # high watermark after the fill
    restarts: list[RestartTiming]

    @property
    def fill_mb_per_s(self) -> float:
        return self.fill_bytes / self.fill_seconds / MB

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fill_mb_per_s": self.fill_mb_per_s}


RESTART_VALUE_BYTES = 64 * 1024


# Values of the fill in one-record batches: every Produce request one 1 KiB record.
SMALL_VALUE_BYTES = 1024


def restart_to_serving(
    workdir: Path, log_bytes: int, topic: str = "bench-restart", *, one_record_batches: bool = False
) -> RestartRun:
    """One single-node VDL (no peers) whose one-partition topic's log is filled with at
    least `log_bytes`, then restarted on its data dir twice: after SIGTERM (clean stop),
    then after SIGKILL (recovery). The node and its directory are removed at the end.

    The fill: 64 KiB values in batches of up to 1 MB (confluent-kafka), or with
    `one_record_batches` 1 KiB values each in a batch of its own (ready-made Produce
    requests, 64 in flight): a log of many small entries, whose indexes and recovery scan
    cost more per byte."""
    data_dir = workdir / "restart-node"
    # INFO: the node's own account of its start (the log stays in the work directory).
    node = BenchNode(data_dir, workdir / "restart-node.log", "--log-level", "INFO")
    try:
        node.start()
        _create_single_topic(node.bootstrap, topic)
        if one_record_batches:
            filled = batched_produce(
                node.bootstrap,
                topic,
                1,
                SMALL_VALUE_BYTES,
                seconds=3600,
                batch_bytes=SMALL_VALUE_BYTES,
                window=64,
                total_bytes=log_bytes,
            )
            if filled.errors:
                raise RuntimeError(f"{filled.errors} fill requests failed")
            fill_messages, fill_seconds = filled.delivered, filled.seconds
            value_bytes = SMALL_VALUE_BYTES
        else:
            fill_messages, fill_seconds = _fill(node.bootstrap, topic, log_bytes)
            value_bytes = RESTART_VALUE_BYTES
        end = _high_watermark(node.bootstrap, topic, timeout=30)
        files = [f for f in data_dir.rglob("*") if f.is_file()]
        run = RestartRun(
            topic=topic,
            fill_bytes=fill_messages * value_bytes,
            fill_messages=fill_messages,
            fill_seconds=fill_seconds,
            data_dir_bytes=sum(f.stat().st_size for f in files),
            # Segment files: `.log`, as RocksDB's write-ahead logs under meta/ are too.
            segment_files=sum(
                1
                for f in files
                if f.suffix == ".log" and "meta" not in f.relative_to(data_dir).parts
            ),
            end_offset=end,
            restarts=[],
        )
        for how in ("SIGTERM", "SIGKILL"):
            end = _high_watermark(node.bootstrap, topic, timeout=30)
            stopped = time.perf_counter()
            if how == "SIGTERM":
                exit_code = node.stop()
            else:
                node.kill()
                exit_code = None if node.process is None else node.process.returncode
            stop_seconds = time.perf_counter() - stopped
            run.restarts.append(_restart_once(node, topic, end, how, stop_seconds, exit_code))
        return run
    finally:
        node.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def _create_single_topic(bootstrap: str, topic: str) -> None:
    """One partition, RF 1. The client goes with the call: alive, it would log its
    reconnects while the node restarts."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(
        timeout=30
    )


def _fill(bootstrap: str, topic: str, log_bytes: int) -> tuple[int, float]:
    """Produce (acks=all, batches of up to 1 MB) until `log_bytes` of values are
    acknowledged; (messages, seconds)."""
    errors: list[str] = []
    delivered = [0]

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            delivered[0] += 1
        elif len(errors) < 5:
            errors.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,  # below the node's max.message.bytes (1 MiB)
            "batch.num.messages": 10_000,
            "queue.buffering.max.kbytes": 64 * 1024,
            "compression.type": "none",
            "on_delivery": on_delivery,
        }
    )
    values = [os.urandom(RESTART_VALUE_BYTES) for _ in range(VALUE_POOL)]
    count = -(-log_bytes // RESTART_VALUE_BYTES)
    producer.list_topics(topic, timeout=30)
    start = time.perf_counter()
    sent = 0
    while sent < count:
        try:
            producer.produce(topic, values[sent % VALUE_POOL], partition=0)
            sent += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(300)
    seconds = time.perf_counter() - start
    close = getattr(producer, "close", None)  # confluent-kafka >= 2.12; else when collected
    if close is not None:
        close()  # it would log its reconnects while the node restarts
    if errors or delivered[0] < count:
        raise RuntimeError(f"fill: {delivered[0]} of {count} acknowledged ({errors})")
    return count, seconds


def _high_watermark(bootstrap: str, topic: str, timeout: float) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-restart"})
    try:
        _, high = consumer.get_watermark_offsets(
            TopicPartition(topic, 0), timeout=timeout, cached=False
        )
        return int(high)
    finally:
        consumer.close()


def _restart_once(
    node: BenchNode,
    topic: str,
    end: int,
    how: str,
    stop_seconds: float,
    exit_code: int | None,
) -> RestartTiming:
    """Start `node` again and time it to serving: a produce acknowledged and the high
    watermark at `end` + 1. The clients exist before the spawn and retry every few ms, and
    the launcher waits for the port in a thread of its own while this one polls them, so
    the times are the node's to within a few ms (the port's, within the launcher's 50 ms)."""
    acked: list[float] = []  # the ack's time: the produce call plus librdkafka's latency
    errors: list[str] = []
    produced = [0.0]

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        latency = msg.latency()
        if err is None:
            acked.append(produced[0] + (latency if latency is not None else 0.0))
        elif len(errors) < 5:
            errors.append(str(err))

    quick: dict[str, Any] = {
        "bootstrap.servers": node.bootstrap,
        # Refused connections until the node listens: expected, not worth a line each.
        "log_level": 0,
        "error_cb": lambda _err: None,
        "reconnect.backoff.ms": 10,
        "reconnect.backoff.max.ms": 50,
        "retry.backoff.ms": 10,
        "retry.backoff.max.ms": 50,
        "topic.metadata.refresh.fast.interval.ms": 20,
        "socket.connection.setup.timeout.ms": 1000,
    }
    producer = Producer(
        {
            **quick,
            "acks": "all",
            # Not idempotent: librdkafka retries its InitProducerId on a timer (about a
            # second) after the refused connects, which would be timed as the node's. One
            # message on a fresh connection is not duplicated; the high watermark shows it.
            "enable.idempotence": False,
            "linger.ms": 0,
            "message.timeout.ms": 300_000,
            "on_delivery": on_delivery,
        }
    )
    consumer = Consumer({**quick, "group.id": "bench-restart"})
    partition = TopicPartition(topic, 0)
    listened: list[float] = []
    failed: list[BaseException] = []

    def start_node() -> None:
        try:
            node.start(timeout=300)
            listened.append(time.perf_counter())
        except BaseException as exc:  # handed to the polling thread
            failed.append(exc)

    starter = threading.Thread(target=start_node, name="restart-start", daemon=True)
    try:
        produced[0] = time.perf_counter()
        producer.produce(topic, b"restart-probe", partition=0)  # sent once the node listens
        start = time.perf_counter()  # the moment before Popen
        starter.start()
        deadline = start + 300
        high = -1
        while time.perf_counter() < deadline:
            if failed:
                raise RuntimeError(f"restart after {how}: {failed[0]}") from failed[0]
            if errors:
                raise RuntimeError(f"restart after {how}: produce failed: {errors}")
            if not acked:
                producer.poll(0.002)
                continue
            try:
                _, high = consumer.get_watermark_offsets(partition, timeout=0.2, cached=False)
            except KafkaException:
                continue
            if high >= end + 1:
                break
            time.sleep(0.002)
        serving = time.perf_counter() - start
        if not acked or high < end + 1:
            raise RuntimeError(
                f"restart after {how}: not serving within 300 s (acked {bool(acked)}, "
                f"high watermark {high}, expected {end + 1})"
            )
        starter.join(300)
        if failed or not listened:
            raise RuntimeError(f"restart after {how}: the launcher failed: {failed}")
        return RestartTiming(
            how=how,
            stop_seconds=stop_seconds,
            exit_code=exit_code,
            listen_seconds=listened[0] - start,
            ack_seconds=acked[0] - start,
            serving_seconds=serving,
            expected_high_watermark=end + 1,
            high_watermark=int(high),
        )
    finally:
        if starter.is_alive():  # a failure while the launcher still waits
            starter.join(300)
        producer.flush(5)
        consumer.close()
