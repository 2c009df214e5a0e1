"""Many partitions on 3 nodes (RF 3): what idle partitions cost, and what they do to load.

    .venv/bin/python bench/partitions.py [--idle 100,1000] [--partitions 1000] [--rate R]
        [--window-s S] [--quick]

Every configuration runs on fresh `python -m vdl.node` processes on loopback, with the
settings a user gets by default:
- reference: only the 10 hot partitions exist. CPU and RSS while idle, then a paced
  acks=all producer on them (confluent-kafka: ack p50/p99);
- idle, for each size in --idle: N partitions (topics of --per-topic partitions) created
  and left without clients. After --settle-s, the CPU each node spends over --window-s
  (% of one core, utime+stime from /proc) and its RSS; memory per partition is the RSS
  above the reference's divided by the extra partitions. Also the time from the create
  call until metadata shows a leader for every partition;
- at --partitions (1,000, of which the 10 hot ones): the idle figures, the same paced
  producer on the hot partitions, then kill -9 of the node leading the most partitions
  and the time until every partition has a live leader again, as the surviving nodes
  report it (Metadata polled through a client bootstrapped on each).

Targets, at 1,000 partitions: <= 5% of a core per idle node; ack p99 within 1.2x of the
10-partition reference; all partitions led again within 5 s of the leader kill. A
benchmark reports, never asserts. Everything started is stopped and removed on exit.
`--quick` is a smoke check (20 idle, 100 partitions, short windows; nothing is saved).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from cluster import Cluster, start_cluster
from cluster_phases import LatencyRun, create_topics, paced_produce
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from machine import machine_info, save_result
from node_launcher import BenchNode

HOT_TOPIC = "hot"
IDLE_TOPIC_PREFIX = "idle-"
IDLE_CPU_TARGET_PCT = 5.0
P99_RATIO_TARGET = 1.2
FAILOVER_TARGET_S = 5.0
POLL_S = 0.05

Partition = tuple[str, int]
T = TypeVar("T")


def topic_layout(total: int, hot: int, per_topic: int) -> dict[str, int]:
    """`hot` partitions in the hot topic (none if 0), the rest in topics of `per_topic`."""
    topics = {HOT_TOPIC: hot} if hot else {}
    rest, index = total - hot, 0
    while rest > 0:
        count = min(per_topic, rest)
        topics[f"{IDLE_TOPIC_PREFIX}{index:04d}"] = count
        rest -= count
        index += 1
    return topics


def rss_mib(node: BenchNode) -> float:
    """Resident set size of the node (Linux /proc)."""
    for line in Path(f"/proc/{node.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {node.pid}")


@dataclass(slots=True)
class IdleFigures:
    partitions: int
    cpu_pct: list[float]  # per node, in node id order: % of one core
    rss_mib: list[float]  # per node, in node id order


def measure_idle(
    cluster: Cluster, partitions: int, settle_s: float, window_s: float
) -> IdleFigures:
    time.sleep(settle_s)
    nodes = list(cluster.nodes.values())
    before = [node.cpu_seconds() for node in nodes]
    started = time.monotonic()
    time.sleep(window_s)
    after = [node.cpu_seconds() for node in nodes]
    elapsed = time.monotonic() - started
    cpu = []
    for b, a in zip(before, after, strict=True):
        if a is None or b is None:
            raise RuntimeError("node CPU time needs Linux /proc")
        cpu.append(100 * (a - b) / elapsed)
    return IdleFigures(partitions, cpu, [rss_mib(node) for node in nodes])


def above_reference(
    idle: IdleFigures, reference: dict[str, Any], extra: int
) -> dict[str, list[float] | None]:
    """What each node spends above the reference (hot partitions only), per extra
    partition: CPU in % of a core and RSS in KiB (None when there are no extra ones)."""
    if extra <= 0:
        return {"cpu_pct_per_partition": None, "rss_kib_per_partition": None}
    return {
        "cpu_pct_per_partition": [
            (c - b) / extra for c, b in zip(idle.cpu_pct, reference["cpu_pct"], strict=True)
        ],
        "rss_kib_per_partition": [
            1024 * (r - b) / extra for r, b in zip(idle.rss_mib, reference["rss_mib"], strict=True)
        ],
    }


def node_admins(cluster: Cluster, node_ids: list[int]) -> list[AdminClient]:
    """One client per node, bootstrapped on that node (librdkafka may then ask any node it
    has met). Errors are not logged: the disconnects of a killed node are expected."""
    return [
        AdminClient(
            {
                "bootstrap.servers": cluster.nodes[i].bootstrap,
                "socket.timeout.ms": 10_000,
                "log_level": 2,
            }
        )
        for i in node_ids
    ]


def wait_for_controller(bootstrap: str, timeout: float) -> None:
    """Until the metadata group has a leader, so a create is not timed through its election."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if (
                AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).controller_id
                > 0
            ):
                return
        except KafkaException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no controller within {timeout}s")


