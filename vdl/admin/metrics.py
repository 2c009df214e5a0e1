"""The node's metrics in Prometheus' text format, built with prometheus-client at scrape time.

Two kinds of metric, both read when `/metrics` is scraped and never kept twice:

- What the node records as it works (`STAGES`, vdl/metrics/stages.py): every histogram
  and counter there is exposed as `vdl_<name>` with its labels. Recording stays a few
  hundred nanoseconds on the hot path (no lock, no prometheus-client object per sample).
- What the node's state says now (`NodeView`): Raft role, term, commit and applied index
  and follower lag per group; partition offsets and bytes; under-replicated partitions;
  consumer-group committed offsets and lag; node liveness; open connections.

Names follow Kafka's broker metrics where one exists, so alert rules translate:
`vdl_under_replicated_partitions` is Kafka's ReplicaManager UnderReplicatedPartitions,
`vdl_partitions_led` its LeaderCount, `vdl_active_controller` KafkaController's
ActiveControllerCount, `vdl_kafka_consumer_group_lag` the number consumer-lag exporters
compute. Per-partition lag series come from the node leading the partition, so summing
over a cluster counts each once.
"""

from __future__ import annotations

import gc
import platform
import time
from collections.abc import Iterator
from contextlib import contextmanager

import trio
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from vdl.admin.views import NodeView, Statuses
from vdl.metrics.stages import STAGES, Histogram, StageRegistry

PREFIX = "vdl_"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_HELP: dict[str, str] = {
    "kafka_produce_decode_seconds": "Decoding one Produce request.",
    "kafka_produce_append_seconds": "Validating and appending (proposing) one Produce request.",
    "kafka_produce_commit_to_response_seconds": "Last partition committed to response sent.",
    "raft_propose_to_commit_seconds": "A stream's proposal to its commit (leader).",
    "raft_append_round_trip_seconds": "AppendEntries sent to the follower's answer.",
    "raft_receive_to_write_seconds": "AppendEntries received to entries written (follower).",
    "raft_write_to_durable_seconds": "Entries written to the store to durable.",
    "flusher_round_seconds": "One flusher round (every dirty store synced).",
    "flusher_handoff_seconds": "A flusher round's end to its report on the event loop.",
    "storage_sync_write_seconds": "Writing what a segment store queued, per sync.",
    "storage_fdatasync_seconds": "fdatasync of a segment store.",
    "storage_sync_bytes": "Bytes made durable by one sync.",
    "event_loop_lag_seconds": "How late a periodic event-loop task wakes.",
    "gc_pause_seconds": "One pass of Python's cyclic garbage collector, by generation.",
}


# Buckets exposed per histogram: about one per power of two. The registry keeps finer ones
# (four per power of two for latencies) for the benches' quantiles; a cumulative count at
# a kept bound is exact, so coarser exposition loses no correctness, only resolution, and
# keeps a scrape small (each bucket is a line per label set).
_EXPOSED_BUCKETS = 18


