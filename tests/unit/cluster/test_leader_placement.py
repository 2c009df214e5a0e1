"""Leaders in the preferred data centre: the decision (every small case), the loop on an
in-memory three-node group (MockClock), and the pieces that carry the labels (the node's
--dc flag, the registration command, the topic config)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest
import trio
import trio.testing

from tests.unit.consensus import driver_cluster
from tests.unit.consensus.driver_cluster import DriverCluster
from vdl.broker.topics import Topic, topic_config_specs, validate_configs
from vdl.cluster.metadata import MetadataState
from vdl.cluster.placement_leader import (
    PREFERRED_DC,
    LeaderPlacement,
    LedGroup,
    preferred_dc,
)
from vdl.cluster.preferred_leader import transfer_target
from vdl.config import ConfigError, load_config
from vdl.consensus.driver import GroupDriver
from vdl.consensus.errors import NotLeader

# ---- the decision ----------------------------------------------------------------------


def _target(
    leader: int = 1,
    preferred: str = "a",
    dcs: Mapping[int, str] | None = None,
    voters: frozenset[int] = frozenset({1, 2, 3}),
    in_contact: frozenset[int] | None = None,
    match: Mapping[int, int] | None = None,
    commit_index: int = 10,
) -> int | None:
    return transfer_target(
        leader=leader,
        preferred=preferred,
        dcs={1: "b", 2: "b", 3: "a"} if dcs is None else dcs,
        voters=voters,
        in_contact=voters if in_contact is None else in_contact,
        match={n: commit_index for n in voters} if match is None else match,
        commit_index=commit_index,
    )


def test_moves_to_a_healthy_voter_of_the_preferred_dc() -> None:
    assert _target() == 3


def test_no_preferred_dc_means_no_move() -> None:
    assert _target(preferred="") is None


def test_a_leader_in_the_preferred_dc_never_moves() -> None:
    # Even when another preferred voter is further ahead.
    dcs = {1: "a", 2: "a", 3: "b"}
    assert _target(dcs=dcs, match={1: 10, 2: 12, 3: 12}) is None


def test_unlabelled_nodes_are_in_no_dc() -> None:
    assert _target(dcs={1: "b"}) is None
    assert _target(leader=2, dcs={1: "a"}) == 1
    # An unlabelled leader of a topic that prefers "" is not a case: "" means no preference.
    assert _target(preferred="", dcs={}) is None


def test_the_target_must_be_in_contact() -> None:
    assert _target(in_contact=frozenset({1, 2})) is None


def test_the_target_must_hold_every_committed_entry() -> None:
    assert _target(match={2: 10, 3: 9}) is None
    assert _target(match={2: 10}) is None  # no progress known: not caught up
    assert _target(match={2: 10, 3: 10}) == 3


def test_only_voters_are_candidates() -> None:
    # A learner of the preferred DC (a replica still joining) cannot be elected.
    assert _target(voters=frozenset({1, 2}), in_contact=frozenset({1, 2, 3})) is None


def test_the_most_caught_up_then_the_lowest_id_is_picked() -> None:
    dcs = {1: "b", 2: "a", 3: "a", 4: "a", 5: "b"}
    voters = frozenset({1, 2, 3, 4, 5})
    assert _target(dcs=dcs, voters=voters, match={2: 10, 3: 11, 4: 11}) == 3
    assert _target(dcs=dcs, voters=voters, match={2: 10, 3: 10, 4: 10}) == 2
    assert _target(dcs=dcs, voters=voters, match={2: 9, 3: 10, 4: 10}) == 3


def _eligible(
    leader: int,
    preferred: str,
    dcs: Mapping[int, str],
    voters: frozenset[int],
    contact: frozenset[int],
    match: Mapping[int, int],
    commit: int,
) -> set[int]:
    return {
        n
        for n in voters - {leader}
        if dcs.get(n, "") == preferred and n in contact and match.get(n, 0) >= commit
    }


def _cases() -> Iterator[tuple[int, str, dict[int, str], frozenset[int], dict[int, int]]]:
    nodes = (1, 2, 3)
    for labels in itertools.product(("", "a", "b"), repeat=3):
        dcs = {n: label for n, label in zip(nodes, labels, strict=True) if label}
        for contact_bits, match_values in itertools.product(
            itertools.product((False, True), repeat=3), itertools.product((4, 5, 6), repeat=3)
        ):
            contact = frozenset(n for n, on in zip(nodes, contact_bits, strict=True) if on)
            match = dict(zip(nodes, match_values, strict=True))
            for leader, preferred in itertools.product(nodes, ("", "a", "b")):
                yield leader, preferred, dcs, contact, match


def test_every_small_case_obeys_the_rules() -> None:
    """Three voters, every labelling, contact set, progress, leader and preference."""
    voters = frozenset({1, 2, 3})
    commit = 5
    seen_moves = seen_stays = 0
    for leader, preferred, dcs, contact, match in _cases():
        target = transfer_target(
            leader=leader,
            preferred=preferred,
            dcs=dcs,
            voters=voters,
            in_contact=contact | {leader},
            match=match,
            commit_index=commit,
        )
        eligible = _eligible(leader, preferred, dcs, voters, contact, match, commit)
        if not preferred or dcs.get(leader, "") == preferred or not eligible:
            assert target is None, (leader, preferred, dcs, contact, match)
            seen_stays += 1
        else:
            assert target in eligible
            assert match[target] == max(match[n] for n in eligible)
            assert target == min(n for n in eligible if match[n] == match[target])
            seen_moves += 1
    assert seen_moves and seen_stays


def test_the_preference_comes_from_the_config_or_a_ydb_attribute() -> None:
    def topic(configs: dict[str, str], attributes: dict[str, str]) -> Topic:
        return Topic("t", 1, uuid.uuid4(), configs, attributes=attributes)

    assert preferred_dc(topic({}, {})) == ""
    assert preferred_dc(topic({PREFERRED_DC: "a"}, {})) == "a"
    assert preferred_dc(topic({}, {PREFERRED_DC: "b"})) == "b"
    assert preferred_dc(topic({PREFERRED_DC: "a"}, {PREFERRED_DC: "b"})) == "a"


# ---- the rate limit, with a stand-in driver ---------------------------------------------------


@dataclass
class _FakeCore:
    transfers: list[int] = field(default_factory=list)
    refuse: bool = False

    def transfer_leader(self, target: int) -> None:
        if self.refuse:
            raise NotLeader(0)
        self.transfers.append(target)


@dataclass
class _FakeDriver:
    group_id: int = 5
    node_id: int = 1
    is_leader: bool = True
    voters: frozenset[int] = frozenset({1, 2, 3})
    commit_index: int = 10
    core: _FakeCore = field(default_factory=_FakeCore)

    def in_contact(self) -> frozenset[int]:
        return self.voters

    def settled(self) -> tuple[int, int] | None:
        return None  # awake: looked at on every pass

    def match(self) -> dict[int, int]:
        return {2: 10, 3: 10}

    def transfer_leader(self, target: int) -> None:
        self.core.transfer_leader(target)


def _placement(drivers: list[_FakeDriver], retry_s: float = 3.0) -> LeaderPlacement:
    return LeaderPlacement(
        lambda: [LedGroup(cast(GroupDriver, d), "a") for d in drivers],
        lambda: {1: "b", 2: "b", 3: "a"},
        retry_s=retry_s,
    )


def test_one_attempt_per_group_per_retry_interval() -> None:
    first, second = _FakeDriver(group_id=5), _FakeDriver(group_id=6)
    placement = _placement([first, second])
    assert placement.step(100.0) == [(5, 3), (6, 3)]
    # The transfer did not happen (still leader): no new attempt until the interval passed.
    assert placement.step(101.0) == []
    assert placement.step(102.9) == []
    assert placement.step(103.0) == [(5, 3), (6, 3)]
    assert first.core.transfers == [3, 3] and placement.transfers == 4


def test_followers_and_refusals_start_nothing() -> None:
    follower = _FakeDriver(is_leader=False)
    refusing = _FakeDriver(group_id=6, core=_FakeCore(refuse=True))
    placement = _placement([follower, refusing])
    assert placement.step(0.0) == []
    assert placement.transfers == 0 and follower.core.transfers == []
    # A refused attempt still counts against the interval.
    refusing.core.refuse = False
    assert placement.step(1.0) == []
    assert placement.step(3.0) == [(6, 3)]


# ---- the loop on a real in-memory group -----------------------------------------------------

DCS = {1: "b", 2: "b", 3: "a"}


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.002)


def _placements(cluster: DriverCluster) -> dict[int, LeaderPlacement]:
    """One loop per node, as each node's cluster manager runs it."""

    def led_by(node: driver_cluster.TestNode) -> Callable[[], list[LedGroup]]:
        # node.driver is read at each pass: a restarted node has a new driver.
        return lambda: [] if node.driver is None else [LedGroup(node.driver, "a")]

    return {
        n: LeaderPlacement(led_by(node), lambda: DCS, check_s=0.2, retry_s=2.0)
        for n, node in cluster.nodes.items()
    }


