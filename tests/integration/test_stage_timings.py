"""Per-stage timings of a replicated produce, read from real node processes: after acks=all
records, the partition leader's snapshot has counts in every leader stage and a follower's
in the follower stages (what they measure is never asserted: tests do not judge timing)."""

from __future__ import annotations

from tests.integration.cluster_support import Cluster
from tests.integration.kafka_clients import confluent_produce
from vdl.metrics.stages import SNAPSHOT_FILE, Histogram, load_snapshot, merged, produce_stages

TOPIC = "timed"

LEADER_STAGES = produce_stages("leader")
FOLLOWER_STAGES = produce_stages("follower")
PER_PEER_STAGES = produce_stages("leader per peer")


def test_leader_and_follower_record_the_stages_of_acks_all_produces(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, 1)
    leader_id = cluster.wait_for_preferred_leader(TOPIC)
    messages = [(b"k%d" % i, b"v" * 100) for i in range(40)]
    # One message per request, so every request goes through every stage.
    acked = confluent_produce(cluster.bootstrap, TOPIC, messages, **{"linger.ms": 0})
    assert len(acked[0]) == len(messages)
    assert cluster.wait_for_leader(TOPIC, 0) == leader_id

    leader = cluster.nodes[leader_id].stage_snapshot()[0]
    followers = [i for i in cluster.nodes if i != leader_id]
    for stage in LEADER_STAGES:
        assert stage in leader and leader[stage].count > 0, stage
    for peer in followers:
        for base in PER_PEER_STAGES:
            stage = f"{base}{{peer={peer}}}"
            assert stage in leader and leader[stage].count > 0, stage
    follower = cluster.nodes[followers[0]].stage_snapshot()[0]
    for stage in FOLLOWER_STAGES:
        assert stage in follower and follower[stage].count > 0, stage
    # Proposed and committed entries are timed on the leader only.
    assert follower.get("raft_propose_to_commit_seconds", Histogram("none")).count == 0

    # The signal costs the node nothing: it goes on serving, and counts keep growing.
    confluent_produce(cluster.bootstrap, TOPIC, messages[:5])
    again = cluster.nodes[leader_id].stage_snapshot()[0]
    stage = "raft_propose_to_commit_seconds"
    assert again[stage].count > leader[stage].count

    # Shutdown writes the timings once more.
    path = cluster.nodes[leader_id].data_dir / SNAPSHOT_FILE
    written = path.stat().st_mtime_ns
    assert cluster.nodes[leader_id].stop(30) == 0
    assert path.stat().st_mtime_ns != written
    final = merged(load_snapshot(path)[0])
    assert final[stage].count >= again[stage].count
