"""Partition balancing among the read sessions of one consumer."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from vdl.net.ydb.read_balancer import ReadCoordinator, balance


def test_partitions_spread_evenly() -> None:
    target = balance(5, {"a": None, "b": None}, {})
    assert sorted(target) == [0, 1, 2, 3, 4]
    assert sorted(Counter(target.values()).values()) == [2, 3]


def test_current_owners_keep_what_is_fair() -> None:
    current = {0: "a", 1: "a", 2: "a", 3: "a"}
    target = balance(4, {"a": None, "b": None}, current)
    assert [p for p, m in target.items() if m == "a"] == [0, 1]
    assert [p for p, m in target.items() if m == "b"] == [2, 3]


def test_wanted_partitions_are_respected() -> None:
    target = balance(3, {"a": frozenset({0}), "b": None}, {})
    assert target == {0: "a", 1: "b", 2: "b"}
    assert balance(2, {"a": frozenset({5})}, {}) == {}


@given(
    partitions=st.integers(0, 12),
    members=st.sets(st.sampled_from("abcdef"), max_size=6),
    owners=st.dictionaries(st.integers(0, 11), st.sampled_from("abcdefg")),
)
def test_balance_is_total_and_fair(
    partitions: int, members: set[str], owners: dict[int, str]
) -> None:
    target = balance(partitions, dict.fromkeys(members), owners)
    if not members:
        assert target == {}
        return
    assert sorted(target) == list(range(partitions))
    loads = Counter(target.values())
    assert set(loads) <= members
    assert max(loads.values(), default=0) - min((loads.get(m, 0) for m in members), default=0) <= 1


def test_handoff_waits_for_the_release() -> None:
    coordinator = ReadCoordinator()
    woken: list[str] = []
    coordinator.join("c", "t", 2, "a", None, lambda: woken.append("a"))
    assert coordinator.targets("c", "t", "a") == {0, 1}
    assert coordinator.try_acquire("c", "t", "a", 0)
    assert coordinator.try_acquire("c", "t", "a", 1)

    coordinator.join("c", "t", 2, "b", None, lambda: woken.append("b"))
    moved = coordinator.targets("c", "t", "b")
    assert len(moved) == 1 and coordinator.targets("c", "t", "a") == {0, 1} - moved
    (partition,) = moved
    # Still held by a: b must wait.
    assert not coordinator.try_acquire("c", "t", "b", partition)
    woken.clear()
    coordinator.release("c", "t", "a", partition)
    assert woken == ["b"]
    assert coordinator.try_acquire("c", "t", "b", partition)
    assert coordinator.holders("c", "t") == {1 - partition: "a", partition: "b"}

    # When b leaves, a is told and may take everything back.
    coordinator.leave("c", "t", "b")
    assert coordinator.targets("c", "t", "a") == {0, 1}
    assert coordinator.try_acquire("c", "t", "a", partition)
    coordinator.leave("c", "t", "a")
    assert coordinator.holders("c", "t") == {}


def test_partitions_added_to_the_topic_are_balanced_too() -> None:
    coordinator = ReadCoordinator()
    woken: list[str] = []
    coordinator.join("c", "t", 2, "a", None, lambda: woken.append("a"))
    coordinator.join("c", "t", 2, "b", None, lambda: woken.append("b"))
    assert coordinator.targets("c", "t", "a") | coordinator.targets("c", "t", "b") == {0, 1}
    woken.clear()
    coordinator.grown("c", "t", 4)
    assert sorted(woken) == ["a", "b"]
    a, b = coordinator.targets("c", "t", "a"), coordinator.targets("c", "t", "b")
    assert a | b == {0, 1, 2, 3} and len(a) == len(b) == 2
    woken.clear()
    coordinator.grown("c", "t", 4)  # nothing new: nobody is disturbed
    assert woken == []
    # A reader joining with the count it read at its start keeps what the group knows.
    coordinator.join("c", "t", 2, "d", None, lambda: None)
    targets = [coordinator.targets("c", "t", m) for m in ("a", "b", "d")]
    assert set().union(*targets) == {0, 1, 2, 3}
