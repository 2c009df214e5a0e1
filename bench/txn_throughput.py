"""Transactional produce throughput against idempotent produce throughput, in one run.

    .venv/bin/python bench/txn_throughput.py [--seconds S] [--size B] [--partitions P]
                                            [--commit-ms MS] [--rounds N]

One node. Phases alternate, each on a fresh topic: an idempotent confluent-kafka producer
(acks=all, the reference), then a transactional one that commits every `--commit-ms` (100 ms
by default) and starts the next transaction at once; `--rounds` times each, so a noisy shared
machine hits both alike. Each phase produces as fast as the client queue allows for
`--seconds`; the transactional phase counts only the records of committed transactions.
Both phases give every message the same delivery callback, so the client does the same work.
Reported: msgs/s and MB/s of each, their ratio, the commit_transaction() latency (p50, p99,
max: the wait for the transaction's deliveries and EndTxn are inside it), and the read rate
of the last transactional topic with read_committed against read_uncommitted (each twice,
alternated, the best of each).
A benchmark, not a test: it reports, never asserts. Everything it starts is stopped and
removed on exit; results go to bench/results/txn-throughput-<UTC start>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info, save_result
from node_launcher import BenchNode

MB = 1_000_000


@dataclass(slots=True)
class Phase:
    kind: str  # "idempotent" or "transactional"
    topic: str
    messages: int = 0  # delivered (transactional: in committed transactions)
    delivered: int = 0  # delivery reports without an error
    seconds: float = 0.0
    commits: list[float] = field(default_factory=list)  # commit_transaction() seconds
    errors: list[str] = field(default_factory=list)

    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions)])[name].result(30)


def _config(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.kbytes": 64 * 1024,
        "compression.type": "none",
    }


def _produce_one(producer: Producer, topic: str, value: bytes, on_delivery: Any) -> None:
    while True:
        try:
            producer.produce(topic, value, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.005)


def _on_delivery(phase: Phase) -> Any:
    """The same per-message delivery callback in both phases, so the client does the same
    work for each: it counts what was delivered and keeps the first errors."""

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            phase.delivered += 1
        elif len(phase.errors) < 5:
            phase.errors.append(str(err))

    return on_delivery


def idempotent_phase(bootstrap: str, topic: str, seconds: float, value: bytes) -> Phase:
    phase = Phase("idempotent", topic)
    on_delivery = _on_delivery(phase)
    producer = Producer(_config(bootstrap))
    _produce_one(producer, topic, value, None)  # metadata, producer id, connection: untimed
    producer.flush(30)
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(1000):
            _produce_one(producer, topic, value, on_delivery)
        producer.poll(0)
    producer.flush(120)
    phase.seconds = time.perf_counter() - started
    phase.messages = phase.delivered
    return phase


def transactional_phase(
    bootstrap: str, topic: str, seconds: float, value: bytes, commit_s: float
) -> Phase:
    phase = Phase("transactional", topic)
    on_delivery = _on_delivery(phase)
    producer = Producer({**_config(bootstrap), "transactional.id": f"bench-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()  # the first transaction pays for AddPartitionsToTxn setup
    _produce_one(producer, topic, value, None)
    producer.commit_transaction(30)
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        producer.begin_transaction()
        pending = 0
        opened = time.perf_counter()
        while time.perf_counter() - opened < commit_s:
            for _ in range(200):
                _produce_one(producer, topic, value, on_delivery)
            pending += 200
            producer.poll(0)
        before = time.perf_counter()
        try:
            producer.commit_transaction(60)
        except Exception as exc:  # a benchmark reports, it does not stop at the first error
            if len(phase.errors) < 5:
                phase.errors.append(repr(exc))
            producer.abort_transaction(60)
            continue
        phase.commits.append(time.perf_counter() - before)
        phase.messages += pending
    phase.seconds = time.perf_counter() - started
    return phase


def read_rate(bootstrap: str, topic: str, partitions: int, isolation: str, count: int) -> float:
    """msgs/s reading `count` records of `topic` from the beginning with `isolation`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 50 * MB,
            "max.partition.fetch.bytes": 8 * MB,
        }
    )
    consumer.assign([CKTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    started = time.perf_counter()
    deadline = started + 300
    while got < count and time.perf_counter() < deadline:
        got += sum(1 for m in consumer.consume(10000, 0.5) if m.error() is None)
    seconds = time.perf_counter() - started
    consumer.close()
    return got / seconds if seconds else 0.0


def _ms(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--commit-ms", type=float, default=100.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    value = os.urandom(args.size)
    phases: list[Phase] = []
    with tempfile.TemporaryDirectory(prefix="vdl-txn-bench-") as tmp:
        root = Path(tmp)
        machine = machine_info(root)
        with BenchNode(root / "data", root / "node.log") as node:
            for round_ in range(args.rounds):
                for kind in ("idempotent", "transactional"):
                    topic = f"bench-{kind}-{round_}"
                    create_topic(node.bootstrap, topic, args.partitions)
                    if kind == "idempotent":
                        phase = idempotent_phase(node.bootstrap, topic, args.seconds, value)
                    else:
                        phase = transactional_phase(
                            node.bootstrap, topic, args.seconds, value, args.commit_ms / 1000
                        )
                    phases.append(phase)
                    print(f"  {kind:<14} round {round_}: {phase.msgs_per_s():>10,.0f} msgs/s")
            # Each isolation level twice, alternated, the best of each: the first read
            # also warms the page cache for the others.
            last = phases[-1]
            rates: dict[str, float] = {"read_committed": 0.0, "read_uncommitted": 0.0}
            for isolation in [*rates, *rates]:
                rate = read_rate(
                    node.bootstrap, last.topic, args.partitions, isolation, last.messages
                )
                rates[isolation] = max(rates[isolation], rate)
            committed_read = rates["read_committed"]
            uncommitted_read = rates["read_uncommitted"]
    by_kind = {
        kind: statistics.mean(p.msgs_per_s() for p in phases if p.kind == kind)
        for kind in ("idempotent", "transactional")
    }
    commits = [c for p in phases for c in p.commits]
    ratio = by_kind["transactional"] / by_kind["idempotent"] if by_kind["idempotent"] else 0.0
    print(
        f"\ntransactions vs idempotence, one node, {args.partitions} partitions, "
        f"{args.size} B values, {args.seconds:.0f} s x {args.rounds} rounds each, "
        f"commit every {args.commit_ms:.0f} ms"
    )
    print(f"  {'producer':<16}{'msgs/s':>12}{'MB/s':>8}")
    for kind, rate in by_kind.items():
        print(f"  {kind:<16}{rate:>12,.0f}{rate * args.size / MB:>8.1f}")
    print(f"  transactional / idempotent: {ratio:.2f}x")
    print(
        f"  commit_transaction ms: p50 {_ms(commits, 0.5):.1f}, p99 {_ms(commits, 0.99):.1f}, "
        f"max {_ms(commits, 1.0):.1f} over {len(commits)} commits"
    )
    read_ratio = committed_read / uncommitted_read if uncommitted_read else 0.0
    print(
        f"  read of a transactional topic: read_committed {committed_read:,.0f} msgs/s, "
        f"read_uncommitted {uncommitted_read:,.0f} msgs/s ({read_ratio:.2f}x)"
    )
    errors = [e for p in phases for e in p.errors]
    if errors:
        print(f"  errors: {errors[:5]}")
    result = {
        "bench": "txn-throughput",
        "started": started.isoformat(),
        "machine": machine,
        "args": vars(args),
        "msgs_per_s": by_kind,
        "transactional_over_idempotent": ratio,
        "commit_ms": {
            "p50": _ms(commits, 0.5),
            "p99": _ms(commits, 0.99),
            "max": _ms(commits, 1.0),
            "count": len(commits),
        },
        "read_msgs_per_s": {"read_committed": committed_read, "read_uncommitted": uncommitted_read},
        "phases": [{**asdict(p), "commits": len(p.commits)} for p in phases],
    }
    if not args.no_save:
        save_result("txn-throughput", started, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