def _histogram(name: str, hists: list[Histogram]) -> HistogramMetricFamily:
    labels = sorted({k for h in hists for k in h.labels})
    family = HistogramMetricFamily(
        PREFIX + name, _HELP.get(name, name.replace("_", " ")), labels=labels
    )
    for h in hists:
        buckets: list[tuple[str, float]] = []
        running = 0
        stride = max(1, len(h.bounds) // _EXPOSED_BUCKETS)
        last = len(h.bounds) - 1
        for i, (bound, count) in enumerate(zip(h.bounds, h.counts, strict=False)):
            running += count
            if (i + 1) % stride == 0 or i == last:
                buckets.append((f"{bound:.6g}", float(running)))
        # From the counts alone (not `h.count`): a flusher-thread write racing this read
        # must not make the buckets non-monotonic.
        running += h.counts[-1]
        buckets.append(("+Inf", float(running)))
        family.add_metric([h.labels.get(k, "") for k in labels], buckets, h.sum)
    return family


def _bare(name: str) -> str:
    """A registry name without the prefix and suffix the exposition adds itself."""
    return name.removeprefix(PREFIX).removesuffix("_total")


def stage_families(registry: StageRegistry) -> Iterator[Metric]:
    by_name: dict[str, list[Histogram]] = {}
    for h in registry.histograms():
        by_name.setdefault(_bare(h.name), []).append(h)
    for name, hists in sorted(by_name.items()):
        yield _histogram(name, hists)
    counters: dict[str, list[tuple[dict[str, str], int]]] = {}
    for c in registry.counters():
        counters.setdefault(_bare(c.name), []).append((dict(c.labels), c.value))
    for name, values in sorted(counters.items()):
        labels = sorted({k for lab, _ in values for k in lab})
        family = CounterMetricFamily(PREFIX + name, name.replace("_", " "), labels=labels)
        for lab, value in values:
            family.add_metric([lab.get(k, "") for k in labels], value)
        yield family


class NodeCollector(Collector):
    """prometheus-client's custom-collector interface over one node's state."""

    def __init__(self, view: NodeView, stages: StageRegistry = STAGES) -> None:
        self._view = view
        self._stages = stages

    def collect(self) -> Iterator[Metric]:
        # Every group's state once per scrape: readiness, the Raft series and the
        # partition rows all read it.
        statuses = self._view.statuses()
        yield from stage_families(self._stages)
        yield from self._node(statuses)
        yield from self._raft(statuses)
        yield from self._partitions_and_groups(statuses)

    def _node(self, statuses: Statuses) -> Iterator[Metric]:
        view = self._view
        info = GaugeMetricFamily(
            PREFIX + "node_info",
            "This node: its id, cluster id and Python version (always 1).",
            labels=["node_id", "cluster_id", "python"],
        )
        info.add_metric([str(view.node_id), view.cluster_id, platform.python_version()], 1)
        yield info
        ready = view.readiness(statuses)
        yield GaugeMetricFamily(
            PREFIX + "node_ready", "1 while /v1/status/ready answers 200.", value=int(ready.ready)
        )
        yield GaugeMetricFamily(
            PREFIX + "node_draining",
            "1 while the node drains for shutdown.",
            value=int(view.draining),
        )
        if view.start_seconds is not None:
            yield GaugeMetricFamily(
                PREFIX + "node_start_seconds",
                "Process start to client listeners open (stores opened and recovered).",
                value=view.start_seconds,
            )
        yield GaugeMetricFamily(
            PREFIX + "active_controller",
            "1 on the node that leads the metadata group (Kafka's ActiveControllerCount).",
            value=int(view.controller_id() == view.node_id),
        )
        connections = GaugeMetricFamily(
            PREFIX + "connections_open", "Open client connections.", labels=["listener"]
        )
        for name, limits in sorted(view.listeners.items()):
            connections.add_metric([name], limits.open)
        yield connections
        nodes = GaugeMetricFamily(
            PREFIX + "cluster_nodes",
            "Registered nodes by state as this node's liveness holds them.",
            labels=["state"],
        )
        counts = {"self": 0, "up": 0, "down": 0}
        for row in view.nodes():
            counts[row["state"]] = counts.get(row["state"], 0) + 1
        for state, count in sorted(counts.items()):
            nodes.add_metric([state], count)
        yield nodes

    def _raft(self, statuses: Statuses) -> Iterator[Metric]:
        cluster = self._view.cluster
        if cluster is None:
            return
        labels = ["group", "topic", "partition"]
        role = GaugeMetricFamily(
            PREFIX + "raft_role",
            "1 for this node's Raft role in the group.",
            labels=[*labels, "role"],
        )
        term = GaugeMetricFamily(PREFIX + "raft_term", "Raft term.", labels=labels)
        leader = GaugeMetricFamily(
            PREFIX + "raft_leader_id", "The group's leader (0: unknown).", labels=labels
        )
        commit = GaugeMetricFamily(
            PREFIX + "raft_commit_index", "Raft commit index.", labels=labels
        )
        applied = GaugeMetricFamily(
            PREFIX + "raft_applied_index", "Raft applied index.", labels=labels
        )
        last = GaugeMetricFamily(PREFIX + "raft_last_index", "Raft last log index.", labels=labels)
        match = GaugeMetricFamily(
            PREFIX + "raft_follower_match_index",
            "The leader's view of a follower's match index.",
            labels=[*labels, "follower"],
        )
        lag = GaugeMetricFamily(
            PREFIX + "raft_follower_lag_entries",
            "Entries a follower lacks of the leader's log.",
            labels=[*labels, "follower"],
        )
        lag_bytes = GaugeMetricFamily(
            PREFIX + "raft_follower_lag_bytes",
            "Bytes of the leader's log a follower lacks (segment store).",
            labels=[*labels, "follower"],
        )
        groups = [(("0", "", ""), cluster.metadata_status())]
        for (topic, partition), status in sorted(statuses.items()):
            groups.append(((str(status.group_id), topic, str(partition)), status))
        quiesced = 0
        for values, status in groups:
            key = list(values)
            role.add_metric([*key, status.role], 1)
            term.add_metric(key, status.term)
            leader.add_metric(key, status.leader_id)
            commit.add_metric(key, status.commit_index)
            applied.add_metric(key, status.applied_index)
            last.add_metric(key, status.last_index)
            quiesced += status.quiesced
            for follower, m in sorted(status.match.items()):
                match.add_metric([*key, str(follower)], m)
                lag.add_metric([*key, str(follower)], max(0, status.last_index - m))
                behind = status.lag_bytes.get(follower)
                if behind is not None:
                    lag_bytes.add_metric([*key, str(follower)], behind)
        yield from (role, term, leader, commit, applied, last, match, lag, lag_bytes)
        yield GaugeMetricFamily(
            PREFIX + "raft_groups_quiesced",
            "Raft groups of this node asleep (no ticks, no heartbeats).",
            value=quiesced,
        )

    def _partitions_and_groups(self, statuses: Statuses) -> Iterator[Metric]:
        view = self._view
        rows = view.partitions(statuses)
        labels = ["topic", "partition"]
        hw = GaugeMetricFamily(
            PREFIX + "partition_high_watermark",
            "High watermark (the next offset a consumer can read to), where hosted.",
            labels=labels,
        )
        start = GaugeMetricFamily(
            PREFIX + "partition_log_start_offset", "Log start offset, where hosted.", labels=labels
        )
        end = GaugeMetricFamily(
            PREFIX + "partition_log_end_offset", "Log end offset, where hosted.", labels=labels
        )
        size = GaugeMetricFamily(
            PREFIX + "partition_size_bytes", "Bytes of the partition's log on disk.", labels=labels
        )
        segments = GaugeMetricFamily(
            PREFIX + "partition_segments", "Segment files of the partition's log.", labels=labels
        )
        isr = GaugeMetricFamily(
            PREFIX + "partition_in_sync_replicas",
            "In-sync replicas, on the partition's leader.",
            labels=labels,
        )
        replicas = GaugeMetricFamily(
            PREFIX + "partition_replicas", "Replicas, on the partition's leader.", labels=labels
        )
        led = under = hosted = producers = 0
        for row in rows:
            key = [row.topic, str(row.partition)]
            if not row.hosted:
                continue
            hosted += 1
            if row.high_watermark is not None:
                hw.add_metric(key, row.high_watermark)
            if row.log_start is not None:
                start.add_metric(key, row.log_start)
            if row.log_end is not None:
                end.add_metric(key, row.log_end)
            if row.size_bytes is not None:
                size.add_metric(key, row.size_bytes)
            if row.segments is not None:
                segments.add_metric(key, row.segments)
            if row.leads:
                producers += row.producers or 0
                led += 1
                isr.add_metric(key, len(row.isr))
                replicas.add_metric(key, len(row.replicas))
                under += len(row.isr) < len(row.replicas)
        yield from (hw, start, end, size, segments, isr, replicas)
        yield GaugeMetricFamily(
            PREFIX + "partitions_hosted", "Partitions with a replica on this node.", value=hosted
        )
        yield GaugeMetricFamily(PREFIX + "partitions_led", "Partitions this node leads.", value=led)
        yield GaugeMetricFamily(
            PREFIX + "producer_ids",
            "Idempotent producers tracked by the partitions this node leads.",
            value=producers,
        )
        yield GaugeMetricFamily(
            PREFIX + "under_replicated_partitions",
            "Partitions this node leads whose in-sync replicas are fewer than their replicas.",
            value=under,
        )
        committed = GaugeMetricFamily(
            PREFIX + "kafka_consumer_group_committed_offset",
            "A group's committed offset, from the node leading the partition.",
            labels=["group", "topic", "partition"],
        )
        lag = GaugeMetricFamily(
            PREFIX + "kafka_consumer_group_lag",
            "High watermark minus committed offset, from the node leading the partition.",
            labels=["group", "topic", "partition"],
        )
        for offset in view.group_offsets(rows):
            if not offset.leads:
                continue
            key = [offset.group, offset.topic, str(offset.partition)]
            committed.add_metric(key, offset.committed)
            if offset.lag is not None:
                lag.add_metric(key, offset.lag)
        yield committed
        yield lag
        groups = view.groups
        if groups is not None:
            members = GaugeMetricFamily(
                PREFIX + "kafka_consumer_group_members",
                "Members of each group this node coordinates.",
                labels=["group", "state"],
            )
            for group in groups.groups():
                members.add_metric([group.group_id, group.state.value], len(group.members))
            yield members


def node_registry(view: NodeView) -> CollectorRegistry:
    """A registry of one node: its collector and the process' CPU, memory and files."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(view))
    ProcessCollector(namespace="vdl", registry=registry)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


@contextmanager
def timing_gc_pauses(stages: StageRegistry = STAGES) -> Iterator[None]:
    """While inside: record how long each pass of the cyclic garbage collector stops the
    node (`gc.callbacks`), by generation; a pass is a pause of every thread holding the
    GIL, so it shows in every request's latency."""
    hists = [stages.histogram("gc_pause_seconds", generation=str(g)) for g in range(3)]
    started = 0.0

    def on_gc(phase: str, info: dict[str, int]) -> None:
        nonlocal started
        if phase == "start":
            started = time.perf_counter()
        else:
            hists[info["generation"]].observe(time.perf_counter() - started)

    gc.callbacks.append(on_gc)
    try:
        yield
    finally:
        gc.callbacks.remove(on_gc)


async def watch_event_loop_lag(period_s: float = 0.1, stages: StageRegistry = STAGES) -> None:
    """Record how late a periodic task wakes: the event loop's scheduling delay, which
    every request on this node waits through."""
    hist = stages.histogram("event_loop_lag_seconds")
    while True:
        before = trio.current_time()
        await trio.sleep(period_s)
        hist.observe(max(0.0, trio.current_time() - before - period_s))
