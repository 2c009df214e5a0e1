"""Kafka transactions (KIP-98, KIP-447) end to end on one real node, with the transactional
producers and read_committed consumers of confluent-kafka, kafka-python and aiokafka.

Each test writes a known pattern of committed, aborted and non-transactional records and
then reads it back twice: read_committed must give exactly the committed and plain records
in offset order, and read_uncommitted must give the aborted ones too (so they were written
and the committed view really filters them). Zombie fencing: a second producer with the same
transactional id fences the first, whose open transaction is aborted.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.structs import OffsetAndMetadata

from tests.integration.kafka_clients import confluent_create_topic
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until

Read = dict[int, list[tuple[int, bytes]]]  # partition -> [(offset, value)]
FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    # No initial rebalance delay: the kafka-python test's group forms at once.
    data = tmp_path_factory.mktemp("txn") / "data"
    with NodeProcess(data, "--group-initial-rebalance-delay-ms", "0") as process:
        yield process


def _topic(node: NodeProcess, partitions: int) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    confluent_create_topic(node.bootstrap, name, partitions)
    return name


def _txn_producer(bootstrap: str, transactional_id: str, **config: Any) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 2,
            **config,
        }
    )
    producer.init_transactions(30)
    return producer


class Plain:
    """A non-transactional idempotent producer whose every write is acknowledged before
    the next step of a test, so offsets follow the order of the steps."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
        )

    def write(self, topic: str, partition: int, value: bytes) -> None:
        errors: list[KafkaError] = []
        self.producer.produce(
            topic,
            value=value,
            partition=partition,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
        assert self.producer.flush(30) == 0
        assert not errors, errors


def _confluent_read(
    bootstrap: str, topic: str, partitions: int, isolation: str, until: set[bytes]
) -> Read:
    """Everything from the beginning of every partition until each value of `until` came."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    read: Read = defaultdict(list)
    missing = set(until)

    def step() -> None:
        for msg in consumer.consume(500, 0.2):
            assert msg.error() is None, msg.error()
            partition, offset, value = msg.partition(), msg.offset(), msg.value()
            assert partition is not None and offset is not None and value is not None
            read[partition].append((offset, value))
            missing.discard(value)

    try:
        wait_until(lambda: not missing, f"{isolation} read of {sorted(missing)}", step=step)
    finally:
        consumer.close()
    return read


def _values(read: Read) -> dict[int, list[bytes]]:
    """Per partition, the values in offset order; the offsets must strictly increase."""
    for partition, records in read.items():
        offsets = [offset for offset, _ in records]
        assert offsets == sorted(set(offsets)), f"partition {partition}: {offsets}"
    return {p: [v for _, v in records] for p, records in read.items()}


def test_confluent_commit_and_abort_among_plain_writes(node: NodeProcess) -> None:
    topic = _topic(node, 2)
    plain = Plain(node.bootstrap)
    txn = _txn_producer(node.bootstrap, f"tx-{topic}")
    committed: dict[int, list[bytes]] = defaultdict(list)  # what read_committed must give
    everything: dict[int, list[bytes]] = defaultdict(list)  # what read_uncommitted must give

    def plain_write(partition: int, value: bytes) -> None:
        plain.write(topic, partition, value)
        committed[partition].append(value)
        everything[partition].append(value)

    def transaction(name: str, commit: bool, plain_inside: bool) -> None:
        txn.begin_transaction()
        for i in range(3):
            for partition in range(2):
                txn.produce(topic, value=f"{name}-{i}".encode(), partition=partition)
        assert txn.flush(30) == 0  # in the log before the plain write and the decision
        for partition in range(2):
            for i in range(3):
                everything[partition].append(f"{name}-{i}".encode())
                if commit:
                    committed[partition].append(f"{name}-{i}".encode())
        if plain_inside:
            plain_write(0, f"plain-inside-{name}".encode())
        if commit:
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)

    plain_write(0, b"plain-0")
    transaction("c1", commit=True, plain_inside=False)
    plain_write(1, b"plain-1")
    transaction("a1", commit=False, plain_inside=True)
    transaction("a2", commit=False, plain_inside=False)
    transaction("c2", commit=True, plain_inside=True)
    plain_write(0, b"end-0")
    plain_write(1, b"end-1")

    read_committed = _confluent_read(
        node.bootstrap, topic, 2, "read_committed", {b"end-0", b"end-1"}
    )
    assert _values(read_committed) == committed
    read_uncommitted = _confluent_read(
        node.bootstrap, topic, 2, "read_uncommitted", {b"end-0", b"end-1"}
    )
    assert _values(read_uncommitted) == everything
    # Each transaction left one control record (its marker) in each partition, at an
    # offset neither view returns. The coordinator writes the markers after answering
    # EndTxn, so the last ones may follow the "end" records.
    wait_until(
        lambda: _ends(node.bootstrap, topic, "read_uncommitted", 2),
        "a marker of each transaction in each partition",
        done=lambda ends: ends == {p: len(everything[p]) + 4 for p in range(2)},
    )


def _ends(bootstrap: str, topic: str, isolation: str, partitions: int = 1) -> dict[int, int]:
    """Each partition's end as ListOffsets(latest) answers a consumer of `isolation`."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    try:
        tps = [KTopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: int(o) for tp, o in consumer.end_offsets(tps, 10000).items()}
    finally:
        consumer.close()


def _watermarks(bootstrap: str, topic: str, isolation: str) -> int:
    return _ends(bootstrap, topic, isolation)[0]


@pytest.mark.slow  # keeps the default run within its time budget
def test_read_committed_stops_at_an_open_transaction(node: NodeProcess) -> None:
    topic = _topic(node, 1)
    plain = Plain(node.bootstrap)
    plain.write(topic, 0, b"before")
    txn = _txn_producer(node.bootstrap, f"tx-{topic}")
    txn.begin_transaction()
    txn.produce(topic, value=b"open", partition=0)
    assert txn.flush(30) == 0
    plain.write(topic, 0, b"after")  # offset 2, behind the open transaction at offset 1

    # The last stable offset is the open transaction's first offset (KIP-98).
    assert _watermarks(node.bootstrap, topic, "read_uncommitted") == 3
    assert _watermarks(node.bootstrap, topic, "read_committed") == 1
    consumer = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": "open-reader",
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[bytes | None] = []

        def step() -> None:
            got.extend(m.value() for m in consumer.consume(10, 0.2) if m.error() is None)

        wait_until(lambda: got == [b"before"], "the record before the transaction", step=step)
        # Absence over a bounded stretch: the consumer keeps fetching at the LSO meanwhile.
        quiet_until = time.monotonic() + 1.0
        while time.monotonic() < quiet_until:
            step()
        assert got == [b"before"], "read_committed read past an open transaction"
        txn.commit_transaction(30)
        wait_until(
            lambda: got == [b"before", b"open", b"after"], "the committed records", step=step
        )
    finally:
        consumer.close()
    assert _watermarks(node.bootstrap, topic, "read_committed") == 4


def _fatal(exc: KafkaException) -> KafkaError:
    error = exc.args[0]
    assert isinstance(error, KafkaError)
    return error


def test_a_second_producer_fences_the_first(node: NodeProcess) -> None:
    topic = _topic(node, 1)
    transactional_id = f"tx-{topic}"
    zombie = _txn_producer(node.bootstrap, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie-open", partition=0)
    assert zombie.flush(30) == 0

    # The new instance's InitProducerId aborts the zombie's open transaction and bumps
    # the epoch.
    successor = _txn_producer(node.bootstrap, transactional_id)
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(30)

    zombie.produce(topic, value=b"zombie-late", partition=0)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    error = _fatal(raised.value)
    assert error.fatal(), error
    # PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for request versions before it existed
    # (librdkafka reports either as fatal, or as its own _FENCED).
    assert error.code() in FENCED, error

    Plain(node.bootstrap).write(topic, 0, b"end")
    read = _confluent_read(node.bootstrap, topic, 1, "read_committed", {b"end"})
    assert _values(read) == {0: [b"successor", b"end"]}
    everything = _confluent_read(node.bootstrap, topic, 1, "read_uncommitted", {b"end"})
    assert b"zombie-open" in _values(everything)[0]
    assert b"zombie-late" not in _values(everything)[0]


@pytest.mark.slow  # keeps the default run within its time budget
def test_the_coordinator_aborts_a_transaction_past_its_timeout(node: NodeProcess) -> None:
    """An Ongoing transaction older than its timeout is aborted by the coordinator, with an
    epoch bump (as Kafka's timed-out transaction cleanup does): read_committed moves past
    it without its record, and the producer can no longer commit it."""
    topic = _topic(node, 1)
    txn = _txn_producer(node.bootstrap, f"tx-{topic}", **{"transaction.timeout.ms": 1000})
    txn.begin_transaction()
    txn.produce(topic, value=b"expired", partition=0)
    assert txn.flush(30) == 0
    # The abort marker makes the last stable offset the log's end again.
    wait_until(
        lambda: _watermarks(node.bootstrap, topic, "read_committed"),
        "the timed-out transaction aborted",
        done=lambda lso: lso == 2 == _watermarks(node.bootstrap, topic, "read_uncommitted"),
    )
    with pytest.raises(KafkaException) as raised:
        txn.commit_transaction(30)
    error = _fatal(raised.value)
    assert error.fatal() or error.txn_requires_abort(), error
    Plain(node.bootstrap).write(topic, 0, b"after")
    read = _confluent_read(node.bootstrap, topic, 1, "read_committed", {b"after"})
    assert _values(read) == {0: [b"after"]}


def _committed_offset(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], 10)
        return int(tp.offset)
    finally:
        consumer.close()


def test_kafka_python_transactions_and_offsets(node: NodeProcess) -> None:
    """kafka-python's transactional producer: commit, abort, and consumed offsets sent in
    the transaction (a subscribed consumer's group metadata, KIP-447), which become the
    group's committed offsets only when the transaction commits."""
    source = _topic(node, 1)
    sink = _topic(node, 1)
    group = f"g-{sink}"
    Plain(node.bootstrap).write(source, 0, b"in-0")
    Plain(node.bootstrap).write(source, 0, b"in-1")
    consumer = KafkaConsumer(
        bootstrap_servers=node.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        # A group leader whose metadata does not have the new topic yet assigns nothing
        # and rejoins only when its metadata is refreshed: refresh it often.
        metadata_max_age_ms=500,
    )
    producer = KafkaProducer(bootstrap_servers=node.bootstrap, transactional_id=f"tx-{sink}")
    try:
        consumer.subscribe([source])
        records: list[Any] = []

        def poll_input() -> None:
            for batch in consumer.poll(200).values():
                records.extend(batch)

        wait_until(lambda: len(records) >= 2, "the two input records", step=poll_input)
        assert [r.value for r in records] == [b"in-0", b"in-1"]
        producer.init_transactions()
        tp = KTopicPartition(source, 0)
        for commit, position in ((False, 1), (True, 2)):
            producer.begin_transaction()
            producer.send(sink, value=f"out-{commit}".encode(), partition=0)
            producer.send_offsets_to_transaction(
                {tp: OffsetAndMetadata(position, "", -1)}, consumer.group_metadata()
            )
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
                # Aborted: the pending offset is dropped, nothing is committed.
                assert _committed_offset(node.bootstrap, group, source) < 0
        assert _committed_offset(node.bootstrap, group, source) == 2
    finally:
        producer.close(10)
        consumer.close()
    reader = KafkaConsumer(
        bootstrap_servers=node.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    try:
        reader.assign([KTopicPartition(sink, 0)])
        got: list[bytes] = []

        def poll_output() -> None:
            for batch in reader.poll(200).values():
                got.extend(r.value for r in batch)

        wait_until(lambda: b"out-True" in got, "the committed output", step=poll_output)
        assert got == [b"out-True"]
    finally:
        reader.close()


async def _aiokafka_round(bootstrap: str, topic: str, group: str) -> tuple[list[bytes], int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"tx-{topic}")
    await producer.start()
    tp = AioTopicPartition(topic, 0)
    try:
        async with producer.transaction():
            await producer.send_and_wait(topic, b"aio-committed", partition=0)
            await producer.send_offsets_to_transaction({tp: 1}, group)
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"aio-aborted", partition=0)
        await producer.send_offsets_to_transaction({tp: 2}, group)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"aio-end", partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        got: list[bytes] = []
        deadline = time.monotonic() + 40
        while b"aio-end" not in got:
            assert time.monotonic() < deadline, got
            for records in (await consumer.getmany(timeout_ms=200)).values():
                got.extend(r.value for r in records)
    finally:
        await consumer.stop()
    group_reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await group_reader.start()
    try:
        committed = await group_reader.committed(tp)
    finally:
        await group_reader.stop()
    return got, committed


def test_aiokafka_transactions(node: NodeProcess) -> None:
    topic = _topic(node, 1)
    got, committed = asyncio.run(_aiokafka_round(node.bootstrap, topic, f"g-{topic}"))
    assert got == [b"aio-committed", b"aio-end"]
    # The offsets sent in the committed transaction, not those of the aborted one.
    assert committed == 1
