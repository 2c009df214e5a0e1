"""The transaction coordinator (vdl.txn) with real clients against real node processes:
confluent-kafka's transactional producer on one node and on three (through a node that does
not coordinate, and across the coordinator being killed -9), zombie fencing,
INVALID_TRANSACTION_TIMEOUT, the abort of an expired transaction, and kafka-python's
ListTransactions / DescribeTransactions. What a read_committed consumer sees of it is
tested in test_kafka_transactions*.py."""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka.admin import KafkaAdminClient, TransactionState

from tests.integration.cluster_support import Cluster, group0_leader
from tests.integration.kafka_clients import confluent_create_topic
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until
from vdl.net.kafka.control_codec import request_class, response_class

MAX_TIMEOUT_MS = 60_000
FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    data = tmp_path_factory.mktemp("txn-coord") / "data"
    with NodeProcess(data, "--transaction-max-timeout-ms", str(MAX_TIMEOUT_MS)) as process:
        yield process


def _topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"tc-{uuid.uuid4().hex[:8]}"
    confluent_create_topic(bootstrap, name, partitions)
    return name


def _producer(bootstrap: str, transactional_id: str, **config: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 30_000,
            **config,
        }
    )


def _committed(bootstrap: str, group: str, topic: str, partition: int) -> int:
    # read_uncommitted: the committed offset as it stands, also while a transaction holds
    # one (read_committed asks with require_stable and waits, KIP-447).
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_uncommitted"}
    )
    try:
        [tp] = consumer.committed([TopicPartition(topic, partition)], timeout=30)
        return int(tp.offset)
    finally:
        consumer.close()


def _read_committed(bootstrap: str, topic: str, partitions: int, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    try:

        def more() -> int:
            for message in consumer.consume(num_messages=100, timeout=0.5):
                assert message.error() is None, message.error()
                value = message.value()
                assert value is not None
                values.append(value)
            return len(values)

        wait_until(more, f"{expected} committed records", done=lambda n: n >= expected)
    finally:
        consumer.close()
    return values


def _call(node: NodeProcess, key: int, version: int, **fields: Any) -> Any:
    """One request on a socket of our own, at exactly `version`; the decoded answer."""
    request = request_class(key, version)(**fields)
    request.with_header(correlation_id=7, client_id="raw-txn")
    with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=30) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        head = sock.recv(4, socket.MSG_WAITALL)
        payload = sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    cls = response_class(key, version)
    # Flexible versions (v3 here) have a tagged-field byte after the correlation id.
    return cls.decode(payload[5 if version >= 3 else 4 :], version=version)


def _fenced(caught: pytest.ExceptionInfo[KafkaException]) -> bool:
    return bool(caught.value.args[0].code() in FENCED)


def test_commit_carries_the_offsets_and_abort_drops_them(node: NodeProcess) -> None:
    topic, source = _topic(node.bootstrap), _topic(node.bootstrap, 1)
    group = f"g-{uuid.uuid4().hex[:6]}"
    producer = _producer(node.bootstrap, f"tx-{uuid.uuid4().hex[:6]}")
    producer.init_transactions(30)
    # The offsets go with a consumer's group metadata, as a consume-transform-produce loop's.
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group})
    try:
        metadata = consumer.consumer_group_metadata()
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic, value=b"c%d" % i, partition=i % 2)
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 17)], metadata, 30)
        # Held in the transaction until it commits (KIP-447).
        assert _committed(node.bootstrap, group, source, 0) < 0
        producer.commit_transaction(30)
        assert _committed(node.bootstrap, group, source, 0) == 17

        producer.begin_transaction()
        producer.produce(topic, value=b"aborted", partition=0)
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 99)], metadata, 30)
        producer.abort_transaction(30)
        assert _committed(node.bootstrap, group, source, 0) == 17
    finally:
        consumer.close()
    assert sorted(_read_committed(node.bootstrap, topic, 2, 4)) == [b"c0", b"c1", b"c2", b"c3"]


def test_a_second_producer_fences_the_first(node: NodeProcess) -> None:
    topic, transactional_id = _topic(node.bootstrap), f"tx-{uuid.uuid4().hex[:6]}"
    zombie = _producer(node.bootstrap, transactional_id)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    assert zombie.flush(30) == 0

    successor = _producer(node.bootstrap, transactional_id)
    # Waits while the coordinator aborts the zombie's transaction.
    successor.init_transactions(30)
    with pytest.raises(KafkaException) as caught:
        zombie.commit_transaction(30)
    assert _fenced(caught), caught.value

    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(30)
    assert _read_committed(node.bootstrap, topic, 2, 1) == [b"successor"]
    assert f"transactional id {transactional_id!r}: InitProducerId fences" in node.log()


def test_a_timeout_above_the_maximum_is_refused(node: NodeProcess) -> None:
    transactional_id = f"tx-{uuid.uuid4().hex[:6]}"
    greedy = _producer(node.bootstrap, transactional_id, **{"transaction.timeout.ms": 120_000})
    with pytest.raises(KafkaException) as caught:
        greedy.init_transactions(30)
    assert caught.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT
    wait_until(lambda: "INVALID_TRANSACTION_TIMEOUT" in node.log(), "the node's log line")
    # A producer within the limit is served, under the same id.
    within = _producer(node.bootstrap, transactional_id)
    within.init_transactions(30)
    within.begin_transaction()
    within.produce(_topic(node.bootstrap), value=b"ok")
    within.commit_transaction(30)


