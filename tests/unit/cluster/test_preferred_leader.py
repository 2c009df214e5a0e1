"""Leader balancing: the preferred leader of an assignment, the decision to hand over (every
small case, and that no sequence of moves can cycle), first replicas rotating over the
nodes, the loop on stand-in drivers and on an in-memory group, and the node settings."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest
import trio
import trio.testing

from tests.unit.consensus import driver_cluster
from tests.unit.consensus.driver_cluster import DriverCluster
from vdl.cluster.placement import assign_replicas
from vdl.cluster.placement_leader import LeaderPlacement, LedGroup
from vdl.cluster.preferred_leader import leader_target, preferred_leader, rank
from vdl.config import ConfigError, load_config
from vdl.consensus.driver import GroupDriver

# ---- the preferred leader -------------------------------------------------------------------


def test_the_first_replica_is_preferred() -> None:
    assert preferred_leader((2, 3, 1), "", {}) == 2
    assert preferred_leader((), "", {}) is None
    assert preferred_leader((), "a", {1: "a"}) is None


def test_with_a_preferred_dc_the_first_replica_inside_it_is_preferred() -> None:
    dcs = {1: "a", 2: "b", 3: "a"}
    assert preferred_leader((2, 3, 1), "a", dcs) == 3
    assert preferred_leader((2, 1, 3), "a", dcs) == 1
    assert preferred_leader((2, 1, 3), "b", dcs) == 2
    # No replica in the preferred DC: the assignment's order decides.
    assert preferred_leader((2, 1, 3), "c", dcs) == 2


# ---- the decision ---------------------------------------------------------------------------


def _target(
    leader: int = 2,
    replicas: tuple[int, ...] = (1, 2, 3),
    preferred: str = "",
    dcs: Mapping[int, str] | None = None,
    voters: frozenset[int] = frozenset({1, 2, 3}),
    in_contact: frozenset[int] | None = None,
    match: Mapping[int, int] | None = None,
    commit_index: int = 10,
) -> int | None:
    return leader_target(
        leader=leader,
        replicas=replicas,
        preferred=preferred,
        dcs={} if dcs is None else dcs,
        voters=voters,
        in_contact=voters if in_contact is None else in_contact,
        match={n: commit_index for n in voters} if match is None else match,
        commit_index=commit_index,
    )


def test_a_healthy_preferred_leader_takes_over() -> None:
    assert _target(leader=2) == 1
    assert _target(leader=3) == 1
    assert _target(leader=1, replicas=(3, 1, 2)) == 3


def test_the_preferred_leader_never_moves() -> None:
    assert _target(leader=1) is None
    # Not even towards a replica further ahead.
    assert _target(leader=1, match={1: 10, 2: 14, 3: 14}) is None


def test_a_preferred_leader_out_of_contact_waits() -> None:
    assert _target(leader=2, in_contact=frozenset({2, 3})) is None


def test_a_preferred_leader_missing_committed_entries_waits() -> None:
    assert _target(leader=2, match={1: 9, 3: 10}) is None
    assert _target(leader=2, match={3: 10}) is None  # no progress known: not caught up
    assert _target(leader=2, match={1: 10, 3: 10}) == 1
    assert _target(leader=2, match={1: 11, 3: 10}) == 1


def test_a_preferred_leader_that_is_no_voter_waits() -> None:
    # Just assigned, still a learner catching up: it cannot win an election yet.
    assert _target(leader=2, replicas=(4, 2, 3), voters=frozenset({1, 2, 3})) is None


def test_without_an_assignment_only_the_dc_rule_moves_leaders() -> None:
    # The metadata group, and partitions with balancing off.
    assert _target(leader=2, replicas=()) is None
    assert _target(leader=2, replicas=(), preferred="a", dcs={3: "a"}) == 3


def test_the_dc_rule_wins_over_the_assignment_order() -> None:
    dcs = {1: "b", 2: "b", 3: "a", 4: "a"}
    voters = frozenset({1, 2, 3, 4})
    # Node 1 is the first replica but outside the preferred DC; 4 is the first inside it.
    assert _target(leader=1, replicas=(1, 4, 3, 2), preferred="a", dcs=dcs, voters=voters) == 4
    assert _target(leader=3, replicas=(1, 4, 3, 2), preferred="a", dcs=dcs, voters=voters) == 4
    assert _target(leader=4, replicas=(1, 4, 3, 2), preferred="a", dcs=dcs, voters=voters) is None


def test_an_unhealthy_preferred_leader_leaves_the_dc_rule_to_act() -> None:
    dcs = {1: "b", 2: "b", 3: "a", 4: "a"}
    voters = frozenset({1, 2, 3, 4})
    away = frozenset({1, 2, 3})  # 4, the preferred leader, is out of contact
    replicas = (4, 3, 1, 2)
    # Outside the DC: any healthy voter inside it will do.
    assert _target(1, replicas, "a", dcs, voters, in_contact=away) == 3
    # Inside it already: stay until the preferred leader is back.
    assert _target(3, replicas, "a", dcs, voters, in_contact=away) is None


def test_leadership_never_leaves_the_preferred_dc() -> None:
    # No replica is in dc a, so the first replica is preferred, but the leader is a voter
    # in dc a (the assignment is being changed away from it): it stays.
    dcs = {1: "b", 2: "b", 3: "a"}
    assert _target(leader=3, replicas=(1, 2), preferred="a", dcs=dcs) is None
    assert _target(leader=2, replicas=(1, 2), preferred="a", dcs=dcs) == 1


def _healthy(
    node: int, voters: frozenset[int], contact: frozenset[int], match: Mapping[int, int]
) -> bool:
    return node in voters and node in contact and match.get(node, 0) >= 5


Case = tuple[int, tuple[int, ...], str, dict[int, str], frozenset[int], dict[int, int]]


def _cases() -> Iterator[Case]:
    nodes = (1, 2, 3)
    orders = [(), *itertools.permutations(nodes), (1, 2), (3, 1)]
    for labels in itertools.product(("", "a", "b"), repeat=3):
        dcs = {n: label for n, label in zip(nodes, labels, strict=True) if label}
        for contact_bits, match_values in itertools.product(
            itertools.product((False, True), repeat=3), itertools.product((4, 5), repeat=3)
        ):
            contact = frozenset(n for n, on in zip(nodes, contact_bits, strict=True) if on)
            match = dict(zip(nodes, match_values, strict=True))
            for leader, replicas, preferred in itertools.product(nodes, orders, ("", "a")):
                yield leader, replicas, preferred, dcs, contact, match


def test_every_small_case_obeys_the_rules() -> None:
    """Three voters, every labelling, contact set, progress, leader, assignment order and
    preference: a move goes to a healthy voter and strictly improves the rank (so moves
    cannot cycle); a healthy preferred leader is always the one moved to; a leader already
    preferred, or inside the preferred DC with the preferred leader unhealthy, stays."""
    voters = frozenset({1, 2, 3})
    moves = stays = 0
    for leader, replicas, preferred, dcs, contact, match in _cases():
        contact = contact | {leader}
        target = leader_target(
            leader=leader,
            replicas=replicas,
            preferred=preferred,
            dcs=dcs,
            voters=voters,
            in_contact=contact,
            match=match,
            commit_index=5,
        )
        best = preferred_leader(replicas, preferred, dcs)
        case = (leader, replicas, preferred, dcs, contact, match, target)
        inside = bool(preferred) and dcs.get(leader, "") == preferred
        if target is None:
            stays += 1
            if best is not None and best != leader and _healthy(best, voters, contact, match):
                # Only a preferred leader outside the DC may be refused, by a leader inside.
                assert inside and dcs.get(best, "") != preferred, case
            continue
        moves += 1
        assert target != leader and _healthy(target, voters, contact, match), case
        assert rank(target, best, preferred, dcs) < rank(leader, best, preferred, dcs), case
        if best is not None and best != leader and _healthy(best, voters, contact, match):
            assert target == best, case
        if best is None or not _healthy(best, voters, contact, match):
            # The DC rule alone: out of the DC, into it.
            assert not inside and dcs.get(target, "") == preferred, case
    assert moves and stays


def test_with_everyone_healthy_leadership_settles_on_the_preferred_leader() -> None:
    voters = frozenset({1, 2, 3})
    match = {1: 5, 2: 5, 3: 5}
    for replicas in itertools.permutations((1, 2, 3)):
        for labels in itertools.product(("", "a", "b"), repeat=3):
            dcs = {n: label for n, label in zip((1, 2, 3), labels, strict=True) if label}
            for preferred, start in itertools.product(("", "a"), (1, 2, 3)):
                leader, hops = start, 0
                while True:
                    target = leader_target(
                        leader=leader,
                        replicas=replicas,
                        preferred=preferred,
                        dcs=dcs,
                        voters=voters,
                        in_contact=voters,
                        match=match,
                        commit_index=5,
                    )
                    if target is None:
                        break
                    leader, hops = target, hops + 1
                assert hops <= 1
                assert leader == preferred_leader(replicas, preferred, dcs)


# ---- placement spreads the preferred leaders --------------------------------------------------


@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("replication_factor", [1, 2, 3])
def test_first_replicas_rotate_over_the_nodes(nodes: int, replication_factor: int) -> None:
    if replication_factor > nodes:
        return
    ids = [10 * n for n in range(1, nodes + 1)]
    for topic in ("a", "orders", "t-17"):
        for partitions in (1, nodes, 2 * nodes, 2 * nodes + 1, 50):
            lists = assign_replicas(topic, partitions, replication_factor, ids)
            firsts = [replicas[0] for replicas in lists]
            counts = [firsts.count(n) for n in ids]
            assert max(counts) - min(counts) <= 1, (topic, partitions, counts)
            assert all(len(set(r)) == replication_factor for r in lists)


def test_six_partitions_on_three_nodes_prefer_each_node_twice() -> None:
    firsts = [r[0] for r in assign_replicas("balanced", 6, 3, [1, 2, 3])]
    assert sorted(firsts) == [1, 1, 2, 2, 3, 3]


# ---- the loop, with stand-in drivers ----------------------------------------------------------


@dataclass
class _FakeDriver:
    group_id: int = 5
    node_id: int = 2
    is_leader: bool = True
    voters: frozenset[int] = frozenset({1, 2, 3})
    commit_index: int = 10
    contact: frozenset[int] = frozenset({1, 2, 3})
    transfers: list[int] = field(default_factory=list)

    def in_contact(self) -> frozenset[int]:
        return self.contact

    def settled(self) -> tuple[int, int] | None:
        return None  # awake: looked at on every pass

    def match(self) -> dict[int, int]:
        return {1: 10, 3: 10}

    def transfer_leader(self, target: int) -> None:
        self.transfers.append(target)


def _loop(groups: list[tuple[_FakeDriver, str, tuple[int, ...]]]) -> LeaderPlacement:
    return LeaderPlacement(
        lambda: [LedGroup(cast(GroupDriver, d), p, r) for d, p, r in groups],
        lambda: {1: "b", 2: "b", 3: "a"},
        retry_s=3.0,
    )


def test_the_loop_moves_each_group_to_its_preferred_leader_once_per_interval() -> None:
    first, second, placed = _FakeDriver(group_id=5), _FakeDriver(group_id=6), _FakeDriver(7)
    unassigned = _FakeDriver(group_id=8)
    loop = _loop([(first, "", (1, 2, 3)), (second, "", (3, 1, 2)), (placed, "", (2, 3, 1))])
    loop_dc = _loop([(unassigned, "a", ())])
    assert loop.step(50.0) == [(5, 1), (6, 3)]
    assert loop_dc.step(50.0) == [(8, 3)]  # group 0's way: the DC rule only
    # Still leading (the hand-over did not happen): nothing until the interval is over.
    assert loop.step(51.0) == []
    assert loop.step(52.9) == []
    assert loop.step(53.0) == [(5, 1), (6, 3)]
    assert first.transfers == [1, 1] and second.transfers == [3, 3] and placed.transfers == []


def test_the_loop_leaves_a_group_whose_preferred_leader_is_away() -> None:
    away = _FakeDriver(contact=frozenset({2, 3}))
    loop = _loop([(away, "", (1, 2, 3))])
    assert loop.step(0.0) == []
    away.contact = frozenset({1, 2, 3})
    # Nothing was attempted, so nothing throttles the move once it is back.
    assert loop.step(0.5) == [(5, 1)]


# ---- the loop on a real in-memory group -----------------------------------------------------


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.002)


def _loops(cluster: DriverCluster, replicas: tuple[int, ...]) -> dict[int, LeaderPlacement]:
    """One loop per node, as each node's cluster manager runs it."""

    def led_by(node: driver_cluster.TestNode) -> Callable[[], list[LedGroup]]:
        # node.driver is read at each pass: a restarted node has a new driver.
        return lambda: [] if node.driver is None else [LedGroup(node.driver, "", replicas)]

    return {
        n: LeaderPlacement(led_by(node), dict, check_s=0.2, retry_s=2.0)
        for n, node in cluster.nodes.items()
    }