def unled(admins: list[AdminClient], topics: dict[str, int], live: set[int]) -> set[Partition]:
    """Partitions that some node does not report as led by a node in `live`."""
    missing: set[Partition] = set()
    for admin in admins:
        md = admin.list_topics(timeout=10)
        for topic, count in topics.items():
            parts = md.topics[topic].partitions if topic in md.topics else {}
            for p in range(count):
                part = parts.get(p)
                if part is None or part.leader not in live:
                    missing.add((topic, p))
    return missing


def wait_all_led(
    admins: list[AdminClient],
    topics: dict[str, int],
    live: set[int],
    since: float,
    timeout: float,
) -> tuple[dict[Partition, float], int]:
    """Poll until every node reports a live leader for every partition: for each partition
    the seconds from `since` to the first poll that saw it led, and how many never were
    within `timeout`."""
    pending = {(t, p) for t, n in topics.items() for p in range(n)}
    led_at: dict[Partition, float] = {}
    while pending:
        try:
            missing = unled(admins, topics, live)
        except KafkaException:  # a node too busy to answer in time: ask again
            missing = set(pending)
        now = time.monotonic()
        for key in pending - missing:
            led_at[key] = now - since
        pending &= missing
        if pending:
            if now - since > timeout:
                break
            time.sleep(POLL_S)
    return led_at, len(pending)


@dataclass(slots=True)
class Creation:
    partitions: int
    topics: int
    call_s: float  # the create call until every topic's future answered
    all_led_s: float | None  # the create call until every partition had a leader
    never_led: int


def create_and_time(cluster: Cluster, topics: dict[str, int], timeout: float) -> Creation:
    wait_for_controller(cluster.bootstrap, timeout)
    admins = node_admins(cluster, list(cluster.nodes))
    started = time.monotonic()
    create_topics(cluster.bootstrap, topics)
    call_s = time.monotonic() - started
    led_at, never = wait_all_led(admins, topics, set(cluster.nodes), started, timeout)
    return Creation(
        sum(topics.values()),
        len(topics),
        call_s,
        max(led_at.values()) if not never and led_at else None,
        never,
    )


@dataclass(slots=True)
class Failover:
    victim: int
    victim_leaders: int
    partitions: int
    all_led_s: float | None  # kill -9 until every partition has a live leader on every node
    moved_p50_s: float | None  # of the victim's partitions: the median time to a new leader
    never_led: int


def failover(cluster: Cluster, topics: dict[str, int], timeout: float) -> Failover:
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    leaders = {
        (t, p): int(part.leader) for t in topics for p, part in md.topics[t].partitions.items()
    }
    victim, victim_leaders = Counter(leaders.values()).most_common(1)[0]
    survivors = [i for i in cluster.nodes if i != victim]
    admins = node_admins(cluster, survivors)
    for admin in admins:
        admin.list_topics(timeout=10)  # connected before the kill
    cluster.nodes[victim].kill()
    killed = time.monotonic()
    led_at, never = wait_all_led(admins, topics, set(survivors), killed, timeout)
    moved = [s for key, s in led_at.items() if leaders.get(key) == victim]
    return Failover(
        victim,
        victim_leaders,
        sum(topics.values()),
        max(led_at.values()) if not never and led_at else None,
        statistics.median(moved) if moved else None,
        never,
    )


