"""The stage registry as Prometheus families: what a scraper's parser reads back."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from vdl.admin.metrics import stage_families, timing_gc_pauses
from vdl.metrics.stages import StageRegistry


class _Stages(Collector):
    def __init__(self, stages: StageRegistry) -> None:
        self._stages = stages

    def collect(self) -> Iterator[Metric]:
        return stage_families(self._stages)


def test_histograms_and_counters_read_back_as_prometheus_families() -> None:
    stages = StageRegistry()
    hist = stages.histogram("thing_seconds", peer="2")
    for v in (0.0001, 0.001, 0.001, 20.0):  # the last is above every bound
        hist.observe(v)
    stages.counter("things", kind="a").inc(5)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Stages(stages))
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }

    samples = {(s.name, s.labels.get("le")): s.value for s in families["vdl_thing_seconds"].samples}
    assert samples[("vdl_thing_seconds_count", None)] == 4
    assert abs(samples[("vdl_thing_seconds_sum", None)] - 20.0021) < 1e-9
    assert samples[("vdl_thing_seconds_bucket", "+Inf")] == 4
    buckets = [
        (float(s.labels["le"]), s.value)
        for s in families["vdl_thing_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
    ]
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(buckets))
    assert max(v for le, v in buckets if le < 0.0005) == 1
    assert buckets[-1][1] == 3
    assert all(s.labels["peer"] == "2" for s in families["vdl_thing_seconds"].samples)

    (things,) = families["vdl_things"].samples
    assert (things.name, things.labels, things.value) == ("vdl_things_total", {"kind": "a"}, 5)


def test_garbage_collector_passes_are_timed_while_inside_and_only_then() -> None:
    stages = StageRegistry()
    with timing_gc_pauses(stages):
        gc.collect()  # a full pass: generation 2
        gc.collect(0)
    gen0 = stages.histogram("gc_pause_seconds", generation="0")
    gen2 = stages.histogram("gc_pause_seconds", generation="2")
    assert gen2.count >= 1 and gen0.count >= 1
    seen = gen2.count
    gc.collect()
    assert gen2.count == seen  # the callback went with the context