def test_an_expired_transaction_is_aborted_and_its_producer_fenced(node: NodeProcess) -> None:
    topic, transactional_id = _topic(node.bootstrap), f"tx-{uuid.uuid4().hex[:6]}"
    # librdkafka wants message.timeout.ms within transaction.timeout.ms.
    slow = _producer(
        node.bootstrap,
        transactional_id,
        **{"transaction.timeout.ms": 1000, "message.timeout.ms": 1000},
    )
    slow.init_transactions(30)
    slow.begin_transaction()
    slow.produce(topic, value=b"late", partition=1)
    assert slow.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    try:

        def state() -> TransactionState:
            return admin.describe_transactions([transactional_id])[transactional_id].state

        wait_until(state, "the abort", done=lambda s: s == TransactionState.COMPLETE_ABORT)
    finally:
        admin.close()
    with pytest.raises(KafkaException) as caught:
        slow.commit_transaction(30)
    assert _fenced(caught), caught.value
    assert "ran past its timeout of 1000 ms" in node.log()


def test_list_and_describe_transactions(node: NodeProcess) -> None:
    topic, transactional_id = _topic(node.bootstrap), f"tx-{uuid.uuid4().hex[:6]}"
    producer = _producer(node.bootstrap, transactional_id)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=1)
    assert producer.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    try:
        described = admin.describe_transactions([transactional_id])[transactional_id]
        assert described.state == TransactionState.ONGOING
        assert described.transaction_timeout_ms == 30_000
        assert described.transaction_start_time_ms > 0
        assert {(tp.topic, tp.partition) for tp in described.topic_partitions} == {(topic, 1)}
        listed = [
            row
            for rows in admin.list_transactions(state_filters=["Ongoing"]).values()
            for row in rows
        ]
        assert (transactional_id, described.producer_id) in {
            (row.transactional_id, row.producer_id) for row in listed
        }
        producer.commit_transaction(30)
        after = admin.describe_transactions([transactional_id])[transactional_id]
        assert after.state in (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT)
    finally:
        admin.close()


# ---- three nodes -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("txn-coord3")) as cluster:
        cluster.create_topic("txn-three", 2)
        yield cluster


@pytest.mark.slow  # a 3-node cluster; the default exactly-once run kills a coordinator too
def test_a_cluster_commits_through_any_node_and_survives_its_coordinator(
    three: Cluster,
) -> None:
    coordinator = wait_until(
        lambda: group0_leader(three.nodes[1]), "a metadata-group leader", done=lambda n: n > 0
    )
    elsewhere = next(n for i, n in three.nodes.items() if i != coordinator)
    producer = _producer(elsewhere.bootstrap, "tx-three", **{"acks": "all"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce("txn-three", value=b"first-%d" % i, partition=i % 2)
    producer.commit_transaction(30)

    # The coordinator dies -9 in the middle of the next transaction: the next one has the
    # transaction's state (its partitions) and commits it.
    producer.begin_transaction()
    for i in range(4):
        producer.produce("txn-three", value=b"second-%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    three.nodes[coordinator].kill()
    wait_until(
        lambda: group0_leader(elsewhere),
        "a new metadata-group leader",
        done=lambda n: n > 0 and n != coordinator,
        tolerate=(OSError,),
    )
    producer.commit_transaction(60)
    values = _read_committed(three.alive_bootstrap(), "txn-three", 2, 8)
    assert sorted(values) == sorted(
        [b"first-%d" % i for i in range(4)] + [b"second-%d" % i for i in range(4)]
    )


def test_forged_producer_ids_and_stale_epochs_are_refused(node: NodeProcess) -> None:
    topic, transactional_id = _topic(node.bootstrap), f"tx-{uuid.uuid4().hex[:6]}"
    producer = _producer(node.bootstrap, transactional_id)
    producer.init_transactions(30)
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    try:
        held = admin.describe_transactions([transactional_id])[transactional_id]
    finally:
        admin.close()
    pid, epoch = held.producer_id, held.producer_epoch
    topics = [request_class(24, 0).AddPartitionsToTxnTopic(name=topic, partitions=[0])]
    # A producer id the id does not hold.
    forged = _call(
        node,
        24,
        0,
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=pid + 1,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=topics,
    )
    [result] = forged.results_by_topic_v3_and_below
    assert result.results_by_partition[0].partition_error_code == 49  # INVALID_PRODUCER_ID_MAPPING
    # An older epoch: INVALID_PRODUCER_EPOCH before KIP-588's versions, PRODUCER_FENCED after.
    stale = dict(transactional_id=transactional_id, producer_id=pid, committed=True)
    assert _call(node, 26, 1, producer_epoch=epoch - 1, **stale).error_code == 47
    assert _call(node, 26, 3, producer_epoch=epoch - 1, **stale).error_code == 90
    wait_until(
        lambda: (
            f"EndTxn from raw-txn for transactional id {transactional_id!r}: PRODUCER_FENCED"
            in node.log()
        ),
        "the node's log line",
    )
    # KIP-447: offsets from a member of a generation the group does not have are refused.
    commit_topic = request_class(28, 3).TxnOffsetCommitRequestTopic
    partition = commit_topic.TxnOffsetCommitRequestPartition(
        partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata=""
    )
    offsets = _call(
        node,
        28,
        3,
        transactional_id=transactional_id,
        group_id=f"g-{uuid.uuid4().hex[:6]}",
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=4,
        member_id="not-a-member",
        group_instance_id=None,
        topics=[commit_topic(name=topic, partitions=[partition])],
    )
    assert offsets.topics[0].partitions[0].error_code == 22  # ILLEGAL_GENERATION
    # An empty transactional id is no id at all.
    empty = _call(node, 22, 1, transactional_id="", transaction_timeout_ms=1000)
    assert (empty.error_code, empty.producer_id) == (42, -1)  # INVALID_REQUEST
    # The producer holding the id is served as before.
    producer.begin_transaction()
    producer.produce(topic, value=b"held", partition=0)
    producer.commit_transaction(30)
