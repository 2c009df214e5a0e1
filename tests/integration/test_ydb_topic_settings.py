"""YDB topic settings the server does not enforce are refused, never silently ignored, and
partition locations name each partition's leader: the official YDB SDK against real nodes.

A refused setting answers BAD_REQUEST naming it, and a plain create/alter/describe on the
same node works right after. On three nodes, DescribeTopic/DescribeConsumer with
``include_location`` name the leader Kafka Metadata names for the same partition (VDL topics
are shared by both protocols), and after that leader is killed they name the new one with a
higher generation.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import ydb

from tests.integration.cluster_support import Cluster, partition_seen_by
from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until
from vdl.net.ydb.auth import AUTH_TICKET_HEADER
from vdl.net.ydb.operation import StatusIds
from vdl.net.ydb.protos import ydb_auth_pb2, ydb_topic_pb2

DATABASE = "/local"
TIMEOUT = 30


@contextlib.contextmanager
def driver_for(address: str, *, discovery: bool = True) -> Iterator[ydb.Driver]:
    config = ydb.DriverConfig(
        endpoint=f"grpc://{address}", database=DATABASE, disable_discovery=not discovery
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=10, fail_fast=True)
        yield driver
    finally:
        driver.stop(timeout=10)


def locations_by_describe_topic(address: str, path: str) -> dict[int, tuple[int, int]]:
    """partition -> (node_id, generation) from DescribeTopic with include_location (the SDK's
    describe_topic has no include_location, so the request goes over grpcio directly)."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            "/Ydb.Topic.V1.TopicService/DescribeTopic",
            request_serializer=ydb_topic_pb2.DescribeTopicRequest.SerializeToString,
            response_deserializer=ydb_topic_pb2.DescribeTopicResponse.FromString,
        )
        response = call(
            ydb_topic_pb2.DescribeTopicRequest(path=path, include_location=True), timeout=5
        )
    if response.operation.status != StatusIds.SUCCESS:
        return {}  # e.g. SCHEME_ERROR on a node that has not applied the topic yet
    result = ydb_topic_pb2.DescribeTopicResult()
    response.operation.result.Unpack(result)
    return {
        p.partition_id: (p.partition_location.node_id, p.partition_location.generation)
        for p in result.partitions
        if p.HasField("partition_location")
    }


def describe_partition(address: str, path: str, partition: int, token: str = "") -> Any:
    """DescribePartition (absent from the SDK 3.33.2) over grpcio: (operation, result)."""
    metadata = [(AUTH_TICKET_HEADER, token)] if token else None
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            "/Ydb.Topic.V1.TopicService/DescribePartition",
            request_serializer=ydb_topic_pb2.DescribePartitionRequest.SerializeToString,
            response_deserializer=ydb_topic_pb2.DescribePartitionResponse.FromString,
        )
        response = call(
            ydb_topic_pb2.DescribePartitionRequest(
                path=path, partition_id=partition, include_location=True, include_stats=True
            ),
            timeout=5,
            metadata=metadata,
        )
    result = ydb_topic_pb2.DescribePartitionResult()
    response.operation.result.Unpack(result)
    return response.operation, result


def locations_by_describe_partition(
    address: str, path: str, partitions: int
) -> dict[int, tuple[int, int]]:
    found = {}
    for p in range(partitions):
        operation, result = describe_partition(address, path, p)
        if operation.status != StatusIds.SUCCESS:
            return {}
        location = result.partition.partition_location
        if result.partition.HasField("partition_location"):
            found[p] = (location.node_id, location.generation)
    return found


def locations_by_describe_consumer(
    driver: ydb.Driver, path: str, consumer: str
) -> dict[int, tuple[int, int]]:
    described = driver.topic_client.describe_consumer(path, consumer, include_location=True)
    return {
        p.partition_id: (p.partition_location.node_id, p.partition_location.generation)
        for p in described.partitions
        if p.partition_location is not None
    }


# -- refused settings, one node ---------------------------------------------------------------


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("ydb-settings") / "data") as process:
        yield process


