"""Randomised, deterministic cluster runs checking Raft's safety and liveness properties.

A failure message starts with the seed; replay it with `run_one(seed, ...)` and the same
arguments (the test id shows them; for the quick seeds, `run_quick(seed)`). The default
suite runs a few dozen long seeds plus 2,000 short ones (a few fault events each, many
starting states); `-m slow` runs hundreds more, longer.
"""

from __future__ import annotations

import pytest

from tests.sim.cluster import FaultProfile, Simulation
from vdl.consensus import RaftOptions

SLOW_SEEDS = range(1000, 1300)
PLAIN = RaftOptions(
    election_tick=10,
    heartbeat_tick=2,
    max_inflight=4,
    max_append_bytes=256,
    pre_vote=False,
    check_quorum=False,
)


def run_one(
    seed: int,
    voters: int,
    *,
    spares: int = 0,
    membership: bool = False,
    chaos_time: int = 30_000,
    options: RaftOptions | None = None,
) -> Simulation:
    faults = FaultProfile(fault_every=150, membership_weight=3 if membership else 0)
    sim = Simulation(seed, voters, n_spares=spares, faults=faults, options=options)
    sim.run(chaos_time=chaos_time, heal_time=10_000)
    return sim


QUICK_SEEDS = range(100_000, 102_000)
QUICK_CHUNK = 50


def run_quick(seed: int) -> Simulation:
    """A short chaos run; the seed also picks the shape (3 or 5 voters, membership
    changes, or neither pre-vote nor check-quorum) and whether the workload is mostly idle
    (groups quiesce, and crash, split and wake while quiesced)."""
    shape = seed % 4
    faults = FaultProfile(
        fault_every=100,
        membership_weight=3 if shape == 2 else 0,
        idle_chance=0.3 if seed % 3 == 0 else 0.05,
    )
    sim = Simulation(
        seed,
        5 if shape == 1 else 3,
        n_spares=2 if shape == 2 else 0,
        faults=faults,
        options=PLAIN if shape == 3 else None,
    )
    sim.run(chaos_time=2_000, heal_time=10_000)
    return sim


@pytest.mark.parametrize("start", range(QUICK_SEEDS.start, QUICK_SEEDS.stop, QUICK_CHUNK))
def test_quick_seeds(start: int) -> None:
    # Chunks keep the per-test overhead of pytest small next to 2,000 short runs.
    for seed in range(start, start + QUICK_CHUNK):
        run_quick(seed)


@pytest.mark.parametrize("seed", range(16))
def test_three_nodes(seed: int) -> None:
    run_one(seed, 3)


@pytest.mark.parametrize("seed", range(8))
def test_five_nodes(seed: int) -> None:
    run_one(seed, 5)


@pytest.mark.parametrize("seed", range(8))
def test_membership_changes(seed: int) -> None:
    run_one(seed, 3, spares=2, membership=True)


@pytest.mark.parametrize("seed", range(4))
def test_without_pre_vote_and_check_quorum(seed: int) -> None:
    run_one(seed, 3, options=PLAIN)


def run_idle(seed: int, voters: int, *, chaos_time: int = 30_000) -> Simulation:
    """Mostly idle: the group quiesces often, and crashes, partitions, transfers and
    membership changes find it quiesced; proposals race the wake-ups."""
    faults = FaultProfile(
        fault_every=400, idle_chance=0.4, idle_time=800, membership_weight=2, newest_leader=True
    )
    sim = Simulation(seed, voters, n_spares=1, faults=faults)
    sim.run(chaos_time=chaos_time, heal_time=10_000)
    return sim


@pytest.mark.parametrize("seed", range(8))
def test_quiescent_groups(seed: int) -> None:
    sim = run_idle(seed, 3 + 2 * (seed % 2))
    assert sim.stats["quiesced"] > 10 and sim.stats["wakes"] > 0


def test_same_seed_replays_exactly() -> None:
    a = run_one(7, 3, spares=2, membership=True)
    b = run_one(7, 3, spares=2, membership=True)
    assert a.trace == b.trace
    assert a.checker.committed == b.checker.committed
    assert (a.now, a.stats) == (b.now, b.stats)


def test_the_faults_actually_happen() -> None:
    sim = run_one(3, 5)
    assert sim.stats["crashes"] > 10 and sim.stats["partitions"] > 10
    assert len(sim.checker.leaders) > 3 and len(sim.acked) > 100


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_three_nodes_soak(seed: int) -> None:
    run_one(seed, 3, chaos_time=100_000)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_five_nodes_soak(seed: int) -> None:
    run_one(seed, 5, chaos_time=100_000)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_membership_soak(seed: int) -> None:
    run_one(seed, 3, spares=2, membership=True, chaos_time=100_000)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_quiescent_groups_soak(seed: int) -> None:
    run_idle(seed, 3 + 2 * (seed % 2), chaos_time=100_000)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_without_pre_vote_and_check_quorum_soak(seed: int) -> None:
    run_one(seed, 3, options=PLAIN, chaos_time=100_000)
