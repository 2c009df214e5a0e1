"""Defences of Kafka transactions, by the attack, then a legitimate client served:

- KIP-890 part 1: a transactional Produce to a partition its producer never added with
  AddPartitionsToTxn is refused with INVALID_TXN_STATE (one log line), a fenced epoch's
  with INVALID_PRODUCER_EPOCH, and neither moves the partition's last stable offset; a
  confluent-kafka transactional producer then commits there and a read_committed consumer
  reads its records.
- Transactional-id ACLs (resource type TRANSACTIONAL_ID) on a SASL/SCRAM node with ACLs
  on: a principal without Write on the id is refused at init_transactions with
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED; once CreateAcls grants it, the same producer
  commits a transaction; ListTransactions shows only the ids the principal may describe.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import KafkaAdminClient
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from tests.integration.kafka_clients import confluent_create_topic
from tests.integration.node_process import NodeProcess
from tests.integration.security_support import PASSWORDS, add_users
from tests.integration.waiting import wait_until
from vdl.log.record_batch import Record, build_batch
from vdl.net.kafka.control_codec import request_class, response_class

INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 47, 48
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("txn-defences") / "data") as process:
        yield process


def _exchange(node: NodeProcess, request: Any) -> bytes:
    with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=30) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        return sock.recv(size, socket.MSG_WAITALL)


def _call(node: NodeProcess, key: int, version: int, **fields: Any) -> Any:
    """One non-flexible request (kafka-python's protocol classes) and its decoded answer."""
    request = request_class(key, version)(**fields)
    request.with_header(correlation_id=3, client_id="txn-attacker")
    return response_class(key, version).decode(_exchange(node, request)[4:], version=version)


def _produce(
    node: NodeProcess, topic: str, partition: int, transactional_id: str, pid: int, epoch: int
) -> int:
    """A transactional batch, as a producer of the id would send it; its error code."""
    batch = build_batch(
        [Record(None, b"forged", 0)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )
    request = ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=partition, records=batch
                    )
                ],
            )
        ],
        version=7,
    )
    request.with_header(correlation_id=5, client_id="txn-attacker")
    response = ProduceResponse.decode(_exchange(node, request)[4:], version=7)
    return int(response.responses[0].partition_responses[0].error_code)


def _latest(node: NodeProcess, topic: str, partition: int, isolation: int) -> int:
    """ListOffsets' latest offset: the high watermark, or for read_committed the LSO."""
    asked = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=partition, current_leader_epoch=-1, timestamp=-1
    )
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[asked])],
        version=5,
    )
    request.with_header(correlation_id=9, client_id="txn-attacker")
    answer = ListOffsetsResponse.decode(_exchange(node, request)[4:], version=5)
    part = answer.topics[0].partitions[0]
    assert part.error_code == 0
    return int(part.offset)