@pytest.fixture(scope="module")
def driver(node: NodeProcess) -> Iterator[ydb.Driver]:
    with driver_for(node.grpc_address) as d:
        yield d


SCALE_UP = ydb.TopicAutoPartitioningStrategy.SCALE_UP
CREATE_REFUSED: list[tuple[str, dict[str, Any]]] = [
    (
        "auto-partitioning",
        {"auto_partitioning_settings": ydb.TopicAutoPartitioningSettings(strategy=SCALE_UP)},
    ),
    (
        "auto-partitioning up_utilization_percent",
        {
            "auto_partitioning_settings": ydb.TopicAutoPartitioningSettings(
                strategy=ydb.TopicAutoPartitioningStrategy.DISABLED, up_utilization_percent=80
            )
        },
    ),
    ("max_active_partitions", {"min_active_partitions": 1, "max_active_partitions": 4}),
    ("partition_count_limit", {"partition_count_limit": 8}),
    ("partition_write_speed_bytes_per_second", {"partition_write_speed_bytes_per_second": 1024}),
    ("partition_write_burst_bytes", {"partition_write_burst_bytes": 4096}),
    ("metering mode", {"metering_mode": ydb.TopicMeteringMode.REQUEST_UNITS}),
    ("important consumer", {"consumers": [ydb.TopicConsumer("audit", important=True)]}),
]

ALTER_REFUSED: list[tuple[str, dict[str, Any]]] = [
    (
        "auto-partitioning",
        {
            "alter_auto_partitioning_settings": ydb.TopicAlterAutoPartitioningSettings(
                set_strategy=SCALE_UP
            )
        },
    ),
    (
        "auto-partitioning stabilization_window",
        {
            "alter_auto_partitioning_settings": ydb.TopicAlterAutoPartitioningSettings(
                set_stabilization_window=datetime.timedelta(seconds=30)
            )
        },
    ),
    ("max_active_partitions", {"set_max_active_partitions": 5}),
    ("partition_count_limit", {"set_partition_count_limit": 5}),
    (
        "partition_write_speed_bytes_per_second",
        {"set_partition_write_speed_bytes_per_second": 2048},
    ),
    ("partition_write_burst_bytes", {"set_partition_write_burst_bytes": 2048}),
    ("metering mode", {"set_metering_mode": ydb.TopicMeteringMode.RESERVED_CAPACITY}),
    ("important consumer", {"add_consumers": [ydb.TopicConsumer("audit", important=True)]}),
    (
        "important consumer",
        {"alter_consumers": [ydb.TopicAlterConsumer("reader", set_important=True)]},
    ),
]


def expect_refused(setting: str, action: Callable[[], object]) -> None:
    with pytest.raises(ydb.BadRequest) as refused:
        action()
    message = str(refused.value)
    assert setting in message, message
    assert "not supported by this server" in message, message


@pytest.mark.parametrize(("setting", "kwargs"), CREATE_REFUSED, ids=[s for s, _ in CREATE_REFUSED])
def test_create_refuses_unenforced_setting(
    driver: ydb.Driver, setting: str, kwargs: dict[str, Any]
) -> None:
    topics = driver.topic_client
    path = f"{DATABASE}/refused-create"
    expect_refused(setting, lambda: topics.create_topic(path, **kwargs))
    # Nothing was created; a plain create of the same path works and shows the defaults.
    with pytest.raises(ydb.SchemeError):
        topics.describe_topic(path)
    topics.create_topic(path, consumers=["reader"], min_active_partitions=2)
    try:
        described = topics.describe_topic(path)
        assert len(described.partitions) == 2
        assert described.max_active_partitions == 2
        assert described.partition_write_speed_bytes_per_second == 0
        assert described.partition_write_burst_bytes == 0
        assert [(c.name, c.important) for c in described.consumers] == [("reader", False)]
    finally:
        topics.drop_topic(path)


