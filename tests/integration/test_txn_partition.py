"""Transactions on the partition side, on one node, with real clients (KIP-98).

A confluent-kafka transactional producer leaves the partition with an aborted transaction,
a committed one, a plain record and a transaction still open. Read_committed readers
(confluent-kafka, kafka-python, the ydb SDK, `vdl consume`) get only the committed and
plain records, never an aborted one, and stop at the last stable offset (the open
transaction's first offset); read_uncommitted gets everything. Raw Fetch and ListOffsets
show the last stable offset and the aborted-transaction list; DescribeProducers lists the
producers with the open transaction's start. Bad requests get Kafka's errors and the node
goes on serving. Last, a new producer instance with the same transactional id aborts the
open transaction (its markers bump the epoch), which fences the older producer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ydb
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import UnknownTopicOrPartitionError
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeProducersResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)

from tests.integration.kafka_clients import produce_raw
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until
from vdl.log.record_batch import Record, build_batch, iter_batches, iter_records

TOPIC = "txp"
DATABASE = "/local"
TXN_ID = "txp-producer"
COMMITTED = [b"c0", b"c1", b"c2", b"plain"]
ABORTED = [b"a0", b"a1", b"a2"]
INVALID_RECORD = 87
UNKNOWN_TOPIC_OR_PARTITION = 3


def _call(port: int, request: Any, response_class: Any, version: int) -> Any:
    request.with_header(correlation_id=11, client_id="txn-partition-test")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        payload = sock.recv(size, socket.MSG_WAITALL)
    # The response header: correlation id, plus tagged fields for a flexible version.
    start = 5 if response_class is DescribeProducersResponse else 4
    return response_class.decode(payload[start:], version=version)


@contextlib.contextmanager
def _driver(node: NodeProcess) -> Iterator[ydb.Driver]:
    config = ydb.DriverConfig(
        endpoint=f"grpc://{node.grpc_address}", database=DATABASE, disable_discovery=True
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=10, fail_fast=True)
        yield driver
    finally:
        driver.stop(timeout=10)


class State:
    """What the fixture wrote: the open transaction's producer and where things are."""

    def __init__(self, node: NodeProcess, producer: Producer, open_offset: int) -> None:
        self.node = node
        self.producer = producer
        self.open_offset = open_offset  # the open transaction's first offset: the LSO
        self.end = open_offset + 1  # the high watermark


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[State]:
    with NodeProcess(tmp_path_factory.mktemp("txn-partition") / "data") as node:
        # Declared through YDB, so that its readers (and `vdl consume`) have consumers.
        with _driver(node) as driver:
            driver.topic_client.create_topic(f"{DATABASE}/{TOPIC}", consumers=["ydb", "cli"])
        producer = Producer(
            {"bootstrap.servers": node.bootstrap, "transactional.id": TXN_ID, "linger.ms": 5}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        for value in ABORTED:
            producer.produce(TOPIC, value=value)
        producer.flush(30)
        producer.abort_transaction(30)
        producer.begin_transaction()
        for value in COMMITTED[:3]:
            producer.produce(TOPIC, value=value)
        producer.commit_transaction(30)
        plain = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True})
        plain.produce(TOPIC, value=b"plain")
        assert plain.flush(30) == 0
        producer.begin_transaction()
        opened: list[int | None] = []
        producer.produce(TOPIC, value=b"open", on_delivery=lambda e, m: opened.append(m.offset()))
        producer.flush(30)
        assert len(opened) == 1
        # a0-a2, their abort marker, c0-c2, their commit marker, plain, open.
        assert opened == [9]
        yield State(node, producer, 9)


def _confluent(node: NodeProcess, isolation: str) -> list[bytes | None]:
    consumer = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": f"confluent-{isolation}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        values: list[bytes | None] = []

        def at_end() -> bool:
            message = consumer.poll(0.5)
            if message is None:
                return False
            error = message.error()
            if error is not None:
                return bool(error.code() == KafkaError._PARTITION_EOF)
            values.append(message.value())
            return False

        wait_until(at_end, "the end of the partition", every=0)
        return values
    finally:
        consumer.close()


def test_confluent_read_committed_and_read_uncommitted(state: State) -> None:
    assert _confluent(state.node, "read_committed") == COMMITTED
    assert _confluent(state.node, "read_uncommitted") == [
        *ABORTED,
        *COMMITTED[:3],
        b"plain",
        b"open",
    ]


def test_kafka_python_and_aiokafka_read_committed(state: State) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=state.node.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
    tp = KpTopicPartition(TOPIC, 0)
    values: list[bytes] = []
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)

        def read() -> int:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
            return int(consumer.position(tp))

        # It reads up to the last stable offset and stays there.
        wait_until(read, "kafka-python at the LSO", done=lambda p: p >= state.open_offset)
    finally:
        consumer.close()
    assert values == COMMITTED

    async def aiokafka_read() -> list[bytes]:
        aio = AIOKafkaConsumer(
            bootstrap_servers=state.node.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await aio.start()
        try:
            part = AioTopicPartition(TOPIC, 0)
            aio.assign([part])
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while await aio.position(part) < state.open_offset:
                assert time.monotonic() < deadline, f"aiokafka read only {got}"
                batch = await aio.getmany(part, timeout_ms=500)
                got.extend(r.value for r in batch.get(part, []))
            return got
        finally:
            await aio.stop()

    assert asyncio.run(aiokafka_read()) == COMMITTED


def _fetch(state: State, isolation: int) -> Any:
    partition = FetchRequest.FetchTopic.FetchPartition(
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[partition])],
        forgotten_topics_data=[],
        rack_id="",
        version=11,
    )
    return _call(state.node.kafka_port, request, FetchResponse, 11).responses[0].partitions[0]


