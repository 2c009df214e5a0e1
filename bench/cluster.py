"""A 3-node cluster (RF 3, acks=all) against this disk's raw ceiling and PySyncObj, in one run.

    .venv/bin/python bench/cluster.py [--messages N] [--size B] [--partitions P]
        [--no-restart] [--restart-gib G] [--restart-small-mib M]
    .venv/bin/python bench/cluster.py --sequential-only [--sequential-rounds R]

Phases, in order: raw disk ceiling; three `python -m vdl.node` on loopback sharing this
disk; full-load produce (confluent-kafka, acks=all, idempotent: MB/s and ack latency
p50/p99/p999); full load of ready-made batches (acks=all Produce requests each carrying one
prebuilt batch of a producer's 1 MB, 4 in flight per partition leader: what the nodes take
when the client does no work per message, which a client library on the same 2 cores
does not leave them); half load (a paced producer at half the full-load rate: latency); one message
in flight (acks/s); failover (kill -9 of a partition leader under a one-in-flight producer:
time to the next successful ack); the disk at the half load (below), once the cluster has
stopped; the Raft core alone vs PySyncObj on the same payload; restart of a node with a
large log (below); raw ceiling again (the better of the two is the reference).

The disk at the half load is the half-load phase's reference: what this disk itself answers
at the node's own load. Three writer processes (one per replica: the three nodes share the
disk), each in a node's data directory, append chunks of the bytes a node made durable per
fdatasync in the half-load phase (the median over the nodes of their `storage_sync_bytes`
p50, from the stage snapshots; 64 KiB, said so, without them) and fdatasync after each,
paced at the half-load MB/s each, for the half-load duration: fdatasync p50/p99/p999.

The restart phase starts one single-node VDL (no peers), fills one topic's one-partition
log with `--restart-gib` GiB (acks=all, 1 MB batches: the fill rate is reported too), then
restarts it on the same data dir after SIGTERM and again after kill -9 (the recovery path),
timing each from just before the spawn until a produce (acks=all) is acknowledged and the
partition's high watermark is the previous end + 1; then the same with a log of
`--restart-small-mib` MiB of one-record 1 KiB batches (each its own log entry: the most
index records and recovery work per byte). `--no-restart` skips both.

The three replicas write to the same disk, so the fair ceiling for the cluster is a third
of the raw one. PySyncObj is not a VDL dependency: `pip install pysyncobj` into the venv
(the phase is skipped, and says so, without it). Targets: >= 60% of ceiling/3; half-load
ack p99 <= 2x the disk's fdatasync p99 at that load; one in flight >= 2,500 acks/s;
failover <= 1.5 s; core >= 5x PySyncObj; restart to serving <= 2 s, after SIGTERM and after
kill -9. A benchmark reports, never asserts. Everything started is stopped and removed on
exit.

Where the floor is: around each load phase the bench takes the CPU time of every node and
of itself (the producer with librdkafka's threads), and prints what one MB and one ack cost
each process. From them, two bounds this machine sets whatever the code's hand-offs: the
rate the cores allow if nodes and client spent nothing but that CPU (cores / CPU per MB, or
per ack), and for one message in flight the serial path (leader CPU + one follower's CPU
per ack, + the disk's own 4 KiB append+fdatasync p50), an estimate that counts all of a
node's CPU per ack as on the path.

`--sequential-only` starts the cluster and runs just the one-in-flight phase, R times on the
same cluster, printing each run with the CPU the nodes spent per ack (nothing is saved):
a quick way to compare commit latency across changes on a noisy machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cluster_phases import (
    LatencyRun,
    batched_produce,
    create_topics,
    failover_once,
    median_stage,
    paced_produce,
    pysyncobj_commits,
    restart_to_serving,
)
from confluent_kafka.admin import AdminClient
from disk_ceiling import MB, MIB, bulk_append, paced_sync_writers, small_append_sync
from machine import machine_info, save_result
from node_launcher import BenchNode, free_port
from produce import SEQUENTIAL_TOPIC, run_sequential
from raft_core import run_core
from stage_report import NodeStages
from stage_report import as_json as stages_json
from stage_report import phase as stage_phase
from stage_report import render as render_stages
from stage_report import snapshot as stage_snapshot

TOPIC = "bench"
FAILOVER_TOPIC = "bench-failover"
THROUGHPUT_TARGET = 0.60  # of the raw ceiling / 3
HALF_LOAD_DISK_RATIO = 2.0  # half-load ack p99 / the disk's fdatasync p99 at that load
FALLBACK_SYNC_BYTES = 64 * 1024  # without stage snapshots
SEQUENTIAL_TARGET = 2500.0
FAILOVER_TARGET_S = 1.5
CORE_TARGET_RATIO = 5.0
RESTART_TARGET_S = 2.0
GIB = 1024 * MIB

Row = tuple[str, str, str, str]


@dataclass(slots=True)
class Cluster:
    nodes: dict[int, BenchNode]

    def stop_after_failure(self) -> None:
        """Stop a cluster a phase left behind: the log tail of each node still running
        goes to stderr first (what it was doing), then everything stops."""
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is None:
                print(f"node log tail:\n{node.log_tail(15)}", file=sys.stderr)
        self.stop()

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    def cpu_seconds(self) -> float | None:
        values = [n.cpu_seconds() for n in self.nodes.values()]
        return None if any(v is None for v in values) else sum(v or 0.0 for v in values)

    def stop(self) -> list[int | None]:
        return [node.stop() for node in self.nodes.values()]


def start_cluster(workdir: Path, tick_ms: int | None, *node_args: str) -> Cluster:
    """Three nodes on loopback; `tick_ms` None leaves the node's own default tick;
    `node_args` go to every node."""
    raft = {i: free_port() for i in (1, 2, 3)}
    peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in raft.items())
    tick = [] if tick_ms is None else ["--raft-tick-ms", str(tick_ms)]
    nodes = {
        i: BenchNode(
            workdir / f"node{i}",
            workdir / f"node{i}.log",
            "--node-id",
            str(i),
            "--peers",
            peers,
            *tick,
            "--log-level",
            "WARNING",
            *node_args,
        )
        for i in raft
    }
    cluster = Cluster(nodes)
    try:
        for node in nodes.values():
            node.start()
    except BaseException:
        cluster.stop()  # the nodes that did start: the caller never gets the cluster
        raise
    return cluster


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=400_000, help="full-load messages")
    parser.add_argument("--size", type=int, default=1024, help="value bytes per message")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--half-seconds", type=float, default=8.0)
    parser.add_argument(
        "--batched-seconds", type=float, default=5.0, help="full load of ready-made batches"
    )
    parser.add_argument("--sequential-seconds", type=float, default=4.0)
    parser.add_argument("--failovers", type=int, default=2)
    parser.add_argument("--core-seconds", type=float, default=3.0)
    parser.add_argument("--pysyncobj-window", type=int, default=20_000)
    parser.add_argument("--raft-tick-ms", type=int, default=50)
    parser.add_argument("--raw-mib", type=int, default=256)
    parser.add_argument(
        "--no-restart", action="store_true", help="skip the restart of a node with a large log"
    )
    parser.add_argument(
        "--restart-gib", type=float, default=1.0, help="log size of the restart phase (GiB)"
    )
    parser.add_argument(
        "--restart-small-mib",
        type=float,
        default=128.0,
        help="log size of the restart of a log of one-record 1 KiB batches (MiB; 0: skip)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="parent of the work directory")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument(
        "--sequential-only",
        action="store_true",
        help="start the cluster and run only the one-in-flight phase (nothing is saved)",
    )
    parser.add_argument(
        "--sequential-rounds",
        type=int,
        default=1,
        help="with --sequential-only: how many one-in-flight runs on the same cluster",
    )
    return parser.parse_args(argv)


def restart_phase(
    args: argparse.Namespace, workdir: Path, *, one_record_batches: bool = False
) -> dict[str, Any]:
    """The restart of a node with a `--restart-gib` log (or `--restart-small-mib` of
    one-record batches); a failure is reported, with the node's log tail on stderr, and
    the other phases' results are kept."""
    if args.no_restart:
        return {"skipped": "--no-restart"}
    size = int(args.restart_small_mib * MIB) if one_record_batches else int(args.restart_gib * GIB)
    if size <= 0:
        return {"skipped": "--restart-small-mib 0"}
    what = "one-record batches" if one_record_batches else "batches of up to 1 MB"
    print(f"restart of a node with {size / MIB:g} MiB of {what}...", file=sys.stderr)
    try:
        return restart_to_serving(workdir, size, one_record_batches=one_record_batches).as_dict()
    except Exception as exc:
        log = workdir / "restart-node.log"
        if log.exists():
            tail = log.read_text(errors="replace").splitlines()[-20:]
            print("restart node log tail:\n" + "\n".join(tail), file=sys.stderr)
        return {"error": f"{type(exc).__name__}: {exc}"}