@pytest.mark.parametrize(("setting", "kwargs"), ALTER_REFUSED, ids=[s for s, _ in ALTER_REFUSED])
def test_alter_refuses_unenforced_setting(
    driver: ydb.Driver, setting: str, kwargs: dict[str, Any]
) -> None:
    topics = driver.topic_client
    path = f"{DATABASE}/refused-alter"
    topics.create_topic(path, consumers=["reader"])
    try:
        expect_refused(setting, lambda: topics.alter_topic(path, **kwargs))
        # The refused alter changed nothing; plain alters (defaults included) still work.
        described = topics.describe_topic(path)
        assert [(c.name, c.important) for c in described.consumers] == [("reader", False)]
        assert len(described.partitions) == 1
        topics.alter_topic(
            path,
            set_min_active_partitions=2,
            set_max_active_partitions=2,
            set_partition_write_speed_bytes_per_second=0,
            set_metering_mode=ydb.TopicMeteringMode.UNSPECIFIED,
            add_consumers=["other"],
            alter_consumers=[ydb.TopicAlterConsumer("reader", set_important=False)],
            alter_auto_partitioning_settings=ydb.TopicAlterAutoPartitioningSettings(
                set_strategy=ydb.TopicAutoPartitioningStrategy.DISABLED
            ),
        )
        described = topics.describe_topic(path)
        assert len(described.partitions) == 2
        assert sorted(c.name for c in described.consumers) == ["other", "reader"]
    finally:
        topics.drop_topic(path)


def test_values_outside_the_enums_are_refused(node: NodeProcess, driver: ydb.Driver) -> None:
    """A raw client's enum numbers the proto does not define: BAD_REQUEST naming the
    setting, and the node goes on serving."""
    path = f"{DATABASE}/odd-enums"
    odd = ydb_topic_pb2.CreateTopicRequest(path=path, metering_mode=99)  # type: ignore[arg-type]
    odd.partitioning_settings.auto_partitioning_settings.strategy = 77  # type: ignore[assignment]
    with grpc.insecure_channel(node.grpc_address) as channel:
        call = channel.unary_unary(
            "/Ydb.Topic.V1.TopicService/CreateTopic",
            request_serializer=ydb_topic_pb2.CreateTopicRequest.SerializeToString,
            response_deserializer=ydb_topic_pb2.CreateTopicResponse.FromString,
        )
        answer = call(odd, timeout=5).operation
        assert answer.status == StatusIds.BAD_REQUEST, answer
        assert "auto-partitioning is not supported" in answer.issues[0].message
        odd.partitioning_settings.ClearField("auto_partitioning_settings")
        answer = call(odd, timeout=5).operation
        assert answer.status == StatusIds.BAD_REQUEST, answer
        assert "metering mode is not supported" in answer.issues[0].message
    driver.topic_client.create_topic(path)
    driver.topic_client.drop_topic(path)


def test_defaults_the_sdk_sends_are_accepted(node: NodeProcess, driver: ydb.Driver) -> None:
    """Settings at their defaults, stated explicitly, are what is in force: accepted."""
    topics = driver.topic_client
    path = f"{DATABASE}/explicit-defaults"
    topics.create_topic(
        path,
        min_active_partitions=3,
        max_active_partitions=3,
        partition_count_limit=3,
        partition_write_speed_bytes_per_second=0,
        partition_write_burst_bytes=0,
        metering_mode=ydb.TopicMeteringMode.UNSPECIFIED,
        consumers=[ydb.TopicConsumer("c", important=False)],
        auto_partitioning_settings=ydb.TopicAutoPartitioningSettings(
            strategy=ydb.TopicAutoPartitioningStrategy.DISABLED
        ),
    )
    try:
        described = topics.describe_topic(path)
        assert described.min_active_partitions == 3
        assert described.max_active_partitions == 3
        # One node: every partition is led by it, in its one generation.
        locations = locations_by_describe_topic(node.grpc_address, path)
        assert set(locations) == {0, 1, 2}
        assert len(set(locations.values())) == 1
    finally:
        topics.drop_topic(path)