def run_cluster(
    workdir: Path, name: str, args: argparse.Namespace, body: Callable[[Cluster], T]
) -> tuple[T, list[int | None]]:
    """Fresh nodes in their own directory; `body(cluster)`; stop and remove them."""
    directory = workdir / name
    directory.mkdir()
    cluster: Cluster | None = None
    try:
        cluster = start_cluster(directory, args.raft_tick_ms)
        outcome = body(cluster)
        exits = cluster.stop()
        cluster = None
        return outcome, exits
    finally:
        if cluster is not None:
            cluster.stop_after_failure()
        shutil.rmtree(directory, ignore_errors=True)


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return sizes


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--idle",
        type=parse_sizes,
        default=None,
        help="idle partition counts, comma-separated (default 100,1000; add 10000 if "
        "memory allows)",
    )
    parser.add_argument(
        "--partitions", type=int, default=None, help="partitions for load and failover (1000)"
    )
    parser.add_argument("--hot", type=int, default=10, help="partitions that get the load")
    parser.add_argument("--per-topic", type=int, default=100, help="partitions per topic")
    parser.add_argument("--rate", type=float, default=None, help="msgs/s on the hot ones (500)")
    parser.add_argument("--size", type=int, default=1024, help="value bytes per message")
    parser.add_argument("--produce-s", type=float, default=None, help="paced produce (10)")
    parser.add_argument("--settle-s", type=float, default=None, help="after creating (10)")
    parser.add_argument("--window-s", type=float, default=None, help="CPU window (10)")
    parser.add_argument(
        "--timeout-s", type=float, default=300.0, help="for leaders to appear, per wait"
    )
    parser.add_argument(
        "--raft-tick-ms", type=int, default=None, help="node flag; default: the node's own"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke check: 20 idle, 100 partitions, 3 s windows; nothing is saved",
    )
    parser.add_argument("--dir", type=Path, default=None, help="parent of the work directory")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults: dict[str, Any] = {
        "idle": [20] if quick else [100, 1000],
        "partitions": 100 if quick else 1000,
        "rate": 200.0 if quick else 500.0,
        "produce_s": 4.0 if quick else 10.0,
        "settle_s": 3.0 if quick else 10.0,
        "window_s": 3.0 if quick else 10.0,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not 1 <= args.hot <= args.partitions:
        parser.error("--hot must be between 1 and --partitions")
    return args


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def _per_node(values: list[float], unit: str, digits: int = 1) -> str:
    return " / ".join(f"{v:.{digits}f}" for v in values) + f" {unit}"


def _seconds(value: float | None, never: int) -> str:
    return f"{value:.2f} s" if value is not None else f"{never} never led"


def render(result: dict[str, Any]) -> str:
    ref = result["reference"]
    load, fail = result["load"], result["failover"]
    target_size = result["parameters"]["partitions"]
    rows: list[tuple[str, str, str, str]] = [
        ("figure", "value", "detail", "target"),
        (
            f"idle CPU, {ref['idle']['partitions']} partitions (reference)",
            _per_node(ref["idle"]["cpu_pct"], "%"),
            "RSS " + _per_node(ref["idle"]["rss_mib"], "MiB"),
            "",
        ),
    ]
    for entry in result["idle"]:
        idle, creation = entry["idle"], entry["creation"]
        n = idle["partitions"]
        worst = max(idle["cpu_pct"])
        cpu_each, rss_each = entry["cpu_pct_per_partition"], entry["rss_kib_per_partition"]
        target = f" (target <= {IDLE_CPU_TARGET_PCT:.0f}% per node)" if n == target_size else ""
        rows.append(
            (
                f"idle CPU, {n} partitions",
                _per_node(idle["cpu_pct"], "%"),
                "per extra partition "
                + (_per_node(cpu_each, "%", 3) if cpu_each else "n/a")
                + target,
                _verdict(worst <= IDLE_CPU_TARGET_PCT) if target else "",
            )
        )
        rows.append(
            (
                f"  RSS, {n} partitions",
                _per_node(idle["rss_mib"], "MiB"),
                "per extra partition " + (_per_node(rss_each, "KiB") if rss_each else "n/a"),
                "",
            )
        )
        rows.append(
            (
                f"  create {n} partitions -> all led",
                _seconds(creation["all_led_s"], creation["never_led"]),
                f"{creation['topics']} topics; create call {creation['call_s']:.2f} s",
                "",
            )
        )
    hot, base = load["produce"], ref["produce"]
    rows.append(
        (
            f"ack p50 / p99, {result['parameters']['hot']} partitions only",
            f"{base['p50_ms']:.1f} / {base['p99_ms']:.1f} ms",
            f"{base['msgs_per_s']:.0f} msg/s, errors {base['errors']}",
            "",
        )
    )
    ratio = load["p99_ratio"]
    rows.append(
        (
            f"ack p50 / p99, {result['parameters']['hot']} of {load['partitions']}",
            f"{hot['p50_ms']:.1f} / {hot['p99_ms']:.1f} ms",
            f"{hot['msgs_per_s']:.0f} msg/s, errors {hot['errors']}; p99 ratio "
            + (f"{ratio:.2f}x" if ratio is not None else "n/a")
            + f" (target <= {P99_RATIO_TARGET}x)",
            _verdict(ratio is not None and ratio <= P99_RATIO_TARGET),
        )
    )
    moved = fail["moved_p50_s"]
    rows.append(
        (
            f"failover: kill -9 node {fail['victim']} -> all {fail['partitions']} led",
            _seconds(fail["all_led_s"], fail["never_led"]),
            f"it led {fail['victim_leaders']}; their median "
            + (f"{moved:.2f} s" if moved is not None else "n/a")
            + f" (target <= {FAILOVER_TARGET_S:.0f} s)",
            _verdict(fail["all_led_s"] is not None and fail["all_led_s"] <= FAILOVER_TARGET_S),
        )
    )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="vdl-partitions-bench-", dir=args.dir))
    started = dt.datetime.now(dt.UTC)
    machine = machine_info(workdir)
    exits: dict[str, list[int | None]] = {}

    def produce(cluster: Cluster) -> LatencyRun:
        return paced_produce(
            cluster.bootstrap, HOT_TOPIC, args.size, rate=args.rate, seconds=args.produce_s
        )

    try:
        hot_only = {HOT_TOPIC: args.hot}

        def reference_body(cluster: Cluster) -> dict[str, Any]:
            creation = create_and_time(cluster, hot_only, args.timeout_s)
            idle = measure_idle(cluster, args.hot, args.settle_s, args.window_s)
            print(f"reference: {args.hot} partitions, paced produce...", file=sys.stderr)
            run = produce(cluster)
            return {"creation": asdict(creation), "idle": asdict(idle), "produce": run.as_dict()}

        print(f"reference: {args.hot} partitions...", file=sys.stderr)
        reference, exits["reference"] = run_cluster(workdir, "reference", args, reference_body)

        idle_results: list[dict[str, Any]] = []
        load: dict[str, Any] = {}
        fail: Failover | None = None
        for n in sorted(set(args.idle) | {args.partitions}):
            with_load = n == args.partitions
            topics = topic_layout(n, args.hot if with_load else 0, args.per_topic)

            def body(
                cluster: Cluster, n: int = n, topics: dict[str, int] = topics
            ) -> tuple[Creation, IdleFigures, LatencyRun | None, Failover | None]:
                print(f"{n} partitions: creating...", file=sys.stderr)
                creation = create_and_time(cluster, topics, args.timeout_s)
                print(f"{n} partitions: idle...", file=sys.stderr)
                idle = measure_idle(cluster, n, args.settle_s, args.window_s)
                if n != args.partitions:
                    return creation, idle, None, None
                print(f"{n} partitions: paced produce on {args.hot}...", file=sys.stderr)
                run = produce(cluster)
                print(f"{n} partitions: failover...", file=sys.stderr)
                return creation, idle, run, failover(cluster, topics, args.timeout_s)

            (creation, idle, run, fail_n), exits[f"p{n}"] = run_cluster(
                workdir, f"p{n}", args, body
            )
            if run is not None:
                load = {"partitions": n, "produce": run.as_dict()}
                fail = fail_n
            idle_results.append(
                {
                    "creation": asdict(creation),
                    "idle": asdict(idle),
                    **above_reference(idle, reference["idle"], n - args.hot),
                }
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    base_p99 = reference["produce"]["p99_ms"]
    load["p99_ratio"] = load["produce"]["p99_ms"] / base_p99 if base_p99 > 0 else None
    result: dict[str, Any] = {
        "bench": "partitions",
        "started_utc": started.isoformat(timespec="seconds"),
        "parameters": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": machine,
        "load_average_end": os.getloadavg(),
        "node_exit_codes": exits,
        "reference": reference,
        "idle": idle_results,
        "load": load,
        "failover": asdict(fail) if fail is not None else None,
        "targets": {
            "idle_cpu_pct_per_node": IDLE_CPU_TARGET_PCT,
            "p99_ratio": P99_RATIO_TARGET,
            "failover_s": FAILOVER_TARGET_S,
        },
    }
    print(render(result))
    if args.quick or args.no_save:
        print("not saved (--quick or --no-save)")
    else:
        save_result("partitions", started, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
