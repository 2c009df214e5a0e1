"""The Kafka group handlers at every advertised version, through dispatch, in memory."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import trio
from kafka.protocol.consumer.group import (
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

from tests.unit.groups.test_group_offsets import CountingMeta
from tests.unit.kafka.kafka_oracle import kp_frame
from vdl.broker.broker import Broker
from vdl.groups.coordinator import GroupConfig
from vdl.groups.service import GroupService
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import NodeInfo, RequestContext
from vdl.net.kafka.apis.dispatch import dispatch
from vdl.net.kafka.control_codec import request_class, response_class
from vdl.net.kafka.header import parse_request_header
from vdl.net.kafka.versions import ADVERTISED, ApiKey

NODE = NodeInfo(node_id=7, host="127.0.0.1", port=9092, cluster_id="c")
TOPIC = "t"


@dataclass
class _Topic:
    partitions: int


@dataclass
class _Catalog:
    topics: dict[str, _Topic] = field(default_factory=lambda: {TOPIC: _Topic(2)})

    def get(self, name: str) -> _Topic | None:
        return self.topics.get(name)


@dataclass
class FakeBroker:
    """Just what the group handlers touch."""

    groups: GroupService | None
    catalog: _Catalog = field(default_factory=_Catalog)
    cluster: None = None  # one node: it coordinates every group
    transactions: None = None  # no transaction coordinator attached


def versions(key: ApiKey) -> list[int]:
    low, high = ADVERTISED[key]
    return list(range(low, high + 1))


class Client:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = cast(Broker, broker)
        self.correlation = itertools.count(1)

    async def call(self, key: ApiKey, version: int, /, **fields: Any) -> Any:
        request = request_class(key, version)(**fields, version=version)
        frame = kp_frame(request, correlation_id=next(self.correlation), client_id="cli")
        header = parse_request_header(frame)
        pending = dispatch(RequestContext(header, frame, self.broker, NODE))
        out = await pending()
        assert isinstance(out, bytes)
        return response_class(key, version).decode(out, version=version, header=True, framed=True)


@pytest.fixture
async def client() -> Iterator[Client]:  # type: ignore[misc]
    service = GroupService(
        CountingMeta(), GroupConfig(initial_rebalance_delay_ms=0), wall_clock_ms=lambda: 99
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        yield Client(FakeBroker(service))
        service.stop()


async def join(client: Client, version: int, group: str) -> Any:
    fields: dict[str, Any] = {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"sub")],
    }
    if version >= 1:
        fields["rebalance_timeout_ms"] = 10_000
    response = await client.call(ApiKey.JOIN_GROUP, version, **fields)
    if version >= 4:
        assert response.error_code == ErrorCode.MEMBER_ID_REQUIRED
        fields["member_id"] = response.member_id
        response = await client.call(ApiKey.JOIN_GROUP, version, **fields)
    assert response.error_code == 0
    return response


@pytest.mark.parametrize("version", versions(ApiKey.JOIN_GROUP))
async def test_join_sync_heartbeat_leave(client: Client, version: int) -> None:
    group = f"g{version}"
    joined = await join(client, version, group)
    member, generation = joined.member_id, joined.generation_id
    assert (joined.leader, generation, joined.protocol_name) == (member, 1, "range")
    assert [(m.member_id, m.metadata) for m in joined.members] == [(member, b"sub")]

    sync_version = min(version, ADVERTISED[ApiKey.SYNC_GROUP][1])
    synced = await client.call(
        ApiKey.SYNC_GROUP,
        sync_version,
        group_id=group,
        generation_id=generation,
        member_id=member,
        assignments=[
            SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"parts")
        ],
    )
    assert (synced.error_code, synced.assignment) == (0, b"parts")

    for hb_version in versions(ApiKey.HEARTBEAT):
        beat = await client.call(
            ApiKey.HEARTBEAT, hb_version, group_id=group, generation_id=generation, member_id=member
        )
        assert beat.error_code == 0
    stale = await client.call(
        ApiKey.HEARTBEAT, 0, group_id=group, generation_id=generation + 1, member_id=member
    )
    assert stale.error_code == ErrorCode.ILLEGAL_GENERATION

    leave_version = min(version, ADVERTISED[ApiKey.LEAVE_GROUP][1])
    if leave_version >= 3:
        left = await client.call(
            ApiKey.LEAVE_GROUP,
            leave_version,
            group_id=group,
            members=[
                LeaveGroupRequest.MemberIdentity(member_id=member),
                LeaveGroupRequest.MemberIdentity(member_id="ghost"),
            ],
        )
        assert left.error_code == 0
        assert [(m.member_id, m.error_code) for m in left.members] == [
            (member, 0),
            ("ghost", ErrorCode.UNKNOWN_MEMBER_ID),
        ]
    else:
        left = await client.call(
            ApiKey.LEAVE_GROUP, leave_version, group_id=group, member_id=member
        )
        assert left.error_code == 0
    gone = await client.call(
        ApiKey.HEARTBEAT, 0, group_id=group, generation_id=generation, member_id=member
    )
    assert gone.error_code == ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_COMMIT))
async def test_offset_commit_and_fetch(client: Client, version: int) -> None:
    group = f"oc{version}"
    topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
    part = topic_cls.OffsetCommitRequestPartition
    epoch = {"committed_leader_epoch": 3} if version >= 6 else {}
    partitions = [
        part(partition_index=0, committed_offset=5, committed_metadata="m", **epoch),
        part(partition_index=1, committed_offset=6, committed_metadata="x" * 4097),
        part(partition_index=9, committed_offset=7, committed_metadata=None),
    ]
    committed = await client.call(
        ApiKey.OFFSET_COMMIT,
        version,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[topic_cls(name=TOPIC, partitions=partitions)],
    )
    [topic] = committed.topics
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [
        (0, 0),
        (1, ErrorCode.OFFSET_METADATA_TOO_LARGE),
        (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    bad_generation = await client.call(
        ApiKey.OFFSET_COMMIT,
        version,
        group_id="nobody-home",
        generation_id_or_member_epoch=4,
        member_id="m",
        topics=[topic_cls(name=TOPIC, partitions=partitions[:1])],
    )
    assert bad_generation.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION

    # v8+ asks by group (KIP-709): tests/unit/kafka/test_offset_fetch_versions.py.
    for fetch_version in [v for v in versions(ApiKey.OFFSET_FETCH) if v < 8]:
        fetched = await client.call(
            ApiKey.OFFSET_FETCH,
            fetch_version,
            group_id=group,
            topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0, 1])
            ],
        )
        [topic] = fetched.topics
        got = [(p.partition_index, p.committed_offset, p.metadata) for p in topic.partitions]
        assert got == [(0, 5, "m"), (1, -1, "")]
        if fetch_version >= 5:
            expected_epoch = 3 if version >= 6 else -1
            assert topic.partitions[0].committed_leader_epoch == expected_epoch
        if fetch_version >= 2:
            everything = await client.call(
                ApiKey.OFFSET_FETCH, fetch_version, group_id=group, topics=None
            )
            assert [
                (t.name, [p.partition_index for p in t.partitions]) for t in everything.topics
            ] == [(TOPIC, [0])]


@pytest.mark.parametrize("version", versions(ApiKey.FIND_COORDINATOR))
async def test_find_coordinator(client: Client, version: int) -> None:
    fields: dict[str, Any] = {"key": "g"}
    if version >= 1:
        fields["key_type"] = 0
    found = await client.call(ApiKey.FIND_COORDINATOR, version, **fields)
    assert (found.error_code, found.node_id, found.host, found.port) == (0, 7, "127.0.0.1", 9092)
    if version >= 1:
        txn = await client.call(ApiKey.FIND_COORDINATOR, version, key="tx", key_type=1)
        # No transaction coordinator attached (the node attaches one): retriable.
        unavailable = ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert (txn.error_code, txn.node_id) == (unavailable, -1)


async def test_list_and_describe_at_every_version(client: Client) -> None:
    joined = await join(client, 5, "listed")
    for version in versions(ApiKey.LIST_GROUPS):
        listed = await client.call(ApiKey.LIST_GROUPS, version)
        assert [(g.group_id, g.protocol_type) for g in listed.groups] == [("listed", "consumer")]
    for version in versions(ApiKey.DESCRIBE_GROUPS):
        described = await client.call(ApiKey.DESCRIBE_GROUPS, version, groups=["listed", "none"])
        mine, unknown = described.groups
        assert (mine.group_state, [m.member_id for m in mine.members]) == (
            "CompletingRebalance",
            [joined.member_id],
        )
        assert mine.members[0].client_id == "cli"
        assert (unknown.error_code, unknown.group_state) == (0, "Dead")


async def test_without_a_coordinator_everything_is_retriable() -> None:
    client = Client(FakeBroker(None))
    unavailable = ErrorCode.COORDINATOR_NOT_AVAILABLE
    found = await client.call(ApiKey.FIND_COORDINATOR, 2, key="g", key_type=0)
    assert found.error_code == unavailable
    joined = await client.call(
        ApiKey.JOIN_GROUP,
        5,
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[],
    )
    assert joined.error_code == unavailable
    beat = await client.call(ApiKey.HEARTBEAT, 3, group_id="g", generation_id=1, member_id="m")
    assert beat.error_code == unavailable