def test_describe_partition(node: NodeProcess, driver: ydb.Driver) -> None:
    topics = driver.topic_client
    path = f"{DATABASE}/described-partition"
    topics.create_topic(path, min_active_partitions=2)
    try:
        with topics.writer(path, producer_id="p", partition_id=1) as writer:
            writer.write_with_ack([ydb.TopicWriterMessage(b"x%d" % i) for i in range(3)])
        operation, result = describe_partition(node.grpc_address, path, 1)
        assert operation.status == StatusIds.SUCCESS, operation
        info = result.partition
        assert (info.partition_id, info.active) == (1, True)
        assert (info.partition_stats.partition_offsets.end, info.partition_location.node_id) == (
            3,
            locations_by_describe_topic(node.grpc_address, path)[1][0],
        )
        # A partition the topic does not have: BAD_REQUEST; the next call is served.
        operation, _ = describe_partition(node.grpc_address, path, 2)
        assert operation.status == StatusIds.BAD_REQUEST, operation
        assert "no partition 2" in operation.issues[0].message
        operation, _ = describe_partition(node.grpc_address, path, 0)
        assert operation.status == StatusIds.SUCCESS, operation
    finally:
        topics.drop_topic(path)


def login(address: str, user: str, password: str) -> str:
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            "/Ydb.Auth.V1.AuthService/Login",
            request_serializer=ydb_auth_pb2.LoginRequest.SerializeToString,
            response_deserializer=ydb_auth_pb2.LoginResponse.FromString,
        )
        response = call(ydb_auth_pb2.LoginRequest(user=user, password=password), timeout=5)
    result = ydb_auth_pb2.LoginResult()
    response.operation.result.Unpack(result)
    return str(result.token)