async def test_leadership_goes_back_to_the_preferred_replica_after_a_restart(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    cluster = DriverCluster(tmp_path)
    loops = _loops(cluster, (2, 3, 1))
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery)
        for loop in loops.values():
            nursery.start_soon(loop.run)
        await cluster.wait_leader_is(2, timeout=10)
        await cluster.propose(b"first")
        # The preferred replica dies: another leads, and keeps leading while it is away.
        await cluster.nodes[2].stop()
        fallback = await cluster.wait_leader()
        assert fallback.node_id in (1, 3)
        for i in range(5):
            await cluster.propose(b"without-2-%d" % i)
        moved = sum(loop.transfers for loop in loops.values())
        await cluster.nodes[2].start(nursery)
        await cluster.wait_leader_is(2, timeout=10)
        index = await cluster.propose(b"back")
        await cluster.wait_applied(index, [1, 2, 3])
        # By a transfer, not an election it won by chance.
        assert sum(loop.transfers for loop in loops.values()) > moved
        await cluster.stop()
        nursery.cancel_scope.cancel()


# ---- the settings -----------------------------------------------------------------------------


def test_leader_rebalance_flag_environment_file_and_default(tmp_path: Path) -> None:
    assert load_config([], {}).leader_rebalance is True
    assert load_config(["--leader-rebalance", "false"], {}).leader_rebalance is False
    assert load_config([], {"VDL_LEADER_REBALANCE": "no"}).leader_rebalance is False
    toml = tmp_path / "node.toml"
    toml.write_text("leader-rebalance = false\n")
    assert load_config(["--config", str(toml)], {}).leader_rebalance is False
    assert load_config(["--config", str(toml), "--leader-rebalance", "true"], {}).leader_rebalance
    with pytest.raises(ConfigError, match="leader-rebalance"):
        load_config(["--leader-rebalance", "maybe"], {})


def test_metadata_dc_flag_environment_and_default() -> None:
    assert load_config([], {}).metadata_dc == ""
    assert load_config(["--metadata-dc", "eu-west"], {}).metadata_dc == "eu-west"
    assert load_config([], {"VDL_METADATA_DC": "a"}).metadata_dc == "a"
    with pytest.raises(ConfigError, match="metadata-dc"):
        load_config(["--metadata-dc", "no spaces"], {})
