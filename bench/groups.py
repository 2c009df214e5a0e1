"""Consumer-group throughput and rebalance times on one node, with confluent-kafka.

    .venv/bin/python bench/groups.py [--messages N] [--size B] [--partitions P]

Phases: produce the topic once; read it all with one consumer, then with a three-member
group (the reference is the single consumer measured in the same run); then rebalance
times of a group of members that poll continuously:
- join: a third member subscribes -> every member has its new assignment;
- leave: a member closes (LeaveGroup) -> the others have theirs;
- crash: a member process is killed (no LeaveGroup) -> the others have theirs, counted
  from when its session timeout ran out (kill + session.timeout.ms).
Target: a rebalance completes within 1 s of what triggers it. A benchmark, not a test: it
reports, never asserts. Everything it starts is stopped and removed on exit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import save_result
from node_launcher import REPO_ROOT, BenchNode

TOPIC = "groups-bench"
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_MS = 500
REBALANCE_TARGET_S = 1.0


def _consumer_config(bootstrap: str, group: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_MS,
    }


def produce(bootstrap: str, partitions: int, messages: int, size: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=partitions)])[TOPIC].result(30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 10, "batch.size": 1 << 20}
    )
    payload = b"x" * size
    started = time.monotonic()
    for i in range(messages):
        while True:
            try:
                producer.produce(TOPIC, value=payload, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return time.monotonic() - started


@dataclass
class Member:
    """One consumer polling in its own thread, counting messages and assignments."""

    bootstrap: str
    group: str
    consumed: int = 0
    assigned_at: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> Member:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        consumer = Consumer(_consumer_config(self.bootstrap, self.group))

        def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
            self.assigned_at.append(time.monotonic())

        consumer.subscribe([TOPIC], on_assign=on_assign)
        try:
            while not self.stop.is_set():
                for msg in consumer.consume(500, 0.1):
                    if msg.error() is None:
                        self.consumed += 1
        finally:
            consumer.close()  # LeaveGroup

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)


def read_all(bootstrap: str, group: str, members: int, messages: int) -> dict[str, float]:
    crowd = [Member(bootstrap, group).start() for _ in range(members)]
    started = time.monotonic()
    first = None
    try:
        while sum(m.consumed for m in crowd) < messages:
            if first is None and any(m.consumed for m in crowd):
                first = time.monotonic() - started
            if time.monotonic() - started > 300:
                break
            time.sleep(0.01)
        seconds = time.monotonic() - started
    finally:
        for m in crowd:
            m.close()
    total = sum(m.consumed for m in crowd)
    # Throughput from the first message on: the group's formation is measured separately.
    steady = seconds - (first or 0.0)
    return {
        "members": members,
        "messages": total,
        "seconds": seconds,
        "first_message_s": first or 0.0,
        "msgs_per_s": total / steady if steady > 0 else 0.0,
    }


def _wait_assigned(members: list[Member], after: float, timeout: float = 60) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        times = [next((t for t in m.assigned_at if t > after), None) for m in members]
        if all(t is not None for t in times):
            return max(t for t in times if t is not None) - after
        time.sleep(0.005)
    return None


_CRASH_MEMBER = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({config!r})
c.subscribe([{topic!r}], on_assign=lambda c, p: print("assigned", flush=True))
while True:
    c.poll(0.1)
"""


def rebalances(bootstrap: str) -> dict[str, float | None]:
    group = "rebalance-bench"
    a, b = Member(bootstrap, group).start(), Member(bootstrap, group).start()
    try:
        _wait_assigned([a, b], 0.0)
        time.sleep(1.0)  # stable
        t0 = time.monotonic()
        c = Member(bootstrap, group).start()
        join = _wait_assigned([a, b, c], t0)
        time.sleep(1.0)
        t0 = time.monotonic()
        c.close()
        leave = _wait_assigned([a, b], t0)
        time.sleep(1.0)
        script = _CRASH_MEMBER.format(config=_consumer_config(bootstrap, group), topic=TOPIC)
        crash_member = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=REPO_ROOT
        )
        try:
            assert crash_member.stdout is not None
            crash_member.stdout.readline()  # it has its assignment
            time.sleep(2.0)  # the group is stable with it
            t_kill = time.monotonic()
            crash_member.kill()
            crash_member.wait(30)
        finally:
            if crash_member.poll() is None:
                crash_member.kill()
        after_kill = _wait_assigned([a, b], t_kill, timeout=SESSION_TIMEOUT_MS / 1000 + 30)
        crash = None if after_kill is None else after_kill - SESSION_TIMEOUT_MS / 1000
        return {"join_s": join, "leave_s": leave, "crash_after_session_timeout_s": crash}
    finally:
        a.close()
        b.close()


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    with tempfile.TemporaryDirectory(prefix="vdl-groups-bench-") as tmp:
        root = Path(tmp)
        # Kafka's default initial rebalance delay (3 s) lets the three members of a new
        # group join one generation, so the throughput run has no rebalance inside it;
        # join/leave/crash happen in a stable group, where the delay does not apply.
        with BenchNode(root / "data", root / "node.log") as node:
            produce_s = produce(node.bootstrap, args.partitions, args.messages, args.size)
            single = read_all(node.bootstrap, "solo", 1, args.messages)
            group = read_all(node.bootstrap, "trio", 3, args.messages)
            times = rebalances(node.bootstrap)
    ratio = group["msgs_per_s"] / single["msgs_per_s"] if single["msgs_per_s"] else 0.0
    print(f"\nconsumer groups, {args.messages} x {args.size} B in {args.partitions} partitions")
    print(f"  produced in {produce_s:.1f}s")
    print(f"  {'reader':<22}{'msgs/s':>12}{'MB/s':>8}{'first msg s':>13}{'total s':>9}")
    for name, r in (("1 consumer", single), ("group of 3 members", group)):
        mb = r["msgs_per_s"] * args.size / 1e6
        print(
            f"  {name:<22}{r['msgs_per_s']:>12,.0f}{mb:>8.1f}"
            f"{r['first_message_s']:>13.2f}{r['seconds']:>9.2f}"
        )
    print(f"  group / single: {ratio:.2f}x")
    print(f"  {'rebalance':<34}{'seconds':>8}  target <= {REBALANCE_TARGET_S:.0f} s")
    for key, label in (
        ("join_s", "join (3rd member subscribes)"),
        ("leave_s", "leave (member closes)"),
        ("crash_after_session_timeout_s", "crash (after session timeout)"),
    ):
        value = times[key]
        met = value is not None and value <= REBALANCE_TARGET_S
        print(f"  {label:<34}{_fmt(value):>8}  {'met' if met else 'MISSED'}")
    result = {
        "bench": "groups",
        "started": started.isoformat(),
        "messages": args.messages,
        "size": args.size,
        "partitions": args.partitions,
        "produce_s": produce_s,
        "single": single,
        "group": group,
        "group_over_single": ratio,
        "rebalance": times,
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "heartbeat_interval_ms": HEARTBEAT_MS,
        "rebalance_target_s": REBALANCE_TARGET_S,
    }
    if not args.no_save:
        save_result("groups", started, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