def sequential_only(args: argparse.Namespace) -> int:
    """Just the one-in-flight phase, repeated, for quick comparisons of commit latency."""
    workdir = Path(tempfile.mkdtemp(prefix="vdl-cluster-bench-", dir=args.dir))
    cluster: Cluster | None = None
    try:
        cluster = start_cluster(workdir, args.raft_tick_ms)
        topics = {SEQUENTIAL_TOPIC: 1}
        create_topics(cluster.bootstrap, topics)
        _leaders_ready(cluster.bootstrap, topics)
        for round_ in range(args.sequential_rounds):
            before = [n.cpu_seconds() or 0.0 for n in cluster.nodes.values()]
            stages_before = stage_snapshot(cluster.nodes)
            seq = run_sequential(cluster.bootstrap, args.size, args.sequential_seconds)
            after = [n.cpu_seconds() or 0.0 for n in cluster.nodes.values()]
            stages = stage_phase(stage_snapshot(cluster.nodes), stages_before)
            # Node CPU per ack (in node id order) shows whether the path is bound by CPU.
            cpu_us = [1e6 * (a - b) / max(seq.acks, 1) for a, b in zip(after, before, strict=True)]
            print(
                f"one in flight #{round_ + 1}: {seq.per_s:.0f} /s, "
                f"p50 {seq.p50_ms:.2f} / p99 {seq.p99_ms:.2f} ms; node CPU per ack "
                + " / ".join(f"{c:.0f}" for c in cpu_us)
                + " us"
                + (f", errors {seq.errors}" if seq.errors else ""),
                flush=True,
            )
            print(render_stages(stages, f"one in flight #{round_ + 1}"), flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


@dataclass(frozen=True, slots=True)
class CpuMark:
    """CPU seconds so far of each node (by id) and of this process (the client), and the
    part of the nodes' that was system time."""

    nodes: dict[int, float]
    nodes_system: dict[int, float]
    client: float

    @classmethod
    def take(cls, cluster: Cluster) -> CpuMark:
        times = {i: n.cpu_times() or (0.0, 0.0) for i, n in cluster.nodes.items()}
        return cls(
            {i: user + system for i, (user, system) in times.items()},
            {i: system for i, (_, system) in times.items()},
            time.process_time(),
        )

    def spent_since(self, before: CpuMark) -> dict[str, Any]:
        return {
            "nodes": {i: self.nodes[i] - before.nodes.get(i, 0.0) for i in self.nodes},
            "nodes_system": {
                i: self.nodes_system[i] - before.nodes_system.get(i, 0.0) for i in self.nodes_system
            },
            "client": self.client - before.client,
        }


def partition_leader(bootstrap: str, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return int(md.topics[topic].partitions[0].leader)


def _per_mb(spent: dict[str, Any], run: LatencyRun) -> tuple[dict[int, float], float]:
    mb = max(run.mb_per_s * run.seconds, 1e-9)
    return {i: 1000 * s / mb for i, s in spent["nodes"].items()}, 1000 * spent["client"] / mb


def floor(
    cpu: dict[str, dict[str, Any]],
    full: LatencyRun,
    batched: LatencyRun,
    seq_acks: int,
    leader: int,
    disk_p50_ms: float,
) -> dict[str, Any]:
    """What the CPU the processes spent per MB and per ack allows on this machine."""
    cores = os.cpu_count() or 1
    spent = cpu["full load"]
    node_ms, client_ms = _per_mb(spent, full)
    per_mb = sum(node_ms.values()) + client_ms
    batched_node_ms, batched_client_ms = _per_mb(cpu["full load, batches"], batched)
    batched_per_mb = sum(batched_node_ms.values()) + batched_client_ms
    seq = cpu["one in flight"]
    acks = max(seq_acks, 1)
    node_us = {i: 1e6 * s / acks for i, s in seq["nodes"].items()}
    client_us = 1e6 * seq["client"] / acks
    follower_us = min(us for i, us in node_us.items() if i != leader)
    serial_us = node_us[leader] + follower_us + 1000 * disk_p50_ms
    return {
        "cores": cores,
        "full_load_ms_per_mb": {"nodes": node_ms, "client": client_ms},
        "full_load_busiest_node_core_pct": 100 * max(spent["nodes"].values()) / full.seconds,
        "full_load_cpu_bound_mb_per_s": 1000 * cores / per_mb,
        "batches_ms_per_mb": {"nodes": batched_node_ms, "client": batched_client_ms},
        "batches_nodes_system_share": sum(cpu["full load, batches"]["nodes_system"].values())
        / max(sum(cpu["full load, batches"]["nodes"].values()), 1e-9),
        "one_in_flight_nodes_system_share": sum(seq["nodes_system"].values())
        / max(sum(seq["nodes"].values()), 1e-9),
        "batches_busiest_node_core_pct": 100
        * max(cpu["full load, batches"]["nodes"].values())
        / batched.seconds,
        "batches_cpu_bound_mb_per_s": 1000 * cores / batched_per_mb,
        "one_in_flight_leader": leader,
        "one_in_flight_us_per_ack": {"nodes": node_us, "client": client_us},
        "one_in_flight_cpu_bound_per_s": 1e6 * cores / (sum(node_us.values()) + client_us),
        "one_in_flight_serial_path_us": serial_us,
        "one_in_flight_serial_path_per_s": 1e6 / serial_us,
    }


def _leaders_ready(bootstrap: str, topics: dict[str, int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
            if all(
                t in md.topics
                and len(md.topics[t].partitions) == n
                and all(p.leader > 0 for p in md.topics[t].partitions.values())
                for t, n in topics.items()
            ):
                return
        except Exception:  # the cluster is still electing: ask again
            pass
        time.sleep(0.2)
    raise RuntimeError("partitions have no leaders")


def half_load_disk(
    half_stages: dict[int, NodeStages],
    half: LatencyRun,
    directories: list[Path],
    seconds: float,
) -> dict[str, Any]:
    """The half-load phase's reference: this disk at the nodes' own load (one paced writer
    process per replica, in its data directory, syncing what a node synced at a time)."""
    sync_bytes = median_stage(half_stages, "storage_sync_bytes", 0.5)
    source = "median over the nodes of their storage_sync_bytes p50 in the half-load phase"
    if sync_bytes is None:
        sync_bytes = FALLBACK_SYNC_BYTES
        source = "fallback: no stage snapshot of the half-load phase, 64 KiB assumed"
    # What the nodes themselves did, for comparison: their fdatasync and bytes made durable.
    durable = [
        stages["storage_sync_bytes"].sum / half.seconds / MB
        for stages in half_stages.values()
        if "storage_sync_bytes" in stages
    ]
    disk = paced_sync_writers(
        directories,
        append_bytes=max(512, round(sync_bytes)),
        mb_per_s=half.mb_per_s,
        seconds=seconds,
    )
    return {
        **disk.as_dict(),
        "append_bytes_source": source,
        "nodes_fdatasync_p99_ms": _ms(median_stage(half_stages, "storage_fdatasync_seconds", 0.99)),
        "nodes_durable_mb_per_s": durable,
        "ratio_ack_p99_to_disk_p99": half.p99_ms / disk.p99_ms if disk.p99_ms else None,
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def render(result: dict[str, Any]) -> str:
    raw = result["raw_disk"]
    ceiling3 = raw["bulk_reference_mb_per_s"] / 3
    full, half = result["full_load"], result["half_load"]
    batched = result["full_load_batches"]
    seq, fail, core = result["sequential"], result["failover"], result["core"]
    ratio = full["mb_per_s"] / ceiling3
    rows = [
        (
            "raw disk: 1 MiB appends, fdatasync/16 MiB",
            f"{raw['bulk_reference_mb_per_s']:.1f} MB/s",
            "best of "
            + ", ".join(f"{r:.0f}" for r in raw["bulk_runs_mb_per_s"])
            + f"; /3 = {ceiling3:.1f}",
            "",
        ),
        (
            "raw disk: 4 KiB append+fdatasync",
            f"{raw['small_per_s']:.0f} /s",
            f"p50 {raw['small_p50_ms']:.2f} ms",
            "",
        ),
        (
            "full load, acks=all, RF 3",
            f"{full['mb_per_s']:.1f} MB/s",
            f"{ratio:.0%} of ceiling/3 (target >= {THROUGHPUT_TARGET:.0%})",
            _verdict(ratio >= THROUGHPUT_TARGET),
        ),
        (
            "  ack latency p50 / p99 / p999",
            f"{full['p50_ms']:.1f} / {full['p99_ms']:.1f} / {full['p999_ms']:.1f} ms",
            f"{full['msgs_per_s']:.0f} msg/s; nodes' CPU "
            f"{full['node_cpu_pct']:.0f}% of one core (2 cores)",
            "",
        ),
        (
            "full load, ready-made batches (no client work)",
            f"{batched['mb_per_s']:.1f} MB/s",
            f"{batched['ratio_to_fair_ceiling']:.0%} of ceiling/3 (target >= "
            f"{THROUGHPUT_TARGET:.0%}); request p50 {batched['p50_ms']:.1f} / p99 "
            f"{batched['p99_ms']:.1f} ms, errors {batched['errors']}",
            _verdict(batched["ratio_to_fair_ceiling"] >= THROUGHPUT_TARGET),
        ),
        (
            "half load",
            f"{half['mb_per_s']:.1f} MB/s",
            f"ack p50 {half['p50_ms']:.1f} / p99 {half['p99_ms']:.1f} / "
            f"p999 {half['p999_ms']:.1f} ms",
            "",
        ),
        *_half_load_disk_rows(result["half_load_disk"], half),
        (
            "one in flight: acks=all",
            f"{seq['per_s']:.0f} /s",
            f"p50 {seq['p50_ms']:.2f} / p99 {seq['p99_ms']:.2f} ms"
            f" (target >= {SEQUENTIAL_TARGET:.0f})",
            _verdict(seq["per_s"] >= SEQUENTIAL_TARGET),
        ),
    ]
    if fail["seconds"]:
        worst = max(fail["seconds"])
        rows.append(
            (
                "failover: leader kill -9 -> next ack",
                f"{worst:.2f} s",
                "runs: "
                + ", ".join(f"{s:.2f}" for s in fail["seconds"])
                + f" (target <= {FAILOVER_TARGET_S} s)",
                _verdict(worst <= FAILOVER_TARGET_S),
            )
        )
    rows.append(
        (
            "raft core alone (3 nodes, wire codec)",
            f"{core['per_s']:.0f} commits/s",
            f"{core['batch']} entries/round, {core['payload_bytes']} B",
            "",
        )
    )
    ref = result.get("pysyncobj")
    if ref and ref.get("per_s"):
        core_ratio = core["per_s"] / ref["per_s"]
        rows.append(
            (
                "PySyncObj (3 processes, no fsync)",
                f"{ref['per_s']:.0f} commits/s",
                f"{ref['window']} in flight; core = {core_ratio:.1f}x "
                f"(target >= {CORE_TARGET_RATIO:.0f}x)",
                _verdict(core_ratio >= CORE_TARGET_RATIO),
            )
        )
    else:
        rows.append(("PySyncObj", "skipped", str((ref or {}).get("error")), ""))
    rows.extend(_restart_rows(result["restart"]))
    rows.extend(_restart_rows(result["restart_one_record_batches"], small=True))
    rows.extend(_floor_rows(result["floor"], ceiling3))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def _half_load_disk_rows(disk: dict[str, Any], half: dict[str, Any]) -> list[Row]:
    ratio = disk["ratio_ack_p99_to_disk_p99"]
    nodes_p99 = disk["nodes_fdatasync_p99_ms"]
    rows: list[Row] = [
        (
            f"  disk at half load: {disk['writers']} procs, "
            f"{disk['append_bytes'] / 1024:.1f} KiB+fdatasync",
            f"p99 {disk['p99_ms']:.2f} ms",
            f"p50 {disk['p50_ms']:.2f} / p999 {disk['p999_ms']:.2f} ms at "
            + "/".join(f"{r:.1f}" for r in disk["mb_per_s"])
            + f" MB/s (paced {disk['target_mb_per_s']:.1f})"
            + ("" if nodes_p99 is None else f"; nodes' own fdatasync p99 {nodes_p99:.2f} ms"),
            "",
        ),
        (
            "  half-load ack p99 / disk fdatasync p99",
            "-" if ratio is None else f"{ratio:.1f}x",
            f"{half['p99_ms']:.1f} / {disk['p99_ms']:.2f} ms (target <= "
            f"{HALF_LOAD_DISK_RATIO:.0f}x)",
            "" if ratio is None else _verdict(ratio <= HALF_LOAD_DISK_RATIO),
        ),
    ]
    if disk["append_bytes_source"].startswith("fallback"):
        rows.append(("  (disk at half load)", "", disk["append_bytes_source"], ""))
    return rows


def _floor_rows(floor: dict[str, Any], ceiling3: float) -> list[Row]:
    cores = floor["cores"]
    per_mb = floor["full_load_ms_per_mb"]
    per_ack = floor["one_in_flight_us_per_ack"]
    leader = floor["one_in_flight_leader"]
    bound = floor["full_load_cpu_bound_mb_per_s"]

    def nodes(values: dict[Any, float], unit: str) -> str:
        return ", ".join(
            f"node {i}{' (leader)' if int(i) == leader else ''} {v:.{1 if unit == 'ms' else 0}f}"
            for i, v in sorted(values.items(), key=lambda kv: int(kv[0]))
        )

    batches_mb = floor["batches_ms_per_mb"]
    batches_bound = floor["batches_cpu_bound_mb_per_s"]
    return [
        (
            "floor: CPU per MB, ready-made batches",
            f"{sum(batches_mb['nodes'].values()) + batches_mb['client']:.1f} ms/MB",
            f"{nodes(batches_mb['nodes'], 'ms')}, client {batches_mb['client']:.1f}; nodes' "
            f"system time {floor['batches_nodes_system_share']:.0%}; busiest node "
            f"{floor['batches_busiest_node_core_pct']:.0f}% of one core",
            "",
        ),
        (
            f"  {cores} cores at that cost",
            f"{batches_bound:.0f} MB/s",
            f"{batches_bound / ceiling3:.0%} of ceiling/3: the most these nodes can take here",
            "",
        ),
        (
            "floor: CPU per MB at full load",
            f"{sum(per_mb['nodes'].values()) + per_mb['client']:.1f} ms/MB",
            f"{nodes(per_mb['nodes'], 'ms')}, client {per_mb['client']:.1f}; busiest node "
            f"{floor['full_load_busiest_node_core_pct']:.0f}% of one core",
            "",
        ),
        (
            f"  {cores} cores at that cost",
            f"{bound:.0f} MB/s",
            f"{bound / ceiling3:.0%} of ceiling/3: the most this machine allows with this client",
            "",
        ),
        (
            "floor: CPU per ack, one in flight",
            f"{sum(per_ack['nodes'].values()) + per_ack['client']:.0f} us",
            f"{nodes(per_ack['nodes'], 'us')}, client {per_ack['client']:.0f}; nodes' system "
            f"time {floor['one_in_flight_nodes_system_share']:.0%}",
            "",
        ),
        (
            "  serial path: leader + follower CPU + disk",
            f"{floor['one_in_flight_serial_path_per_s']:.0f} /s",
            f"{floor['one_in_flight_serial_path_us']:.0f} us an ack; {cores} cores at the "
            f"CPU above: {floor['one_in_flight_cpu_bound_per_s']:.0f} /s",
            "",
        ),
    ]


def _restart_rows(restart: dict[str, Any], *, small: bool = False) -> list[Row]:
    kind = "one-record batches" if small else "a large log"
    if "skipped" in restart or "error" in restart:
        what = restart.get("skipped") or restart.get("error")
        return [
            (
                f"restart of a node with {kind}",
                "skipped" if "skipped" in restart else "failed",
                str(what),
                "",
            )
        ]
    fill = (
        f"{restart['fill_messages']} one-record batches of 1 KiB"
        if small
        else f"{restart['fill_bytes'] / GIB:.2f} GiB"
    )
    rows: list[Row] = [
        (
            f"restart: fill {fill}, 1 node, 1 partition",
            f"{restart['fill_mb_per_s']:.1f} MB/s",
            f"acks=all; {restart['data_dir_bytes'] / GIB:.2f} GiB on disk, "
            f"{restart['segment_files']} segments",
            "",
        )
    ]
    for timing in restart["restarts"]:
        seconds = timing["serving_seconds"]
        how = "kill -9" if timing["how"] == "SIGKILL" else timing["how"]
        rows.append(
            (
                f"  after {how}: spawn -> serving",
                f"{seconds:.2f} s",
                f"port {timing['listen_seconds']:.2f} s, ack {timing['ack_seconds']:.2f} s; "
                f"{seconds / RESTART_TARGET_S:.2f}x the target (<= {RESTART_TARGET_S:.0f} s)",
                _verdict(seconds <= RESTART_TARGET_S),
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.sequential_only:
        return sequential_only(args)
    workdir = Path(tempfile.mkdtemp(prefix="vdl-cluster-bench-", dir=args.dir))
    raw_dir = workdir / "raw-disk"
    raw_dir.mkdir()
    started = dt.datetime.now(dt.UTC)
    machine = machine_info(workdir)
    cluster: Cluster | None = None
    try:
        print("raw disk...", file=sys.stderr)
        raw_runs = [bulk_append(raw_dir, args.raw_mib * MIB)]
        raw_small = small_append_sync(raw_dir, seconds=2.0)
        print("cluster...", file=sys.stderr)
        cluster = start_cluster(workdir, args.raft_tick_ms)
        topics = {TOPIC: args.partitions, SEQUENTIAL_TOPIC: 1, FAILOVER_TOPIC: 1}
        create_topics(cluster.bootstrap, topics)
        _leaders_ready(cluster.bootstrap, topics)
        print(f"full load: {args.messages} x {args.size} B...", file=sys.stderr)
        # Stage timings per load phase: the difference of the nodes' snapshots around it.
        stage_marks = [stage_snapshot(cluster.nodes)]
        cpu_marks = [CpuMark.take(cluster)]
        cpu_before = cluster.cpu_seconds()
        full = paced_produce(cluster.bootstrap, TOPIC, args.size, count=args.messages)
        cpu_after = cluster.cpu_seconds()
        cpu_marks.append(CpuMark.take(cluster))
        stage_marks.append(stage_snapshot(cluster.nodes))
        node_cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
        print("full load, ready-made batches...", file=sys.stderr)
        batched = batched_produce(
            cluster.bootstrap, TOPIC, args.partitions, args.size, seconds=args.batched_seconds
        )
        cpu_marks.append(CpuMark.take(cluster))
        stage_marks.append(stage_snapshot(cluster.nodes))
        print("half load...", file=sys.stderr)
        half = paced_produce(
            cluster.bootstrap,
            TOPIC,
            args.size,
            rate=full.msgs_per_s / 2,
            seconds=args.half_seconds,
        )
        cpu_marks.append(CpuMark.take(cluster))
        stage_marks.append(stage_snapshot(cluster.nodes))
        print("one in flight...", file=sys.stderr)
        sequential = run_sequential(cluster.bootstrap, args.size, args.sequential_seconds)
        cpu_marks.append(CpuMark.take(cluster))
        stage_marks.append(stage_snapshot(cluster.nodes))
        phases = ("full load", "full load, batches", "half load", "one in flight")
        stages = {
            name: stage_phase(after, before)
            for name, before, after in zip(phases, stage_marks[:-1], stage_marks[1:], strict=True)
        }
        cpu = {
            name: after.spent_since(before)
            for name, before, after in zip(phases, cpu_marks[:-1], cpu_marks[1:], strict=True)
        }
        seq_leader = partition_leader(cluster.bootstrap, SEQUENTIAL_TOPIC)
        node_dirs = [node.data_dir for node in cluster.nodes.values()]
        failovers: list[float] = []
        for round_ in range(args.failovers):
            print(f"failover {round_ + 1}...", file=sys.stderr)
            seconds, victim = failover_once(cluster.bootstrap, FAILOVER_TOPIC, cluster.nodes)
            failovers.append(seconds)
            cluster.nodes[victim].start()
            _leaders_ready(cluster.bootstrap, topics)
            time.sleep(2)  # the restarted node catches up before the next round
        exits = cluster.stop()
        cluster = None
        # With the cluster stopped: the disk alone, at the half load, where the nodes wrote.
        print("disk at half load...", file=sys.stderr)
        half_disk = half_load_disk(stages["half load"], half, node_dirs, args.half_seconds)
        print("raft core and PySyncObj...", file=sys.stderr)
        core = run_core(args.size, args.core_seconds)
        reference = pysyncobj_commits(args.size, args.core_seconds + 2, args.pysyncobj_window)
        restart = restart_phase(args, workdir)
        restart_small = restart_phase(args, workdir, one_record_batches=True)
        raw_runs.append(bulk_append(raw_dir, args.raw_mib * MIB))
    finally:
        if cluster is not None:
            cluster.stop_after_failure()
        shutil.rmtree(workdir, ignore_errors=True)

    best = max(r.mb_per_s for r in raw_runs)
    result: dict[str, Any] = {
        "bench": "cluster",
        "started_utc": started.isoformat(timespec="seconds"),
        "parameters": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": machine,
        "node_exit_codes": exits,
        "raw_disk": {
            "bulk_runs_mb_per_s": [r.mb_per_s for r in raw_runs],
            "bulk_reference_mb_per_s": best,
            "fair_ceiling_mb_per_s": best / 3,
            "small_per_s": raw_small.per_s,
            "small_p50_ms": raw_small.p50_ms,
        },
        "full_load": {
            **full.as_dict(),
            "node_cpu_s": node_cpu,
            "node_cpu_pct": 100 * (node_cpu or 0.0) / full.seconds,
            "ratio_to_fair_ceiling": full.mb_per_s / (best / 3),
        },
        "full_load_batches": {
            **batched.as_dict(),
            "ratio_to_fair_ceiling": batched.mb_per_s / (best / 3),
        },
        "half_load": half.as_dict(),
        "half_load_disk": half_disk,
        "sequential": {
            "per_s": sequential.per_s,
            "p50_ms": sequential.p50_ms,
            "p99_ms": sequential.p99_ms,
            "errors": sequential.errors,
        },
        "failover": {"seconds": failovers},
        "core": {**asdict(core), "per_s": core.per_s},
        "pysyncobj": reference,
        "restart": restart,
        "restart_one_record_batches": restart_small,
        "cpu": cpu,
        "floor": floor(cpu, full, batched, sequential.acks, seq_leader, raw_small.p50_ms),
        "stages": {name: stages_json(per_node) for name, per_node in stages.items()},
    }
    if reference.get("per_s"):
        result["core"]["ratio_to_pysyncobj"] = core.per_s / reference["per_s"]
    print(render(result))
    for name, per_node in stages.items():
        print()
        print(render_stages(per_node, name))
    if not args.no_save:
        save_result("cluster", started, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
