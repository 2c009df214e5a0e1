"""Commit ranges merge into the contiguous committed offset."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vdl.net.ydb.commits import CommitTracker


def test_contiguous_commits_advance() -> None:
    tracker = CommitTracker(10)
    assert tracker.add(10, 15) == 15
    assert tracker.add(15, 16) == 16
    assert tracker.add(3, 8) == 16  # already committed


def test_out_of_order_commits_wait_for_the_gap() -> None:
    tracker = CommitTracker(0)
    assert tracker.add(5, 10) == 0
    assert tracker.add(10, 12) == 0
    assert tracker.pending == [(5, 10), (10, 12)]
    assert tracker.add(0, 5) == 12
    assert tracker.pending == []


@given(st.permutations(list(range(20))))
def test_any_order_of_unit_ranges_ends_at_the_top(order: list[int]) -> None:
    tracker = CommitTracker(0)
    for start in order:
        tracker.add(start, start + 1)
    assert tracker.committed == 20
