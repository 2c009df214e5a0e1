"""Offset JSON, admission control and range splitting of the Spark source: pure arithmetic."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vdl.adapters.spark.offsets import (
    OffsetError,
    OffsetRange,
    cap_to_limit,
    from_json_dict,
    parse_json,
    plan_ranges,
    to_json_dict,
)


def test_json_round_trip_has_string_partition_keys() -> None:
    offsets = {("b", 1): 7, ("a", 0): 3, ("b", 0): 5}
    document = to_json_dict(offsets)
    assert document == {"a": {"0": 3}, "b": {"0": 5, "1": 7}}
    # Spark stores json.dumps of it and hands back json.loads: keys are strings either way.
    assert from_json_dict(json.loads(json.dumps(document))) == offsets


@pytest.mark.parametrize(
    "text",
    [
        "[1]",
        '{"t": [1]}',
        '{"t": {"0": 1.5}}',
        '{"t": {"0": true}}',
        '{"": {"0": 1}}',
        '{"t": {"-1": 1}}',
    ],
)
def test_malformed_offset_documents_are_rejected(text: str) -> None:
    with pytest.raises(OffsetError):
        parse_json(text, "startingOffsets")


def test_cap_shares_the_limit_by_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 900, ("t", 1): 190, ("t", 2): 60}
    end = cap_to_limit(start, latest, 100)
    taken = {tp: end[tp] - start[tp] for tp in start}
    assert sum(taken.values()) == 100
    assert taken == {("t", 0): 90, ("t", 1): 9, ("t", 2): 1}
    # Enough room: everything.
    assert cap_to_limit(start, latest, 10_000) == latest


def test_cap_with_more_partitions_than_the_limit_makes_progress() -> None:
    start = {("t", p): 0 for p in range(5)}
    latest = {("t", p): 10 for p in range(5)}
    end = cap_to_limit(start, latest, 3)
    assert sum(end[tp] - start[tp] for tp in start) == 3


@given(
    st.dictionaries(
        st.integers(0, 7),
        st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
        min_size=1,
    ),
    st.integers(1, 2000),
)
def test_cap_never_exceeds_limit_or_backlog(parts: dict[int, tuple[int, int]], limit: int) -> None:
    start = {("t", p): min(a, b) for p, (a, b) in parts.items()}
    latest = {("t", p): max(a, b) for p, (a, b) in parts.items()}
    end = cap_to_limit(start, latest, limit)
    backlog = sum(latest[tp] - start[tp] for tp in start)
    assert sum(end[tp] - start[tp] for tp in start) == min(limit, backlog)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)
    assert cap_to_limit(start, latest, limit) == end  # deterministic


def test_plan_one_range_per_partition_with_data() -> None:
    start = {("t", 0): 5, ("t", 1): 10, ("u", 0): 0}
    end = {("t", 0): 5, ("t", 1): 20, ("u", 0): 3}
    assert plan_ranges(start, end) == [OffsetRange("t", 1, 10, 20), OffsetRange("u", 0, 0, 3)]


def test_plan_skips_partitions_new_in_this_batch() -> None:
    # A partition absent from start enters the offsets with an empty range first.
    assert plan_ranges({("t", 0): 0}, {("t", 0): 4, ("t", 1): 0}) == [OffsetRange("t", 0, 0, 4)]


def test_min_partitions_splits_big_ranges_proportionally() -> None:
    start = {("t", 0): 0, ("t", 1): 0}
    end = {("t", 0): 900, ("t", 1): 100}
    ranges = plan_ranges(start, end, min_partitions=10)
    assert sum(1 for r in ranges if r.partition == 0) == 9
    assert sum(1 for r in ranges if r.partition == 1) == 1


@given(
    st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 500), st.integers(0, 500))),
    st.integers(1, 40),
)
def test_split_ranges_tile_the_batch_exactly(
    parts: dict[int, tuple[int, int]], min_partitions: int
) -> None:
    start = {("t", p): min(a, b) for p, (a, b) in parts.items()}
    end = {("t", p): max(a, b) for p, (a, b) in parts.items()}
    ranges = plan_ranges(start, end, min_partitions)
    for tp in start:
        pieces = sorted((r.start, r.end) for r in ranges if (r.topic, r.partition) == tp)
        covered = [o for lo, hi in pieces for o in range(lo, hi)]
        assert covered == list(range(start[tp], end[tp]))
        assert all(hi > lo for lo, hi in pieces)
    assert plan_ranges(start, end, min_partitions) == ranges
