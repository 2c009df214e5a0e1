from __future__ import annotations

import pytest

from vdl.backends.api import Entry, EntryType
from vdl.consensus import ConfChange, ConfChangeType, Config, ConfigChangeRejected, Role
from vdl.consensus.membership import ConfigHistory, decode_config, encode_config
from vdl.consensus.messages import AppendEntries

from .helpers import MemStorage, Net, entries_of, make_node, role

ADD, PROMOTE, REMOVE = ConfChangeType.ADD_LEARNER, ConfChangeType.PROMOTE, ConfChangeType.REMOVE


def _with_spare(net: Net, node_id: int) -> None:
    storage = MemStorage()
    net.add(make_node(node_id, [1, 2, 3], storage), storage)


def test_config_payload_round_trip() -> None:
    config = Config(frozenset({3, 1, 2}), frozenset({9}))
    data = encode_config(config)
    assert decode_config(data) == config
    with pytest.raises(ValueError):
        decode_config(data[:-1])


def test_add_learner_catch_up_promote() -> None:
    net = Net([1, 2, 3])
    _with_spare(net, 4)
    leader = net.elect(1)
    leader.propose([b"a", b"b"])
    net.settle()
    index = leader.propose_config_change(ConfChange(ADD, 4))
    # In force as soon as appended, before it commits.
    assert leader.config.learners == {4}
    assert leader.commit_index < index
    net.settle()
    net.tick(1)
    learner = net.nodes[4]
    assert learner.config.learners == {4} and learner.commit_index == leader.commit_index
    assert learner.role is Role.FOLLOWER
    # Learners never vote, so they do not count towards commits.
    assert leader.config.quorum() == 2
    leader.propose_config_change(ConfChange(PROMOTE, 4))
    net.settle()
    net.tick(1)
    assert leader.config.voters == {1, 2, 3, 4}
    assert all(n.config.voters == {1, 2, 3, 4} for n in net.nodes.values())
    # Now three of four are needed.
    net.down.update({2, 3})
    before = leader.commit_index
    leader.propose([b"needs three"])
    net.settle()
    assert leader.commit_index == before


def test_promotion_refused_until_the_learner_has_caught_up() -> None:
    net = Net([1, 2, 3])
    _with_spare(net, 4)
    leader = net.elect(1)
    net.down.add(4)
    leader.propose_config_change(ConfChange(ADD, 4))
    net.settle()
    with pytest.raises(ConfigChangeRejected):
        leader.propose_config_change(ConfChange(PROMOTE, 4))


def test_only_one_change_pending() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    net.down.update({2, 3})
    leader.propose_config_change(ConfChange(ADD, 4))
    with pytest.raises(ConfigChangeRejected):
        leader.propose_config_change(ConfChange(ADD, 5))
    with pytest.raises(ConfigChangeRejected):
        leader.propose_config_change(ConfChange(PROMOTE, 9))


def test_remove_follower_and_leader_steps_down_after_removing_itself() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    leader.propose_config_change(ConfChange(REMOVE, 3))
    net.settle()
    assert leader.config.voters == {1, 2}
    assert 3 not in leader.progress
    net.tick(1)
    leader.propose_config_change(ConfChange(REMOVE, 1))
    assert leader.role is Role.LEADER  # manages the change it is not part of
    net.settle()
    net.tick(1)
    assert role(leader) is Role.FOLLOWER
    net.tick(30)
    assert net.nodes[2].role is Role.LEADER and net.nodes[2].config.voters == {2}


def test_truncated_config_entry_restores_the_previous_config() -> None:
    follower = make_node(2, [1, 2, 3], MemStorage(entries_of(1)))
    new_config = Config(frozenset({1, 2, 3}), frozenset({4}))
    conf_entry = Entry(1, 2, EntryType.CONFIG, encode_config(new_config))
    follower.step(AppendEntries(1, 2, 1, 1, 1, 0, (conf_entry,)))
    assert follower.config == new_config
    # A new leader of term 2 overwrites index 2.
    follower.step(AppendEntries(3, 2, 2, 1, 1, 0, tuple(entries_of(2, start=2))))
    assert follower.config == Config(frozenset({1, 2, 3}))


def test_config_history_lookup() -> None:
    h = ConfigHistory(Config(frozenset({1})), 0)
    h.append(5, Config(frozenset({1}), frozenset({2})))
    h.append(9, Config(frozenset({1, 2})))
    assert h.at(4).voters == {1} and h.at(5).learners == {2} and h.at(20).voters == {1, 2}
    assert h.truncate(9) and h.current.learners == {2}


def test_restart_replays_uncommitted_config_entries() -> None:
    config = Config(frozenset({1, 2, 3}), frozenset({4}))
    log = [*entries_of(1), Entry(1, 2, EntryType.CONFIG, encode_config(config))]
    node = make_node(1, [1, 2, 3], MemStorage(log))
    assert node.config == config