async def test_leadership_goes_to_the_preferred_dc_and_comes_back_after_a_restart(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    cluster = DriverCluster(tmp_path)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery)
        # Node 3 (dc a) starts as a follower that cannot win the first election.
        cluster.net.isolated.add(3)
        first = await cluster.wait_leader()
        assert first.node_id != 3
        for i in range(5):
            await cluster.propose(b"before-%d" % i)
        placements = _placements(cluster)
        for placement in placements.values():
            nursery.start_soon(placement.run)
        await trio.sleep(3)
        assert sum(p.transfers for p in placements.values()) == 0  # 3 is out of contact
        cluster.net.isolated.discard(3)
        await cluster.wait_leader_is(3, timeout=5)
        index = await cluster.propose(b"after-move")
        await cluster.wait_applied(index, [1, 2, 3])
        # Settled: nobody moves it again.
        moved = sum(p.transfers for p in placements.values())
        await trio.sleep(10)
        assert sum(p.transfers for p in placements.values()) == moved == 1
        assert [n.node_id for n in cluster.leaders()] == [3]

        # The preferred node dies: a dc-b node leads, and keeps leading while 3 is away.
        await cluster.nodes[3].stop()
        fallback = await cluster.wait_leader()
        assert fallback.node_id in (1, 2)
        for i in range(5):
            await cluster.propose(b"without-3-%d" % i)
        await trio.sleep(3)
        assert fallback.driver is not None and fallback.driver.is_leader
        # Back (with a log to catch up on): leadership returns to it.
        await cluster.nodes[3].start(nursery)
        await cluster.wait_leader_is(3, timeout=10)
        index = await cluster.propose(b"home-again")
        await cluster.wait_applied(index, [1, 2, 3])
        # By a transfer, not an election it won by chance (the leader held its lease).
        assert sum(p.transfers for p in placements.values()) == 2
        data = cluster.nodes[3].machine.data()
        assert len([d for d in data if b"without-3" in d]) == 5
        await cluster.stop()
        nursery.cancel_scope.cancel()


