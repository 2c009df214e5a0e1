"""A Jepsen-style checker for idempotent producing on three real nodes.

Two idempotent acks=all producers (confluent-kafka with enable.idempotence, and
kafka-python's default idempotent producer) write numbered messages while a nemesis
kills the leader of a partition with SIGKILL, waits, restarts it, and moves on to the next
partition, for a bounded time. Then everything is read back and the history is checked:

- no acknowledged message is lost, and each sits at the offset it was acknowledged with;
- no message is stored twice (retries across a failover are recognised as duplicates);
- each producer's messages to one partition keep the order they were sent in;
- offsets in every partition are strictly increasing.

Each figure is printed (run with -s to see it), so a passing run shows what it checked.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer

from tests.integration.cluster_support import Cluster

TOPIC = "jepsen"
PARTITIONS = 2


@dataclass
class History:
    """What the producers were told: value -> (partition, offset) for each ack."""

    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    sent: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    fatal: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, value: bytes, partition: int, offset: int) -> None:
        with self.lock:
            self.acked[value] = (partition, offset)

    def fail(self, producer: str, error: str, fatal: bool) -> None:
        with self.lock:
            self.failed[producer] += 1
            if fatal:
                self.fatal.append(f"{producer}: {error}")


def _value(producer: str, seq: int) -> bytes:
    return f"{producer}:{seq:09d}".encode()


def _confluent_producer(
    bootstrap: str, history: History, stop: threading.Event, rate: float
) -> None:
    name = "confluent"

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is None:
            history.ack(msg.value(), msg.partition(), msg.offset())  # type: ignore[attr-defined]
        else:
            history.fail(name, str(err), err.fatal())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.max.ms": 500,
        }
    )
    seq = 0
    while not stop.is_set():
        try:
            producer.produce(
                TOPIC, value=_value(name, seq), partition=seq % PARTITIONS, on_delivery=on_delivery
            )
        except BufferError:
            producer.poll(0.05)
            continue
        history.sent[name] += 1
        seq += 1
        producer.poll(0)
        time.sleep(1 / rate)
    producer.flush(150)


def _kafka_python_producer(
    bootstrap: str, history: History, stop: threading.Event, rate: float
) -> None:
    name = "kafkapy"
    # kafka-python 3 is idempotent by default (acks=all, in flight <= 5, retries unbounded).
    producer = KafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        linger_ms=5,
        delivery_timeout_ms=150000,
        request_timeout_ms=10000,
        reconnect_backoff_max_ms=500,
        metadata_max_age_ms=1000,
    )
    assert producer.config["enable_idempotence"]

    def on_error(exc: BaseException) -> None:
        history.fail(name, repr(exc), False)

    seq = 0
    while not stop.is_set():
        value = _value(name, seq)
        future = producer.send(TOPIC, value=value, partition=seq % PARTITIONS)
        future.add_callback(lambda md, value=value: history.ack(value, md.partition, md.offset))
        future.add_errback(on_error)
        history.sent[name] += 1
        seq += 1
        time.sleep(1 / rate)
    producer.flush(150)
    producer.close(30)


def _nemesis(cluster: Cluster, until: float, rng: random.Random, log: list[str]) -> None:
    """Kill -9 the leader of each partition in turn, restart it after a pause."""
    partition = 0
    while time.monotonic() < until:
        leader = cluster.wait_for_leader(TOPIC, partition % PARTITIONS)
        node = cluster.nodes[leader]
        node.kill()
        down = rng.uniform(0.5, 2.5)
        log.append(f"killed node {leader} (leader of p{partition % PARTITIONS}) for {down:.1f}s")
        time.sleep(down)
        node.start()
        time.sleep(rng.uniform(1.0, 3.0))
        partition += 1


def _high_watermark(consumer: Consumer, partition: int, timeout: float = 60) -> int:
    """The partition's high watermark, asked again while the cluster settles after the
    chaos: librdkafka answers at once with _UNKNOWN_PARTITION (or a leader error) while
    the metadata it holds has no leader for the partition, as during the leader transfer
    back to a restarted preferred replica."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), 30)[1])
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _read_everything(bootstrap: str) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "jepsen-check", "enable.auto.commit": False}
    )
    try:
        ends = {p: _high_watermark(consumer, p) for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        read: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        deadline = time.monotonic() + 120

        def done() -> bool:
            return all((read[p][-1][0] + 1 if read[p] else 0) >= ends[p] for p in range(PARTITIONS))

        while not done():
            assert time.monotonic() < deadline, f"read stalled: ends {ends}"
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            offset, value, partition = msg.offset(), msg.value(), msg.partition()
            assert offset is not None and value is not None and partition is not None
            read[partition].append((offset, value))
        return read
    finally:
        consumer.close()


@dataclass(frozen=True)
class Verdict:
    sent: int
    acked: int
    failed: int
    read: int
    lost: int
    duplicates: int
    misplaced: int  # acked at one offset, stored at another
    reordered: int
    offset_regressions: int
    unacked_present: int  # written but the ack was lost: allowed

    def table(self) -> str:
        rows = [(k, v) for k, v in self.__dict__.items()]
        return "\n".join(f"  {k:<20} {v:>8}" for k, v in rows)


def check(history: History, read: dict[int, list[tuple[int, bytes]]]) -> Verdict:
    stored: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    offset_regressions = 0
    reordered = 0
    for partition, records in read.items():
        last_offset = -1
        last_seq: dict[str, int] = {}
        for offset, value in records:
            if offset <= last_offset:
                offset_regressions += 1
            last_offset = offset
            stored[value].append((partition, offset))
            producer, _, seq_text = value.decode().partition(":")
            seq = int(seq_text)
            if seq <= last_seq.get(producer, -1):
                reordered += 1
            last_seq[producer] = seq
    lost = sum(1 for value in history.acked if value not in stored)
    misplaced = sum(
        1 for value, at in history.acked.items() if value in stored and stored[value][0] != at
    )
    duplicates = sum(len(places) - 1 for places in stored.values())
    unacked = sum(1 for value in stored if value not in history.acked)
    return Verdict(
        sent=sum(history.sent.values()),
        acked=len(history.acked),
        failed=sum(history.failed.values()),
        read=sum(len(r) for r in read.values()),
        lost=lost,
        duplicates=duplicates,
        misplaced=misplaced,
        reordered=reordered,
        offset_regressions=offset_regressions,
        unacked_present=unacked,
    )


def run_checker(cluster: Cluster, chaos_s: float, rate: float, seed: int) -> Verdict:
    cluster.create_topic(TOPIC, PARTITIONS)
    for p in range(PARTITIONS):
        cluster.wait_for_leader(TOPIC, p)
    history = History()
    stop = threading.Event()
    producers = [
        threading.Thread(target=fn, args=(cluster.bootstrap, history, stop, rate), daemon=True)
        for fn in (_confluent_producer, _kafka_python_producer)
    ]
    for thread in producers:
        thread.start()
    rng = random.Random(seed)
    nemesis_log: list[str] = []
    started = time.monotonic()
    try:
        time.sleep(1.0)  # some traffic before the first fault
        _nemesis(cluster, time.monotonic() + chaos_s, rng, nemesis_log)
    finally:
        stop.set()
        for node in cluster.nodes.values():
            if not node.alive():
                node.start()
        for thread in producers:
            thread.join(180)
    assert not any(t.is_alive() for t in producers), "a producer did not finish"
    read = _read_everything(cluster.bootstrap)
    verdict = check(history, read)
    print(
        f"\njepsen idempotence: seed {seed}, {len(nemesis_log)} leader kills in "
        f"{time.monotonic() - started:.1f}s"
    )
    for line in nemesis_log:
        print("  " + line)
    print(verdict.table())
    print(f"  per producer sent {dict(history.sent)}, failed {dict(history.failed)}")
    assert not history.fatal, history.fatal[:3]
    assert verdict.lost == 0
    assert verdict.duplicates == 0
    assert verdict.misplaced == 0
    assert verdict.reordered == 0
    assert verdict.offset_regressions == 0
    assert verdict.acked > 0 and len(nemesis_log) > 0
    return verdict


def test_idempotent_producers_survive_leader_kills(cluster: Cluster) -> None:
    run_checker(cluster, chaos_s=20, rate=150, seed=int(time.time()))


@pytest.mark.slow
def test_idempotent_producers_survive_leader_kills_long(cluster: Cluster) -> None:
    run_checker(cluster, chaos_s=240, rate=300, seed=int(time.time()))
