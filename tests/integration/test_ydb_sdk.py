"""The official YDB Python SDK (sync and asyncio) against a real node, plaintext and TLS.

Every driver, writer and reader is closed with a timeout; every node is stopped by its
fixture or test.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import ydb
import ydb.aio
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

from tests.integration.node_process import NodeProcess
from vdl.net.ydb.auth import hash_password

DATABASE = "/local"
TIMEOUT = 30


@contextlib.contextmanager
def sync_driver(
    endpoint: str,
    *,
    root_certificates: bytes | None = None,
    credentials: Any = None,
    discovery: bool = True,
    wait: bool = True,
) -> Iterator[ydb.Driver]:
    config = ydb.DriverConfig(
        endpoint=endpoint,
        database=DATABASE,
        root_certificates=root_certificates,
        credentials=credentials,
        disable_discovery=not discovery,
    )
    driver = ydb.Driver(driver_config=config)
    try:
        if wait:
            driver.wait(timeout=10, fail_fast=True)
        yield driver
    finally:
        driver.stop(timeout=10)


def read_messages(reader: Any, count: int, *, commit: bool = True) -> list[Any]:
    """Receive until ``count`` messages arrived (committing each batch), then check that no
    more come."""
    messages: list[Any] = []
    deadline = time.monotonic() + TIMEOUT
    while len(messages) < count:
        assert time.monotonic() < deadline, f"only {len(messages)} of {count} messages"
        try:
            batch = reader.receive_batch(timeout=5)
        except TimeoutError:
            continue
        messages.extend(batch.messages)
        if commit:
            reader.commit_with_ack(batch, timeout=10)
    return messages


def expect_failure(endpoint: Any, error: type[Exception], action: str) -> None:
    """Run ``action`` ("wait_init" or "receive_batch") on a writer/reader that must fail with
    ``error``; closing it re-raises the same error, which is expected too."""
    try:
        with pytest.raises(error):
            if action == "wait_init":
                endpoint.wait_init(timeout=10)
            else:
                endpoint.receive_batch(timeout=10)
    finally:
        with contextlib.suppress(error):
            endpoint.close(flush=False, timeout=10)


def drain(reader: Any, quiet: float = 1.5) -> list[Any]:
    """Everything a reader receives until it has been quiet for ``quiet`` seconds."""
    messages: list[Any] = []
    while True:
        try:
            batch = reader.receive_batch(timeout=quiet)
        except TimeoutError:
            return messages
        messages.extend(batch.messages)
        reader.commit_with_ack(batch, timeout=10)


@pytest.fixture(scope="module")
def plain_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("ydb-plain") / "data") as node:
        yield node


@pytest.fixture(scope="module")
def tls_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory, tls_ca: trustme.CA) -> Iterator[NodeProcess]:
    base = tmp_path_factory.mktemp("ydb-tls")
    cert = tls_ca.issue_cert("localhost", "127.0.0.1")
    cert_file, key_file = base / "node.pem", base / "node.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    for extra in cert.cert_chain_pems[1:]:
        extra.write_to_path(str(cert_file), append=True)
    cert.private_key_pem.write_to_path(str(key_file))
    with NodeProcess(
        base / "data", "--tls-cert", str(cert_file), "--tls-key", str(key_file)
    ) as node:
        yield node


# -- the main path: 10,000 messages, two partitions, commit and resume ---------------------


def test_sync_write_read_commit_resume(plain_node: NodeProcess) -> None:
    path = f"{DATABASE}/orders"
    count = 10_000
    with sync_driver(f"grpc://{plain_node.grpc_address}") as driver:
        topics = driver.topic_client
        topics.create_topic(path, consumers=["billing"], min_active_partitions=2)
        # As YDB: creating an existing topic succeeds and changes nothing (checked below).
        topics.create_topic(path, min_active_partitions=5)

        described = topics.describe_topic(path)
        assert [p.partition_id for p in described.partitions] == [0, 1]
        assert [c.name for c in described.consumers] == ["billing"]

        with topics.writer(path, producer_id="producer-1") as writer:
            info = writer.wait_init(timeout=10)
            assert info.last_seqno == 0
            assert info.supported_codecs == [ydb.TopicCodec.RAW]
            for start in range(0, count, 1000):
                writer.write(
                    [
                        ydb.TopicWriterMessage(
                            f"message-{i}".encode(), metadata_items={"i": str(i)}
                        )
                        for i in range(start, start + 1000)
                    ]
                )
            writer.flush(timeout=TIMEOUT)
            writer.close(timeout=10)

        with topics.reader(path, consumer="billing") as reader:
            messages = read_messages(reader, count)
            reader.close(timeout=10)
        # One producer is pinned to one partition: offsets 0..n-1, seqno 1..n, in order.
        assert len({m.partition_id for m in messages}) == 1
        assert [m.offset for m in messages] == list(range(count))
        assert [m.seqno for m in messages] == list(range(1, count + 1))
        assert [m.data for m in messages] == [f"message-{i}".encode() for i in range(count)]
        assert messages[7].metadata_items == {"i": b"7"}
        assert {m.producer_id for m in messages} == {"producer-1"}

        # The same producer id continues where it left off.
        with topics.writer(path, producer_id="producer-1") as writer:
            assert writer.wait_init(timeout=10).last_seqno == count
            writer.write([ydb.TopicWriterMessage(f"late-{i}".encode()) for i in range(5)])
            writer.flush(timeout=TIMEOUT)
            writer.close(timeout=10)

        # A new reader of the consumer resumes after the committed offset.
        with topics.reader(path, consumer="billing") as reader:
            late = read_messages(reader, 5)
            assert [m.data for m in late] == [f"late-{i}".encode() for i in range(5)]
            assert [m.offset for m in late] == list(range(count, count + 5))
            assert drain(reader, quiet=1.0) == []
            reader.close(timeout=10)

        consumer = topics.describe_consumer(path, "billing", include_stats=True)
        committed = {
            p.partition_id: p.partition_consumer_stats.committed_offset  # type: ignore[union-attr]
            for p in consumer.partitions
        }
        partition = messages[0].partition_id
        assert committed[partition] == count + 5
        assert committed[1 - partition] == 0
        stats = topics.describe_topic(path, include_stats=True)
        assert stats.partitions[partition].partition_stats.partition_end == count + 5


def test_unknown_topic_is_scheme_error(plain_node: NodeProcess) -> None:
    with sync_driver(f"grpc://{plain_node.grpc_address}") as driver:
        topics = driver.topic_client
        with pytest.raises(ydb.SchemeError):
            topics.describe_topic(f"{DATABASE}/missing")
        with pytest.raises(ydb.SchemeError):
            topics.drop_topic(f"{DATABASE}/missing")
        missing = f"{DATABASE}/missing"
        expect_failure(topics.writer(missing, producer_id="p"), ydb.SchemeError, "wait_init")
        expect_failure(topics.reader(missing, consumer="c"), ydb.SchemeError, "receive_batch")


def test_alter_and_drop_topic(plain_node: NodeProcess) -> None:
    path = "altered"  # database-relative paths work too
    with sync_driver(f"grpc://{plain_node.grpc_address}") as driver:
        topics = driver.topic_client
        topics.create_topic(path, consumers=["a"])
        topics.alter_topic(path, add_consumers=["b"], drop_consumers=["a"])
        assert [c.name for c in topics.describe_topic(path).consumers] == ["b"]
        # More partitions are added; fewer are refused, as YDB refuses them.
        topics.alter_topic(path, set_min_active_partitions=3)
        assert len(topics.describe_topic(path).partitions) == 3
        with pytest.raises(ydb.BadRequest):
            topics.alter_topic(path, set_min_active_partitions=2)
        topics.drop_topic(path)
        with pytest.raises(ydb.SchemeError):
            topics.describe_topic(path)


# -- balancing ------------------------------------------------------------------------------


def _write_to_partition(topics: Any, path: str, partition: int, values: list[bytes]) -> None:
    with topics.writer(path, producer_id=f"p{partition}", partition_id=partition) as writer:
        writer.write([ydb.TopicWriterMessage(v) for v in values])
        writer.flush(timeout=TIMEOUT)
        writer.close(timeout=10)


def test_two_readers_get_disjoint_partitions(plain_node: NodeProcess) -> None:
    path = f"{DATABASE}/shared"
    with sync_driver(f"grpc://{plain_node.grpc_address}") as driver:
        topics = driver.topic_client
        topics.create_topic(path, consumers=["group"], min_active_partitions=2)
        first = topics.reader(path, consumer="group")
        second = topics.reader(path, consumer="group")
        try:
            time.sleep(1.0)  # both sessions join; partitions settle one each
            for partition in (0, 1):
                _write_to_partition(topics, path, partition, [b"a%d" % i for i in range(50)])
            got_first, got_second = drain(first), drain(second)
            parts_first = {m.partition_id for m in got_first}
            parts_second = {m.partition_id for m in got_second}
            assert len(parts_first) == len(parts_second) == 1
            assert parts_first != parts_second
            assert len(got_first) == len(got_second) == 50

            second.close(timeout=10)
            for partition in (0, 1):
                _write_to_partition(topics, path, partition, [b"b%d" % i for i in range(20)])
            rest = read_messages(first, 40)
            assert {m.partition_id for m in rest} == {0, 1}
            assert sorted(m.data for m in rest) == sorted([b"b%d" % i for i in range(20)] * 2)
        finally:
            second.close(timeout=10)
            first.close(timeout=10)


# -- restart --------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restart_while_writing(tmp_path: Path, how: str) -> None:
    path = f"{DATABASE}/restart"
    count = 3000
    node = NodeProcess(tmp_path / "data").start()
    try:
        with sync_driver(f"grpc://{node.grpc_address}") as driver:
            topics = driver.topic_client
            topics.create_topic(path, consumers=["c"], min_active_partitions=2)
            with topics.writer(path, producer_id="restarting") as writer:
                writer.wait_init(timeout=10)
                for i in range(count):
                    writer.write(ydb.TopicWriterMessage(b"%d" % i))
                    if i % 200 == 0:
                        time.sleep(0.02)  # keep messages in flight across the restart
                    if i == count // 3:
                        if how == "sigterm":
                            node.stop(30)
                        else:
                            node.kill()  # acked messages were durable; the rest is resent
                        node = NodeProcess(
                            tmp_path / "data",
                            kafka_port=node.kafka_port,
                            grpc_port=node.grpc_port,
                        ).start()
                writer.flush(timeout=60)
                writer.close(timeout=10)
            with topics.reader(path, consumer="c") as reader:
                messages = read_messages(reader, count)
                assert drain(reader, quiet=1.0) == []
                reader.close(timeout=10)
        # No duplicates, no gaps, in order.
        assert [m.seqno for m in messages] == list(range(1, count + 1))
        assert [m.data for m in messages] == [b"%d" % i for i in range(count)]
        assert [m.offset for m in messages] == list(range(count))
    finally:
        node.stop(30)


# -- asyncio and TLS ------------------------------------------------------------------------


async def _async_roundtrip(endpoint: str, root_certificates: bytes | None, topic: str) -> None:
    path = f"{DATABASE}/{topic}"
    aio: Any = ydb.aio  # type: ignore[attr-defined]
    driver = aio.Driver(endpoint=endpoint, database=DATABASE, root_certificates=root_certificates)
    try:
        await driver.wait(timeout=10, fail_fast=True)
        topics = ydb.TopicClientAsyncIO(driver)
        await topics.create_topic(path, consumers=["c"], min_active_partitions=2)
        writer = topics.writer(path, producer_id="async-producer")
        try:
            await asyncio.wait_for(writer.wait_init(), 10)
            await writer.write([ydb.TopicWriterMessage(b"%d" % i) for i in range(500)])
            await asyncio.wait_for(writer.flush(), TIMEOUT)  # type: ignore[no-untyped-call]
        finally:
            await asyncio.wait_for(writer.close(), 10)
        reader = topics.reader(path, consumer="c")
        try:
            seen: list[Any] = []
            while len(seen) < 500:
                batch: Any = await asyncio.wait_for(reader.receive_batch(), 10)
                seen.extend(batch.messages)
                await asyncio.wait_for(reader.commit_with_ack(batch), 10)
            assert [m.data for m in seen] == [b"%d" % i for i in range(500)]
        finally:
            await asyncio.wait_for(reader.close(), 10)
        described = await topics.describe_topic(path)
        assert len(described.partitions) == 2
    finally:
        await asyncio.wait_for(driver.stop(), 15)


def test_asyncio_plaintext(plain_node: NodeProcess) -> None:
    asyncio.run(_async_roundtrip(f"grpc://{plain_node.grpc_address}", None, "async-plain"))


def test_asyncio_tls(tls_node: NodeProcess, tls_ca: trustme.CA) -> None:
    endpoint = f"grpcs://localhost:{tls_node.grpc_port}"
    asyncio.run(_async_roundtrip(endpoint, tls_ca.cert_pem.bytes(), "async-tls"))


def test_sync_tls_with_discovery(tls_node: NodeProcess, tls_ca: trustme.CA) -> None:
    path = f"{DATABASE}/sync-tls"
    endpoint = f"grpcs://localhost:{tls_node.grpc_port}"
    with sync_driver(endpoint, root_certificates=tls_ca.cert_pem.bytes()) as driver:
        topics = driver.topic_client
        topics.create_topic(path, consumers=["c"])
        with topics.writer(path, producer_id="tls") as writer:
            result = writer.write_with_ack(ydb.TopicWriterMessage(b"secret"), timeout=10)
            assert result.offset == 0
            writer.close(timeout=10)
        with topics.reader(path, consumer="c") as reader:
            assert [m.data for m in read_messages(reader, 1)] == [b"secret"]
            reader.close(timeout=10)


# -- authentication -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    base = tmp_path_factory.mktemp("ydb-auth")
    users = base / "users"
    users.write_text(f"# test users\nalice:wonderland\nbob:{hash_password('builder')}\n")
    # Superusers: these tests are about authentication; ACLs are test_security_*'s.
    with NodeProcess(base / "data", "--users", str(users), "--superusers", "alice,bob") as node:
        yield node


@pytest.mark.parametrize(("user", "password"), [("alice", "wonderland"), ("bob", "builder")])
def test_static_credentials(auth_node: NodeProcess, user: str, password: str) -> None:
    path = f"{DATABASE}/auth-{user}"
    credentials = ydb.StaticCredentials.from_user_password(user, password)
    with sync_driver(f"grpc://{auth_node.grpc_address}", credentials=credentials) as driver:
        topics = driver.topic_client
        topics.create_topic(path, consumers=["c"])
        with topics.writer(path, producer_id="p") as writer:
            writer.write_with_ack(ydb.TopicWriterMessage(b"hello"), timeout=10)
            writer.close(timeout=10)
        with topics.reader(path, consumer="c") as reader:
            assert [m.data for m in read_messages(reader, 1)] == [b"hello"]
            reader.close(timeout=10)


def test_wrong_password_is_unauthorized(auth_node: NodeProcess) -> None:
    credentials = ydb.StaticCredentials.from_user_password("alice", "wrong")
    with sync_driver(
        f"grpc://{auth_node.grpc_address}", credentials=credentials, discovery=False, wait=False
    ) as driver:
        driver.wait(timeout=10)
        # The SDK wraps the Login answer (UNAUTHORIZED) in its credentials error.
        with pytest.raises(ydb.issues.ConnectionError) as failure:
            driver.topic_client.describe_topic(f"{DATABASE}/anything")
        cause = failure.value.__cause__ or failure.value.__context__
        assert isinstance(cause, ydb.Unauthorized)
        assert "invalid user or password" in str(cause)


@pytest.mark.parametrize("token", [None, "v1.Zm9yZ2Vk.9999999999999.bm9wZQ"])
def test_missing_or_forged_token_is_unauthorized(auth_node: NodeProcess, token: str | None) -> None:
    credentials: Any = ydb.AccessTokenCredentials(token) if token else None  # type: ignore[no-untyped-call]
    with sync_driver(
        f"grpc://{auth_node.grpc_address}", credentials=credentials, discovery=False, wait=False
    ) as driver:
        driver.wait(timeout=10)
        topics = driver.topic_client
        with pytest.raises(ydb.Unauthorized):
            topics.describe_topic(f"{DATABASE}/anything")
        writer = topics.writer(f"{DATABASE}/anything", producer_id="p")
        expect_failure(writer, ydb.Unauthorized, "wait_init")


# -- the same data through Kafka ----------------------------------------------------------


def test_kafka_produced_records_read_by_ydb(plain_node: NodeProcess) -> None:
    path = f"{DATABASE}/from-kafka"
    with sync_driver(f"grpc://{plain_node.grpc_address}") as driver:
        topics = driver.topic_client
        topics.create_topic(path, consumers=["ydb-reader"])
        producer = Producer({"bootstrap.servers": plain_node.bootstrap, "acks": "all"})
        offsets: list[int | None] = []
        for i in range(100):
            producer.produce(
                "from-kafka",
                key=b"key-%d" % (i % 3),
                value=b"value-%d" % i,
                headers=[("h", b"%d" % i)],
                timestamp=1_700_000_000_000 + i,
                on_delivery=lambda err, msg: offsets.append(msg.offset()),
            )
        assert producer.flush(30) == 0
        assert sorted(o for o in offsets if o is not None) == list(range(100))
        with topics.reader(path, consumer="ydb-reader") as reader:
            messages = read_messages(reader, 100)
            reader.close(timeout=10)
    assert [m.offset for m in messages] == list(range(100))
    assert [m.data for m in messages] == [b"value-%d" % i for i in range(100)]
    assert [m.message_group_id for m in messages] == [f"key-{i % 3}" for i in range(100)]
    assert messages[5].metadata_items == {"h": b"5"}
    assert messages[5].seqno == 0
    assert int(messages[5].created_at.timestamp() * 1000) == 1_700_000_000_005


def test_ydb_written_records_read_by_kafka(plain_node: NodeProcess) -> None:
    path = f"{DATABASE}/to-kafka"
    with sync_driver(f"grpc://{plain_node.grpc_address}") as driver:
        topics = driver.topic_client
        topics.create_topic(path, consumers=["c"])
        with topics.writer(path, producer_id="writer") as writer:
            writer.write(
                [
                    ydb.TopicWriterMessage(b"ydb-%d" % i, metadata_items={"n": b"%d" % i})
                    for i in range(50)
                ]
            )
            writer.flush(timeout=TIMEOUT)
            writer.close(timeout=10)
    consumer = KafkaConsumer(
        bootstrap_servers=plain_node.bootstrap, enable_auto_commit=False, group_id=None
    )
    try:
        partition = TopicPartition("to-kafka", 0)
        consumer.assign([partition])
        consumer.seek(partition, 10)
        records: list[Any] = []
        deadline = time.monotonic() + TIMEOUT
        while len(records) < 40 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                records.extend(batch)
    finally:
        consumer.close()
    assert [r.offset for r in records] == list(range(10, 50))
    assert [r.value for r in records] == [b"ydb-%d" % i for i in range(10, 50)]
    assert [r.key for r in records] == [b"writer"] * 40
    headers = dict(records[0].headers)
    assert headers["n"] == b"10"
    assert headers["__ydb.seq_no"] == b"11"
