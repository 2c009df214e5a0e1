"""Any node takes admin requests (KIP-590): CreateTopics and DeleteTopics from real Kafka
clients succeed through whichever node they reach, on a cluster whose ports just opened
and through a node that stopped being the controller a client had cached."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka import KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic

from tests.integration.admin_support import wait_for
from tests.integration.cluster_support import Cluster, controller_seen_by, group0_leader
from tests.integration.node_process import NodeProcess

ADMIN_APIS = ("CreateTopics", "DeleteTopics")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three new nodes; the first test gets them right after the last one's ports opened."""
    with Cluster(tmp_path_factory.mktemp("any-node")) as cluster:
        yield cluster


def _admin_counts(node: NodeProcess) -> dict[str, int]:
    """This node's CreateTopics/DeleteTopics requests and their errors, by counter name."""
    _, counters = node.stage_snapshot()
    return {
        name: count
        for name, count in counters.items()
        if any(f"api={api}" in name for api in ADMIN_APIS)
    }


def _errors(counts: dict[str, int]) -> dict[str, int]:
    return {name: n for name, n in counts.items() if name.startswith("kafka_request_errors")}


def _create_through(node: NodeProcess, topic: str) -> int:
    """The first admin call of a new client that knows only `node`; the partitions the
    topic then has, as the same client sees them."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])
    futures[topic].result(timeout=60)
    md = admin.list_topics(topic, timeout=10).topics[topic]
    assert md.error is None, md.error
    assert all(len(p.replicas) == 3 for p in md.partitions.values())
    return len(md.partitions)


def test_the_first_create_topics_succeeds_through_each_node(fresh: Cluster) -> None:
    nodes = list(fresh.nodes.values())
    with ThreadPoolExecutor(len(nodes)) as pool:
        partitions = list(
            pool.map(lambda n: _create_through(n[1], f"fresh-{n[0]}"), enumerate(nodes))
        )
    assert partitions == [3, 3, 3]
    for node in nodes:
        assert not _errors(_admin_counts(node)), node.bootstrap

    def listed_everywhere() -> bool:
        for node in nodes:
            md = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=10)
            for i in range(len(nodes)):
                topic = md.topics.get(f"fresh-{i}")
                if topic is None or len(topic.partitions) != 3:
                    return False
        return True

    wait_for(listed_everywhere)


def test_a_client_that_cached_a_former_controller_still_gets_through(fresh: Cluster) -> None:
    nodes = fresh.nodes

    def agreed_leader() -> int:
        leaders = {group0_leader(n) for n in nodes.values()}
        reported = {controller_seen_by(n) for n in nodes.values()}
        if len(leaders) == 1 and leaders == reported and min(leaders) > 0:
            return leaders.pop()
        return 0

    leader = wait_for(agreed_leader)
    confluent = AdminClient({"bootstrap.servers": fresh.bootstrap})
    # librdkafka caches the controller named by the last Metadata it got.
    wait_for(lambda: confluent.list_topics(timeout=10).controller_id == leader)
    kafka_python = KafkaAdminClient(bootstrap_servers=fresh.bootstrap, request_timeout_ms=30000)
    stopped = nodes[leader]
    assert stopped.process is not None
    try:
        # kafka-python looks the controller up for its first admin call and keeps it.
        kafka_python.create_topics([KNewTopic("doomed", num_partitions=1, replication_factor=3)])
        before = {i: _admin_counts(n) for i, n in nodes.items()}

        # Group 0's leader pauses long enough for the others to elect another one.
        os.kill(stopped.process.pid, signal.SIGSTOP)
        others = [n for i, n in nodes.items() if i != leader]

        def new_leader() -> int:
            seen = {group0_leader(n) for n in others}
            return seen.pop() if len(seen) == 1 and min(seen) not in (-1, leader) else 0

        successor = wait_for(new_leader)
        os.kill(stopped.process.pid, signal.SIGCONT)
        wait_for(lambda: group0_leader(stopped) == successor)
        # Every node names a live controller in Metadata: the new leader.
        wait_for(lambda: {controller_seen_by(n) for n in nodes.values()} == {successor})

        # Both clients still send to the former controller, which takes the requests.
        kafka_python.create_topics([KNewTopic("cached", num_partitions=2, replication_factor=3)])
        confluent.delete_topics(["doomed"])["doomed"].result(timeout=60)
    finally:
        os.kill(stopped.process.pid, signal.SIGCONT)
        kafka_python.close()

    after = {i: _admin_counts(n) for i, n in nodes.items()}
    served = {
        name: count - before[leader].get(name, 0)
        for name, count in after[leader].items()
        if count != before[leader].get(name, 0)
    }
    assert served == {
        "kafka_requests{api=CreateTopics}": 1,
        "kafka_requests{api=DeleteTopics}": 1,
    }, served
    for i in nodes:
        assert not _errors(after[i]), (i, after[i])
        if i != leader:
            assert after[i] == before[i], (i, before[i], after[i])
    md = AdminClient({"bootstrap.servers": nodes[successor].bootstrap}).list_topics(timeout=10)
    assert len(md.topics["cached"].partitions) == 2
    assert "doomed" not in md.topics


def test_without_a_group_0_leader_a_request_waits_for_one_within_its_timeout(
    fresh: Cluster,
) -> None:
    nodes = fresh.nodes
    leader = wait_for(lambda: max(group0_leader(n) for n in nodes.values()))
    kept_id = next(i for i in nodes if i != leader)
    kept = nodes[kept_id]
    paused = [n for i, n in nodes.items() if i != kept_id]
    try:
        for node in paused:
            assert node.process is not None
            os.kill(node.process.pid, signal.SIGSTOP)
        # Alone, the node knows no leader, and names itself: it takes admin requests.
        wait_for(lambda: group0_leader(kept) == -1)
        assert controller_seen_by(kept) == kept_id
        admin = AdminClient({"bootstrap.servers": kept.bootstrap})
        late = admin.create_topics([NewTopic("late", 1, 3)], operation_timeout=1.0)["late"]
        with pytest.raises(KafkaException) as failure:
            late.result(timeout=30)
        assert failure.value.args[0].code() == KafkaError.REQUEST_TIMED_OUT, failure.value
        waiting = admin.create_topics([NewTopic("patient", 2, 3)], operation_timeout=30.0)
        time.sleep(1.0)
        assert not waiting["patient"].done()
    finally:
        for node in paused:
            assert node.process is not None
            os.kill(node.process.pid, signal.SIGCONT)
    waiting["patient"].result(timeout=60)
    assert len(admin.list_topics("patient", timeout=10).topics["patient"].partitions) == 2