def _offsets(records: bytes) -> list[int]:
    return [r.offset for batch in iter_batches(records) for r in iter_records(batch)]


def test_fetch_answers_the_lso_and_the_aborted_transactions(state: State) -> None:
    committed = _fetch(state, 1)
    assert committed.error_code == 0
    assert (committed.high_watermark, committed.last_stable_offset) == (state.end, 9)
    # The aborted transaction: its producer and first offset (its records are 0-2).
    ((producer_id, first_offset),) = [
        (a.producer_id, a.first_offset) for a in committed.aborted_transactions
    ]
    assert first_offset == 0 and producer_id >= 0
    # Everything below the LSO (markers included), nothing of the open transaction.
    assert _offsets(committed.records) == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    uncommitted = _fetch(state, 0)
    assert uncommitted.last_stable_offset == 9 and uncommitted.aborted_transactions is None
    assert _offsets(uncommitted.records)[-1] == 9


def _latest(state: State, isolation: int) -> int:
    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, current_leader_epoch=-1, timestamp=-1
    )
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[partition])],
        version=5,
    )
    answer = _call(state.node.kafka_port, request, ListOffsetsResponse, 5)
    part = answer.topics[0].partitions[0]
    assert part.error_code == 0
    return int(part.offset)


def test_list_offsets_latest_is_the_lso_for_read_committed(state: State) -> None:
    assert _latest(state, 0) == state.end
    assert _latest(state, 1) == state.open_offset


def test_ydb_reader_and_vdl_consume_see_committed_records_only(state: State) -> None:
    with _driver(state.node) as driver:
        with driver.topic_client.reader(f"{DATABASE}/{TOPIC}", consumer="ydb") as reader:
            messages: list[Any] = []

            def read_all() -> int:
                with contextlib.suppress(TimeoutError):
                    batch = reader.receive_batch(timeout=0.5)
                    messages.extend(batch.messages)
                    reader.commit_with_ack(batch, timeout=10)
                return len(messages)

            wait_until(read_all, "the committed records", done=lambda n: n >= len(COMMITTED))
            # Nothing more comes: the open transaction is past the LSO.
            with pytest.raises(TimeoutError):
                reader.receive_batch(timeout=1.5)
            reader.close(timeout=10)
    assert [m.data for m in messages] == COMMITTED
    assert [m.offset for m in messages] == [4, 5, 6, 8]

    env = dict(os.environ, VDL_ENDPOINT=f"grpc://{state.node.grpc_address}")
    args = ["consume", TOPIC, "--consumer", "cli", "--from", "earliest", "--count", "4"]
    consumed = subprocess.run(
        [sys.executable, "-m", "vdl.cli", *args],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert consumed.returncode == 0, consumed.stderr.decode()
    assert consumed.stdout.decode().splitlines() == [v.decode() for v in COMMITTED]


def test_describe_producers(state: State) -> None:
    admin = KafkaAdminClient(bootstrap_servers=state.node.bootstrap)
    try:
        found = admin.describe_producers([KpTopicPartition(TOPIC, 0)])
        producers = found[KpTopicPartition(TOPIC, 0)].active_producers
        starts = sorted(p.current_transaction_start_offset for p in producers)
        # The transactional producer (its open transaction) and the plain idempotent one.
        assert starts == [-1, state.open_offset]
        (txn,) = [p for p in producers if p.current_transaction_start_offset >= 0]
        assert txn.producer_epoch >= 0 and txn.last_sequence >= 0
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.describe_producers([KpTopicPartition("no-such-topic", 0)], broker_id=1)
    finally:
        admin.close()


def test_bad_input_is_refused_and_the_node_goes_on(state: State) -> None:
    node = state.node
    # A transactional batch in a Produce without a transactional id: INVALID_RECORD.
    batch = build_batch(
        [Record(None, b"forged", 0)],
        producer_id=4242,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    assert produce_raw(node.kafka_port, TOPIC, batch, version=8) == INVALID_RECORD
    # DescribeProducers of a partition that does not exist, sent raw.
    ask = DescribeProducersRequest(
        topics=[DescribeProducersRequest.TopicRequest(name=TOPIC, partition_indexes=[-1, 7])],
        version=0,
    )
    described = _call(node.kafka_port, ask, DescribeProducersResponse, 0)
    errors = [p.error_code for p in described.topics[0].partitions]
    assert errors == [UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION]
    log = wait_until(node.log, "the log lines", done=lambda text: "txp--1 refused" in text)
    assert "transactional batch without a transactional id" in log
    # The partition is unchanged and a legitimate reader is served.
    assert _latest(state, 0) == state.end
    assert _confluent(node, "read_committed") == COMMITTED


def test_a_new_producer_instance_aborts_the_open_transaction_and_fences_the_old(
    state: State,
) -> None:
    node = state.node
    successor = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": TXN_ID})
    successor.init_transactions(30)
    # The open transaction was aborted (its marker written): the LSO is the end again.
    wait_until(lambda: _latest(state, 1) == _latest(state, 0), "the LSO at the end")
    assert _confluent(node, "read_committed") == COMMITTED
    committed = _fetch(state, 1)
    assert [a.first_offset for a in committed.aborted_transactions] == [0, state.open_offset]
    # The older producer is fenced: its transaction cannot go on.
    with pytest.raises(KafkaException):
        state.producer.produce(TOPIC, value=b"zombie")
        state.producer.commit_transaction(10)
    # The successor is served.
    successor.begin_transaction()
    successor.produce(TOPIC, value=b"after")
    successor.commit_transaction(30)
    assert _confluent(node, "read_committed") == [*COMMITTED, b"after"]
