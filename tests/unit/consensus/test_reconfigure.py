"""The reconfiguration step: learner first, promote once caught up, remove last."""

from __future__ import annotations

from vdl.cluster.reconfigure import next_change
from vdl.consensus.membership import ConfChange, ConfChangeType, Config

ADD, PROMOTE, REMOVE = ConfChangeType.ADD_LEARNER, ConfChangeType.PROMOTE, ConfChangeType.REMOVE


def test_nothing_to_do_when_the_members_are_the_wanted_ones() -> None:
    assert next_change(Config(frozenset({1, 2, 3})), frozenset({1, 2, 3}), {}, 10) is None


def test_a_replacement_is_added_caught_up_and_promoted_before_the_removal() -> None:
    wanted = frozenset({1, 2, 4})
    config = Config(frozenset({1, 2, 3}))
    assert next_change(config, wanted, {}, 10) == ConfChange(ADD, 4)
    config = Config(frozenset({1, 2, 3}), frozenset({4}))
    assert next_change(config, wanted, {2: 10, 3: 10, 4: 5}, 10) is None  # still behind
    assert next_change(config, wanted, {4: 10}, 10) == ConfChange(PROMOTE, 4)
    config = Config(frozenset({1, 2, 3, 4}))
    assert next_change(config, wanted, {}, 10) == ConfChange(REMOVE, 3)


def test_unwanted_learners_go_and_the_last_voter_stays() -> None:
    assert next_change(Config(frozenset({1}), frozenset({5})), frozenset({1}), {}, 0) == ConfChange(
        REMOVE, 5
    )
    assert next_change(Config(frozenset({1})), frozenset({2}), {}, 0) == ConfChange(ADD, 2)
    assert next_change(Config(frozenset({1})), frozenset(), {}, 0) is None
