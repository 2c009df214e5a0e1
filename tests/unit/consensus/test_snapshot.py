from __future__ import annotations

from vdl.consensus import Role
from vdl.consensus.messages import InstallSnapshot
from vdl.consensus.progress import ProgressState

from .helpers import Net


def test_lagging_follower_gets_a_snapshot_then_catches_up() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    net.down.add(3)
    for i in range(10):
        leader.propose([b"e%d" % i])
        net.settle()
    net.tick(1)
    # Retention on the leader deletes what node 3 still needs.
    meta = leader.retention_point(8)
    assert meta.index == 8 and meta.term == 1 and meta.config.voters == {1, 2, 3}
    net.storages[1].compact(8)
    net.down.discard(3)
    net.tick(1)
    snaps = [m for m in net.sent if isinstance(m, InstallSnapshot)]
    assert len(snaps) == 1 and snaps[0].dst == 3
    assert snaps[0].snapshot.index == leader.commit_index
    # Node 3 installed it (the Net persists at once) and answered at the snapshot's index,
    # which moves the leader straight back to streaming.
    assert net.storages[3].snapshot == snaps[0].snapshot
    assert leader.progress[3].match == snaps[0].snapshot.index
    assert net.nodes[3].commit_index == snaps[0].snapshot.index
    leader.report_snapshot(3, ok=True)  # the driver's report comes late: harmless
    leader.propose([b"after"])
    net.settle()
    net.tick(2)
    assert leader.progress[3].state is ProgressState.REPLICATE
    assert net.storages[3].log[-1] == net.storages[1].log[-1]
    assert net.nodes[3].commit_index == leader.commit_index


def test_failed_snapshot_is_retried() -> None:
    net = Net([1, 2, 3])
    leader = net.elect(1)
    net.down.add(3)
    for i in range(5):
        leader.propose([b"e%d" % i])
        net.settle()
    net.tick(1)
    net.storages[1].compact(5)
    net.drop = lambda m: isinstance(m, InstallSnapshot)
    net.down.discard(3)
    net.tick(1)
    leader.report_snapshot(3, ok=False)
    assert leader.progress[3].state is ProgressState.PROBE
    net.heal()
    net.tick(3)
    assert net.nodes[3].commit_index == leader.commit_index
    assert net.nodes[3].role is Role.FOLLOWER
