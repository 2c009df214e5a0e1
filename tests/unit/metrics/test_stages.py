"""The stage histograms: buckets, percentile estimates, merging, snapshots."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from vdl.metrics.stages import (
    BYTES_BOUNDS,
    LATENCY_BOUNDS_S,
    Histogram,
    IndexTimer,
    StageRegistry,
    load_snapshot,
    merged,
)


def test_latency_bounds_are_log_scale_from_50us_to_about_10s() -> None:
    assert LATENCY_BOUNDS_S[0] == pytest.approx(50e-6)
    assert 10.0 <= LATENCY_BOUNDS_S[-1] < 12.0
    ratios = {round(b / a, 9) for a, b in itertools.pairwise(LATENCY_BOUNDS_S)}
    assert ratios == {round(2**0.25, 9)}
    assert BYTES_BOUNDS[0] == 512 and BYTES_BOUNDS[-1] == 64 << 20


def test_a_value_lands_in_the_bucket_whose_upper_bound_holds_it() -> None:
    hist = Histogram("h", (1.0, 2.0, 4.0))
    for value in (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 4.5, 100.0):
        hist.observe(value)
    # (.., 1], (1, 2], (2, 4], (4, ..): a bound belongs to its own bucket (Prometheus' le).
    assert hist.counts == [2, 2, 2, 2]
    assert hist.count == 8
    assert hist.sum == pytest.approx(116.5)
    assert hist.max == 100.0


def test_quantiles_interpolate_inside_the_bucket() -> None:
    hist = Histogram("h", (1.0, 2.0, 4.0))
    assert hist.quantile(0.5) == 0.0  # empty
    for _ in range(10):
        hist.observe(1.5)
    for _ in range(10):
        hist.observe(3.0)
    # Half the observations are in (1, 2]: the median is that bucket's upper edge.
    assert hist.quantile(0.5) == pytest.approx(2.0)
    assert hist.quantile(0.25) == pytest.approx(1.5)
    # The largest value seen caps its bucket: no estimate above what was observed.
    assert hist.quantile(1.0) == pytest.approx(3.0)
    assert hist.quantile(0.99) <= 3.0


def test_quantile_above_the_last_bound_reaches_the_maximum_seen() -> None:
    hist = Histogram("h", (1.0, 2.0))
    hist.observe(0.5)
    hist.observe(50.0)
    assert hist.quantile(1.0) == pytest.approx(50.0)
    assert 2.0 < hist.quantile(0.9) < 50.0


def test_quantile_estimates_a_known_distribution_within_a_bucket_width() -> None:
    hist = Histogram("h")
    values = [i * 1e-5 for i in range(1, 10001)]  # 10 µs .. 100 ms, uniform
    for value in values:
        hist.observe(value)
    for q in (0.5, 0.9, 0.99):
        exact = values[int(q * len(values)) - 1]
        assert hist.quantile(q) == pytest.approx(exact, rel=0.2)


def test_merge_adds_observations_and_refuses_other_bounds() -> None:
    a, b = Histogram("h", (1.0, 2.0)), Histogram("h", (1.0, 2.0))
    a.observe(0.5)
    b.observe(1.5)
    b.observe(3.0)
    a.merge(b)
    assert a.counts == [1, 1, 1] and a.count == 3 and a.max == 3.0
    assert a.sum == pytest.approx(5.0)
    with pytest.raises(ValueError):
        a.merge(Histogram("h", (1.0, 3.0)))
    with pytest.raises(ValueError):
        Histogram("h", (2.0, 1.0))


def test_index_timer_times_indexes_up_to_the_one_reached_and_forgets_truncated_ones() -> None:
    hist = Histogram("h")
    timer = IndexTimer(hist, limit=3)
    for index in (1, 2, 3):
        timer.start(index)
    timer.stop_upto(2)
    assert hist.count == 2
    timer.stop_upto(2)  # nothing left at or below 2
    assert hist.count == 2
    timer.start(4)
    timer.start(4)  # a resend keeps its first start
    timer.start(2)
    timer.drop_from(4)
    timer.stop_upto(10)
    assert hist.count == 3  # only 3: 4 was truncated
    for index in range(10, 20):
        timer.start(index)  # bounded: the oldest starts go
    timer.stop_upto(100)
    assert hist.count == 6


def test_registry_snapshot_round_trips_through_json(tmp_path: Path) -> None:
    registry = StageRegistry()
    registry.histogram("stage_seconds").observe(0.001)
    rt2 = registry.histogram("rt_seconds", peer="2")
    assert registry.histogram("rt_seconds", peer="2") is rt2
    rt2.observe(0.002)
    registry.histogram("rt_seconds", peer="3").observe(0.003)
    registry.histogram("bytes", BYTES_BOUNDS).observe(4096)
    registry.counter("rounds").inc(5)
    path = tmp_path / "timings.json"
    registry.write_snapshot(path)
    assert json.loads(path.read_text())["pid"] > 0
    histograms, counters = load_snapshot(path)
    by_name = merged(histograms)
    assert set(by_name) == {"stage_seconds", "rt_seconds{peer=2}", "rt_seconds{peer=3}", "bytes"}
    assert by_name["rt_seconds{peer=2}"].count == 1
    assert by_name["bytes"].bounds == BYTES_BOUNDS
    assert by_name["stage_seconds"].quantile(0.5) == pytest.approx(
        registry.histogram("stage_seconds").quantile(0.5)
    )
    assert counters == {"rounds": 5}
    # Merging snapshots of one stage (two nodes, two runs) sums them.
    twice = merged([*histograms, *histograms])
    assert twice["rt_seconds{peer=3}"].count == 2