def _read_committed(config: dict[str, Any], topic: str, partitions: int, n: int) -> list[bytes]:
    consumer = Consumer(
        {
            **config,
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

        wait_until(more, f"{n} committed records", done=lambda got: got >= n)
    finally:
        consumer.close()
    return values


def test_a_produce_to_a_partition_not_added_is_refused(node: NodeProcess) -> None:
    topic, transactional_id = f"td-{uuid.uuid4().hex[:8]}", f"forger-{uuid.uuid4().hex[:6]}"
    confluent_create_topic(node.bootstrap, topic, 2)
    init = _call(node, 22, 1, transactional_id=transactional_id, transaction_timeout_ms=60_000)
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch

    # No transaction at all: the first batch is refused.
    assert _produce(node, topic, 1, transactional_id, pid, epoch) == INVALID_TXN_STATE
    # A transaction with partition 0 added: partition 1 is still refused, 0 is served.
    add = request_class(24, 0).AddPartitionsToTxnTopic(name=topic, partitions=[0])
    added = _call(
        node,
        24,
        0,
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[add],
    )
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert _produce(node, topic, 1, transactional_id, pid, epoch) == INVALID_TXN_STATE
    # A producer id or epoch the id does not hold, even for the added partition.
    assert _produce(node, topic, 0, transactional_id, pid + 1, epoch) == INVALID_TXN_STATE
    assert _produce(node, topic, 0, transactional_id, pid, epoch) == 0
    wait_until(
        lambda: "has no transaction with this partition added" in node.log(),
        "the refusal's log line",
    )
    # Nothing was appended to partition 1, so nothing holds its last stable offset.
    assert _latest(node, topic, 1, READ_UNCOMMITTED) == 0
    assert _latest(node, topic, 1, READ_COMMITTED) == 0
    # Partition 0 holds the open transaction, until it is aborted.
    assert _latest(node, topic, 0, READ_COMMITTED) == 0
    ended = _call(
        node, 26, 1, transactional_id=transactional_id, producer_id=pid,
        producer_epoch=epoch, committed=False,
    )  # fmt: skip
    assert ended.error_code == 0
    wait_until(lambda: _latest(node, topic, 0, READ_COMMITTED), "the abort's marker", done=bool)

    # A real transactional producer is served on both partitions.
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    # The older epoch, now fenced, is refused as such even where the partition never saw
    # the newer one.
    assert _produce(node, topic, 1, transactional_id, pid, epoch) == INVALID_PRODUCER_EPOCH
    assert _latest(node, topic, 1, READ_UNCOMMITTED) == 0
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce(topic, value=b"real-%d" % partition, partition=partition)
    producer.commit_transaction(30)
    values = _read_committed({"bootstrap.servers": node.bootstrap}, topic, 2, 2)
    assert sorted(values) == [b"real-0", b"real-1"]
    assert _latest(node, topic, 1, READ_COMMITTED) == _latest(node, topic, 1, READ_UNCOMMITTED)


# -- transactional-id ACLs -----------------------------------------------------------------

TOPIC = "td-acl"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    root = tmp_path_factory.mktemp("txn-acl")
    users = root / "users"
    add_users(users)
    with NodeProcess(
        root / "data",
        "--users",
        str(users),
        "--superusers",
        "admin",
        "--kafka-sasl-mechanisms",
        "SCRAM-SHA-256",
    ) as process:
        yield process


def _config(node: NodeProcess, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": node.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
    }


def _kafka_python(node: NodeProcess, user: str) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=node.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username=user,
        sasl_plain_password=PASSWORDS[user],
        request_timeout_ms=30_000,
    )


def _binding(rtype: ResourceType, name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        rtype,
        name,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


def _create_acls(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def _listed(node: NodeProcess, user: str) -> set[str]:
    admin = _kafka_python(node, user)
    try:
        return {row.transactional_id for rows in admin.list_transactions().values() for row in rows}
    finally:
        admin.close()


def test_a_transactional_id_needs_its_acl(secure: NodeProcess) -> None:
    admin = AdminClient(_config(secure, "admin"))
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
    # Alice may write the topic, but has nothing on any transactional id.
    _create_acls(admin, [_binding(ResourceType.TOPIC, TOPIC, AclOperation.WRITE)])
    transactional_id = f"alice-{uuid.uuid4().hex[:6]}"
    alice = {**_config(secure, "alice"), "transactional.id": transactional_id}

    refused = Producer(alice)
    with pytest.raises(KafkaException) as caught:
        refused.init_transactions(30)
    error = caught.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    wait_until(
        lambda: (
            f"InitProducerId from User:alice refused: WRITE on transactional id "
            f"{transactional_id!r} is needed" in secure.log()
        ),
        "the refusal's log line",
    )

    # Granted through CreateAcls, the same producer (a new instance: the refusal is fatal
    # to librdkafka's) commits a transaction.
    _create_acls(
        admin, [_binding(ResourceType.TRANSACTIONAL_ID, transactional_id, AclOperation.WRITE)]
    )
    producer = Producer(alice)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"granted")
    producer.commit_transaction(30)
    assert _read_committed(_config(secure, "admin"), TOPIC, 1, 1) == [b"granted"]

    # ListTransactions: the superuser sees the id; so does alice (Write implies Describe),
    # and bob, with nothing on it, sees nothing.
    assert transactional_id in _listed(secure, "admin")
    assert transactional_id in _listed(secure, "alice")
    assert _listed(secure, "bob") == set()
    # `vdl acl` grants bob Describe on the id: now he sees it too.
    granted = _vdl(
        secure, "acl", "add", "--principal", "bob", "--transactional-id", transactional_id,
        "--operation", "describe",
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    listed = _vdl(secure, "acl", "list")
    assert ["User:bob", "allow", "describe", "transactional_id", transactional_id] in [
        line.split() for line in listed.stdout.splitlines()
    ], listed.stdout
    assert _listed(secure, "bob") == {transactional_id}


def _vdl(node: NodeProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "vdl.cli",
            *args,
            "--endpoint",
            f"grpc://{node.grpc_address}",
            "--user",
            "admin",
        ],
        env={**os.environ, "VDL_PASSWORD": PASSWORDS["admin"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