# ---- the labels ---------------------------------------------------------------------------------


def test_dc_flag_environment_and_default() -> None:
    assert load_config([], {}).dc == ""
    assert load_config(["--dc", "eu-west"], {}).dc == "eu-west"
    assert load_config([], {"VDL_DC": "a"}).dc == "a"
    with pytest.raises(ConfigError, match="dc"):
        load_config(["--dc", "no spaces"], {})


def test_registrations_with_and_without_a_dc_replay() -> None:
    state = MetadataState({1: ("h", 1), 2: ("h", 2)})
    # As logged before labels existed: no "dc" key.
    assert state.apply({"op": "register", "node": 1, "kafka": "h:9", "grpc": "h:8"}).error == 0
    assert (
        state.apply({"op": "register", "node": 2, "kafka": "h:7", "grpc": "h:6", "dc": "a"}).error
        == 0
    )
    assert state.nodes[1].dc == "" and state.nodes[2].dc == "a"
    assert state.nodes[2].kafka == ("h", 7)


def test_preferred_dc_is_a_topic_config() -> None:
    specs = topic_config_specs(
        retention_ms=1, retention_bytes=-1, segment_bytes=1024, max_message_bytes=1024
    )
    assert specs[PREFERRED_DC].default == ""
    validate_configs(specs, {PREFERRED_DC: "a"})