def test_describe_partition_needs_describe_on_the_topic(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("root:root-pw\nguest:guest-pw\n")
    with NodeProcess(tmp_path / "data", "--users", str(users), "--superusers", "root") as node:
        path = f"{DATABASE}/guarded"
        credentials = ydb.StaticCredentials.from_user_password("root", "root-pw")
        config = ydb.DriverConfig(
            endpoint=f"grpc://{node.grpc_address}",
            database=DATABASE,
            credentials=credentials,
            disable_discovery=True,
        )
        root_driver = ydb.Driver(driver_config=config)
        try:
            root_driver.wait(timeout=10, fail_fast=True)
            root_driver.topic_client.create_topic(path)
        finally:
            root_driver.stop(timeout=10)
        # Without describe on the topic: UNAUTHORIZED, before anything is described.
        guest = login(node.grpc_address, "guest", "guest-pw")
        operation, result = describe_partition(node.grpc_address, path, 0, guest)
        assert operation.status == StatusIds.UNAUTHORIZED, operation
        assert not result.HasField("partition")
        operation, _ = describe_partition(node.grpc_address, path, 0)
        assert operation.status == StatusIds.UNAUTHORIZED, operation
        # The superuser is served right after.
        root = login(node.grpc_address, "root", "root-pw")
        operation, result = describe_partition(node.grpc_address, path, 0, root)
        assert operation.status == StatusIds.SUCCESS, operation
        assert result.partition.partition_location.node_id > 0


def receive(reader: Any, count: int) -> list[bytes]:
    """The data of the first ``count`` messages a reader gets (more in the last batch too)."""
    got: list[bytes] = []

    def enough() -> bool:
        with contextlib.suppress(TimeoutError):
            got.extend(m.data for m in reader.receive_batch(timeout=1).messages)
        return len(got) >= count

    wait_until(enough, f"{count} messages", every=0)
    return got


def test_consumer_read_from_is_enforced(driver: ydb.Driver) -> None:
    """A consumer's `read_from` skips what was written before it, as the session's does."""
    topics = driver.topic_client
    path = f"{DATABASE}/consumer-read-from"
    topics.create_topic(path, consumers=["all", "late"])
    try:
        with topics.writer(path, producer_id="p", partition_id=0) as writer:
            writer.write_with_ack([ydb.TopicWriterMessage(b"early%d" % i) for i in range(5)])
            cutoff = datetime.datetime.now(datetime.UTC) + datetime.timedelta(milliseconds=5)
            topics.alter_topic(
                path, alter_consumers=[ydb.TopicAlterConsumer("late", set_read_from=cutoff)]
            )
            wait_until(
                lambda: datetime.datetime.now(datetime.UTC) > cutoff,
                "the clock passing the cutoff",
                every=0.005,
            )
            writer.write_with_ack([ydb.TopicWriterMessage(b"late%d" % i) for i in range(5)])
        described = topics.describe_topic(path)
        late = next(c for c in described.consumers if c.name == "late")
        assert late.read_from is not None
        for consumer, expected in (
            ("late", [b"late%d" % i for i in range(5)]),
            ("all", [b"early%d" % i for i in range(5)] + [b"late%d" % i for i in range(5)]),
        ):
            reader = topics.reader(path, consumer=consumer)
            try:
                assert receive(reader, len(expected)) == expected, consumer
            finally:
                reader.close(timeout=10)
    finally:
        topics.drop_topic(path)


# -- locations on three nodes ------------------------------------------------------------------


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(Path(tmp_path_factory.mktemp("ydb-locations")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def kafka_leaders(cluster: Cluster, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's leader as Kafka Metadata of each alive node says (all must agree)."""
    seen: dict[int, set[int]] = {p: set() for p in range(partitions)}
    for n in cluster.nodes.values():
        if n.alive():
            for p in range(partitions):
                seen[p].add(partition_seen_by(n, topic, p)[1])
    return {p: next(iter(ids)) if len(ids) == 1 else -1 for p, ids in seen.items()}


def test_locations_name_the_leader_and_follow_a_failover(three: Cluster) -> None:
    path, name, consumer = f"{DATABASE}/located", "located", "c"
    with driver_for(three.nodes[1].grpc_address, discovery=False) as admin:
        wait_until(
            lambda: (
                admin.topic_client.create_topic(path, consumers=[consumer], min_active_partitions=2)
                or True
            ),
            "the topic is created",
            tolerate=(ydb.Unavailable, ydb.ConnectionError),
        )
    for p in (0, 1):
        three.wait_for_preferred_leader(name, p)
    drivers = contextlib.ExitStack()
    per_node = {
        i: drivers.enter_context(driver_for(n.grpc_address, discovery=False))
        for i, n in three.nodes.items()
    }

    def agreed() -> tuple[dict[int, tuple[int, int]], dict[int, int]] | None:
        """Locations every alive node gives, when they all match Kafka Metadata's leaders."""
        kafka = kafka_leaders(three, name, 2)
        answers = []
        for i, n in three.nodes.items():
            if not n.alive():
                continue
            answers.append(locations_by_describe_topic(n.grpc_address, path))
            answers.append(locations_by_describe_partition(n.grpc_address, path, 2))
            answers.append(locations_by_describe_consumer(per_node[i], path, consumer))
        first = answers[0]
        if all(a == first for a in answers) and {p: loc[0] for p, loc in first.items()} == kafka:
            return first, kafka
        return None

    # A node that has not applied the topic yet lists no partitions (KeyError) and
    # describes none (SCHEME_ERROR): not yet.
    settling = (KeyError, ydb.SchemeError)
    try:
        found = wait_until(agreed, "locations agreeing with Kafka's leaders", tolerate=settling)
        assert found is not None
        before, leaders = found
        assert all(leaders[p] > 0 and before[p][1] > 0 for p in (0, 1))

        victim = leaders[0]
        three.nodes[victim].kill()
        three.wait_for_leader(name, 0, exclude=victim)

        def moved() -> tuple[dict[int, tuple[int, int]], dict[int, int]] | None:
            found = agreed()
            if found is None or found[0][0][0] == victim:
                return None
            return found

        moved_to = wait_until(moved, "locations naming the new leader", tolerate=settling)
        assert moved_to is not None
        after = moved_to[0]
        assert after[0][1] > before[0][1], (before, after)
    finally:
        # The killed node stays down: the module's cluster is stopped after this test.
        drivers.close()
