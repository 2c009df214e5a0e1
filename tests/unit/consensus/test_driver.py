"""Group drivers end to end: elections, replication, failover and restarts, on MockClock."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.unit.consensus.driver_cluster import (
    GROUP,
    OPTIONS,
    RAFT,
    DriverCluster,
    Recorder,
    payload,
)
from vdl.backends.api import Entry, EntryType, LogStoreOptions
from vdl.backends.registry import open_log_store, open_meta_store
from vdl.consensus import NotLeader
from vdl.consensus.driver import DriverOptions, GroupDriver
from vdl.consensus.hard_state_store import load_hard_state
from vdl.consensus.messages import (
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    Message,
    VoteResponse,
)
from vdl.log.flusher import Flusher


@pytest.fixture
def clock() -> trio.testing.MockClock:
    # Jump only once everything has been idle a moment, so fsync threads finish first.
    return trio.testing.MockClock(autojump_threshold=0.002)


@pytest.fixture
async def cluster(
    tmp_path: Path, clock: trio.testing.MockClock, nursery: trio.Nursery
) -> AsyncIterator[DriverCluster]:
    c = DriverCluster(tmp_path)
    await c.start(nursery)
    yield c
    await c.stop()


async def test_one_leader_is_elected_and_followers_know_it(cluster: DriverCluster) -> None:
    leader = await cluster.wait_leader()
    assert leader.driver is not None
    with trio.fail_after(10):
        while not all(
            n.driver is not None and n.driver.leader_id == leader.node_id
            for n in cluster.nodes.values()
        ):
            await trio.sleep(0.05)
    assert leader.driver.in_contact() == frozenset({1, 2, 3})
    follower = next(n for n in cluster.nodes.values() if n is not leader)
    assert follower.driver is not None
    with pytest.raises(NotLeader):
        follower.driver.propose([payload(1, b"x")])


async def test_entries_replicate_in_order_to_every_node(cluster: DriverCluster) -> None:
    indexes = [await cluster.propose(b"v%d" % i) for i in range(30)]
    await cluster.wait_applied(indexes[-1], [1, 2, 3])
    logs = [n.machine.data() for n in cluster.nodes.values()]
    assert logs[0] == logs[1] == logs[2]
    assert len(logs[0]) == 30
    # Followers heard of every leader entry as written; the leader of none of its own.
    for node in cluster.nodes.values():
        assert node.driver is not None
        written = [e for e in node.machine.written if e.type == EntryType.DATA]
        assert len(written) == (0 if node.driver.is_leader else 30)


async def test_many_proposals_share_one_flush(cluster: DriverCluster) -> None:
    leader = await cluster.wait_leader()
    driver = leader.driver
    assert driver is not None
    await cluster.wait_applied(driver.commit_index, [1, 2, 3])
    flushes = leader.flusher.flushes
    last = 0
    for i in range(50):
        last, _ = driver.propose([payload(driver.next_index(), b"b%d" % i)])
    await cluster.wait_applied(last, [1, 2, 3])
    # Proposed between two turns of the loop, all fifty went into one Ready: one append
    # and one fsync on the leader (a tick may add a heartbeat-only turn, nothing more).
    assert leader.flusher.flushes - flushes <= 2


async def test_a_new_leader_takes_over_after_the_leader_dies(cluster: DriverCluster) -> None:
    before = [await cluster.propose(b"a%d" % i) for i in range(10)]
    old = await cluster.wait_leader()
    assert old.driver is not None
    old_term = old.driver.term
    await cluster.wait_applied(before[-1], [1, 2, 3])
    await old.stop()
    new = await cluster.wait_leader()
    assert new is not old and new.driver is not None and new.driver.term > old_term
    after = [await cluster.propose(b"b%d" % i) for i in range(10)]
    others = [n for n in cluster.nodes if n != old.node_id]
    await cluster.wait_applied(after[-1], others)
    values = cluster.nodes[others[0]].machine.data()
    assert len(values) == 20
    # The old leader comes back and catches up from its own disk plus the new leader.
    async with trio.open_nursery() as nursery:
        await old.start(nursery)
        await cluster.wait_applied(after[-1], [old.node_id])
        assert old.machine.data() == values
        await old.stop()
        old.store = None


async def test_an_idle_group_quiesces_on_every_node_and_wakes_when_its_leader_dies(
    cluster: DriverCluster,
) -> None:
    """Idle, the group leaves every node's clock (no ticks, no messages); the leader's
    death is noticed by node liveness, which wakes the followers, and they elect."""
    index = await cluster.propose(b"x")
    await cluster.wait_applied(index, [1, 2, 3])
    clocks = cluster.net.clocks
    with trio.fail_after(30):
        while any(c.awake for c in clocks.values()):
            await trio.sleep(0.05)
    sent = cluster.net.sent
    await trio.sleep(20 * OPTIONS.tick_s)
    assert cluster.net.sent == sent  # quiet: not one message in two election timeouts
    old = await cluster.wait_leader()
    assert old.driver is not None and old.driver.quiesced
    # Quiesced, the followers' contact with the leader is what node liveness says.
    assert old.driver.in_contact() == frozenset({1, 2, 3})
    old_term = old.driver.term
    await old.stop()
    new = await cluster.wait_leader()
    assert new is not old and new.driver is not None and new.driver.term > old_term
    after = await cluster.propose(b"y")
    others = [n for n in cluster.nodes if n != old.node_id]
    await cluster.wait_applied(after, others)
    values = [cluster.nodes[n].machine.data() for n in others]
    assert len(values[0]) == 2 and values[0] == values[1]


async def test_a_whole_cluster_restarts_from_disk(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    cluster = DriverCluster(tmp_path)
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery)
        indexes = [await cluster.propose(b"r%d" % i) for i in range(15)]
        await cluster.wait_applied(indexes[-1], [1, 2, 3])
        terms = {i: n.driver.term for i, n in cluster.nodes.items() if n.driver is not None}
        before = cluster.nodes[1].machine.data()
        await cluster.stop()
    for node in cluster.nodes.values():
        meta = open_meta_store(node.directory / "meta")
        assert load_hard_state(meta, GROUP).term == terms[node.node_id]
        meta.close()
    async with trio.open_nursery() as nursery:
        await cluster.start(nursery)
        leader = await cluster.wait_leader()
        assert leader.driver is not None and leader.driver.term > max(terms.values())
        index = await cluster.propose(b"after")
        await cluster.wait_applied(index, [1, 2, 3])
        for node in cluster.nodes.values():
            # Applied again from the start of the log (applied=None), then the new entry.
            assert node.machine.data()[: len(before)] == before
        await cluster.stop()


async def test_a_partitioned_follower_catches_up(cluster: DriverCluster) -> None:
    leader = await cluster.wait_leader()
    cut = next(i for i in cluster.nodes if i != leader.node_id)
    cluster.net.isolated.add(cut)
    indexes = [await cluster.propose(b"p%d" % i) for i in range(20)]
    live = [i for i in cluster.nodes if i != cut]
    await cluster.wait_applied(indexes[-1], live)
    await trio.sleep(2)
    cluster.net.isolated.clear()
    last = await cluster.propose(b"healed")
    await cluster.wait_applied(last, [1, 2, 3])
    assert cluster.nodes[cut].machine.data() == cluster.nodes[live[0]].machine.data()


async def test_the_machine_hears_when_the_leaders_own_write_is_durable(
    cluster: DriverCluster,
) -> None:
    leader = await cluster.wait_leader()
    driver = leader.driver
    assert driver is not None
    followers = [i for i in cluster.nodes if i != leader.node_id]
    cluster.net.isolated.update(followers)
    index, _ = driver.propose([payload(driver.next_index(), b"alone")])
    with trio.fail_after(1):
        while leader.machine.persisted < index:
            await trio.sleep(0.01)
    # Durable on the leader (what acks=1 waits for), yet no majority has it.
    assert driver.commit_index < index
    cluster.net.isolated.clear()
    await cluster.wait_applied(index, [1, 2, 3])
    assert all(cluster.nodes[i].machine.persisted >= index for i in followers)


async def test_a_followers_ack_leaves_with_the_durability_report(tmp_path: Path) -> None:
    # The ack travels with the write it waits for: the flusher's report runs it in its
    # callback, not one scheduling of the driver task later.
    sent: list[Message] = []

    class ListOutbox:
        def send(self, group_id: int, message: Message) -> None:
            sent.append(message)

    store = open_log_store("segment", tmp_path / "log", LogStoreOptions())
    meta = open_meta_store(tmp_path / "meta")
    flusher = Flusher()
    driver = GroupDriver(
        GROUP,
        1,
        frozenset({1, 2, 3}),
        store,
        meta,
        flusher,
        ListOutbox(),
        Recorder(),
        raft=RAFT,
        options=dataclasses.replace(OPTIONS, inline=True),
    )
    # The flusher's syncs wait until the test lets them go, so it sees when the ack is owed.
    hold = threading.Event()
    real_sync = store.sync

    def held_sync() -> None:
        assert hold.wait(5)
        real_sync()

    store.sync = held_sync  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        await nursery.start(driver.run)
        entry = Entry(1, 1, EntryType.DATA, payload(1, b"one"))
        driver.deliver(AppendEntries(2, 1, 1, 0, 0, 0, (entry,)))
        with trio.fail_after(5):
            while store.last_index() < 1 or not driver._parked:
                await trio.sleep(0.001)
        await trio.sleep(0.05)
        assert not [m for m in sent if isinstance(m, AppendResponse)]  # not durable yet
        assert flusher.flushes == 0
        hold.set()
        with trio.fail_after(5):
            while flusher.flushes == 0:
                await trio.sleep(0)
        # The report's own callback sent it.
        acks = [m for m in sent if isinstance(m, AppendResponse)]
        assert acks == [AppendResponse(1, 2, 1, 1)]
        flusher.stop()
        nursery.cancel_scope.cancel()
    await driver.close()
    store.close()
    meta.close()


class _ListOutbox:
    def __init__(self) -> None:
        self.sent: list[Message] = []

    def send(self, group_id: int, message: Message) -> None:
        self.sent.append(message)


@dataclass
class _IndexRecorder(Recorder):
    """A machine that is told only how far its log is committed (as a log stream is)."""

    applied_to: int = 0

    def apply_to(self, index: int) -> None:
        self.applied_to = index


# Ticks never come during these tests: every turn of the loop is one the test caused.
_NO_TICKS = DriverOptions(tick_s=3600.0)


def _lone_driver(
    tmp_path: Path, machine: Recorder, *, inline: bool = True
) -> tuple[GroupDriver, _ListOutbox]:
    """Node 1 of a three-voter group, talking to a list; its flusher never runs, so the
    test decides when something is durable (`_durable`, as the flusher's round would). With
    `inline`, the callers' tasks may take the loop's next step (as a stream's group does)."""
    outbox = _ListOutbox()
    driver = GroupDriver(
        GROUP,
        1,
        frozenset({1, 2, 3}),
        open_log_store("segment", tmp_path / "log", LogStoreOptions()),
        open_meta_store(tmp_path / "meta"),
        Flusher(),
        outbox,
        machine,
        raft=RAFT,
        options=dataclasses.replace(_NO_TICKS, inline=inline),
    )
    return driver, outbox


async def _durable(driver: GroupDriver) -> None:
    """What a round of the flusher does for the driver, done here without a checkpoint:
    sync its store, run what its marks carried, report the durable index."""
    owed = await driver._flusher.release(driver)
    driver._store.sync()
    for then in owed:
        then()
    driver.on_durable(driver._store.last_index())


async def _settle(driver: GroupDriver) -> None:
    """Let the loop finish whatever it was woken for (hard-state writes run in threads)."""
    with trio.fail_after(5):
        while not driver._parked or driver._wakeup.is_set():
            await trio.sleep(0.001)
    await trio.testing.wait_all_tasks_blocked()


async def _elect(driver: GroupDriver, outbox: _ListOutbox) -> None:
    """Make node 1 leader, with follower 2 acknowledged (replicating) and 3 silent."""
    driver.campaign()
    await _settle(driver)
    driver.deliver(VoteResponse(2, 1, driver.term + 1, True, pre_vote=True))
    await _settle(driver)
    driver.deliver(VoteResponse(2, 1, driver.term, True))
    await _settle(driver)
    assert driver.is_leader
    await _durable(driver)
    driver.deliver(AppendResponse(2, 1, driver.term, driver._store.last_index()))
    await _settle(driver)
    outbox.sent.clear()


async def _stop(driver: GroupDriver, nursery: trio.Nursery) -> None:
    nursery.cancel_scope.cancel()
    await driver.close()
    driver._store.close()
    driver._meta.close()


async def test_a_durability_report_with_nothing_to_do_costs_no_turn(tmp_path: Path) -> None:
    driver, outbox = _lone_driver(tmp_path, Recorder())
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        entry = Entry(1, 1, EntryType.DATA, payload(1, b"one"))
        driver.deliver(AppendEntries(2, 1, 1, 0, 0, 0, (entry,)))
        await _settle(driver)
        turns = driver.turns
        await _durable(driver)
        assert [m for m in outbox.sent if isinstance(m, AppendResponse)] == [
            AppendResponse(1, 2, 1, 1)
        ]
        await _settle(driver)
        # The ack left from the report itself, and nothing was left for the loop to do.
        assert driver.turns == turns
        await _stop(driver, nursery)


async def test_a_commit_that_a_durability_report_allows_is_never_lost(tmp_path: Path) -> None:
    # A machine that needs the payloads gets them from the loop, which the report wakes.
    machine = Recorder()
    driver, outbox = _lone_driver(tmp_path, machine)
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        await _elect(driver, outbox)
        index, _ = driver.propose([payload(driver.next_index(), b"x")])
        driver.deliver(AppendResponse(2, 1, driver.term, index))  # follower durable first
        await _settle(driver)
        assert driver.commit_index < index  # the leader's own write is not durable yet
        await _durable(driver)
        await _settle(driver)
        assert driver.commit_index == index
        assert machine.applied[-1].index == index
        assert machine.data()[-1] == payload(index, b"x")
        await _stop(driver, nursery)


async def test_a_stream_applies_a_commit_right_in_the_durability_report(tmp_path: Path) -> None:
    machine = _IndexRecorder()
    driver, outbox = _lone_driver(tmp_path, machine)
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        await _elect(driver, outbox)
        index, _ = driver.propose([payload(driver.next_index(), b"x")])
        driver.deliver(AppendResponse(2, 1, driver.term, index))
        assert machine.applied_to < index
        turns = driver.turns
        await _durable(driver)
        # Applied by index, in the report's callback: no turn, no payload read back.
        assert machine.applied_to == index
        assert not machine.applied
        await _settle(driver)
        assert driver.turns == turns
        await _stop(driver, nursery)


async def test_a_proposal_to_an_idle_group_leaves_at_once_and_a_burst_shares_a_turn(
    tmp_path: Path,
) -> None:
    driver, outbox = _lone_driver(tmp_path, Recorder())
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        await _elect(driver, outbox)
        turns = driver.turns
        first, _ = driver.propose([payload(driver.next_index(), b"a")])
        # Sent and written from the proposer's own call, before the driver task ran.
        appends = [m for m in outbox.sent if isinstance(m, AppendEntries) and m.dst == 2]
        assert [[e.index for e in m.entries] for m in appends] == [[first]]
        assert driver._store.last_index() == first
        # Those that follow before the loop turns go together in its next Ready.
        later = [driver.propose([payload(driver.next_index(), b"b%d" % i)])[0] for i in range(5)]
        assert len(outbox.sent) == len(appends)
        await _settle(driver)
        assert driver.turns == turns + 1
        appends = [m for m in outbox.sent if isinstance(m, AppendEntries) and m.dst == 2]
        assert [[e.index for e in m.entries] for m in appends] == [[first], later]
        await _stop(driver, nursery)


async def test_a_streams_follower_writes_an_append_from_the_readers_call(tmp_path: Path) -> None:
    machine = _IndexRecorder()
    driver, outbox = _lone_driver(tmp_path, machine)
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        # A new term must be on disk before anything is answered: that is the loop's job.
        driver.deliver(Heartbeat(2, 1, 1, 0))
        await _settle(driver)
        assert driver.term == 1
        turns = driver.turns
        one = Entry(1, 1, EntryType.DATA, payload(1, b"one"))
        driver.deliver(AppendEntries(2, 1, 1, 0, 0, 0, (one,)))
        # Stepped and written right away; the ack waits for durability.
        assert driver._store.last_index() == 1
        assert [e.index for e in machine.written] == [1]
        assert driver.leader_id == 2
        assert not [m for m in outbox.sent if isinstance(m, AppendResponse)]
        # A second message from the same peer before the loop turns waits for the loop.
        two = Entry(1, 2, EntryType.DATA, payload(2, b"two"))
        driver.deliver(AppendEntries(2, 1, 1, 1, 1, 1, (two,)))
        assert driver._store.last_index() == 1
        await _settle(driver)
        assert driver._store.last_index() == 2
        await _durable(driver)
        acks = [m for m in outbox.sent if isinstance(m, AppendResponse)]
        assert acks == [AppendResponse(1, 2, 1, 1), AppendResponse(1, 2, 1, 2)]
        await _settle(driver)
        assert machine.applied_to == 1 and not machine.applied  # the commit it heard of
        assert driver.turns >= turns + 1
        await _stop(driver, nursery)


async def test_a_late_turn_steps_messages_in_order_with_its_ticks(
    cluster: DriverCluster,
) -> None:
    """A leader's turn that starts late finds many ticks and the followers' answers that
    came meanwhile. Stepped in arrival order, the answers count for the check-quorum
    windows they arrived in: the leader stays leader. (Ticking all of them first would
    close two windows before any answer was stepped and depose a leader whose followers
    answered all along.)"""
    leader = await cluster.wait_leader()
    driver = leader.driver
    assert driver is not None
    term = driver.term
    followers = [n for n in cluster.nodes if n != leader.node_id]
    # No checkpoint in this loop: the driver task cannot run a turn until it is done, just
    # as when its previous turn awaited a slow sync. Three election timeouts pass, each
    # tick followed by both followers' heartbeat answers.
    for _ in range(3 * RAFT.election_tick):
        driver._ticks += 1  # what the ticker task counts while a turn is late
        for follower in followers:
            driver.deliver(HeartbeatResponse(follower, leader.node_id, term))
    turns = driver.turns
    with trio.fail_after(10):
        while driver.turns == turns:
            await trio.sleep(0)
    assert driver.is_leader and driver.term == term


async def test_without_inline_steps_every_input_waits_for_the_loop(tmp_path: Path) -> None:
    # A group whose machine starts work from its callbacks (group 0) runs all of it from
    # its own loop: a proposal, a peer's message and a durability report only wake it.
    machine = _IndexRecorder()
    driver, outbox = _lone_driver(tmp_path, machine, inline=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        await _elect(driver, outbox)
        turns = driver.turns
        index, _ = driver.propose([payload(driver.next_index(), b"x")])
        assert not outbox.sent and driver._store.last_index() < index
        await _settle(driver)
        assert driver.turns == turns + 1
        assert [m.dst for m in outbox.sent if isinstance(m, AppendEntries)] == [2]  # 3 is silent
        assert driver._store.last_index() == index
        driver.deliver(AppendResponse(2, 1, driver.term, index))
        await _durable(driver)
        assert machine.applied_to < index  # nothing happened in the callers' calls
        await _settle(driver)
        assert machine.applied_to == index  # the loop committed and applied it
        assert driver.turns == turns + 2  # one turn for both inputs
        # A report with nothing owed wakes nobody.
        driver.on_durable(index)
        await _settle(driver)
        assert driver.turns == turns + 2
        await _stop(driver, nursery)
