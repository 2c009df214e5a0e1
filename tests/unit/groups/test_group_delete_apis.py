"""DeleteGroups, OffsetDelete and ElectLeaders on one node, through dispatch, in memory."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import trio
from kafka.protocol.admin.topics import ElectLeadersRequest
from kafka.protocol.consumer.group import (
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
)

from tests.unit.groups.test_group_offsets import CountingMeta
from tests.unit.kafka.kafka_oracle import kp_frame
from vdl.broker.broker import Broker
from vdl.groups.coordinator import GroupConfig
from vdl.groups.service import GroupService
from vdl.groups.subscription import subscribed_topics
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import NodeInfo, RequestContext
from vdl.net.kafka.apis.dispatch import dispatch
from vdl.net.kafka.control_codec import request_class, response_class
from vdl.net.kafka.header import parse_request_header
from vdl.net.kafka.versions import ADVERTISED, ApiKey
from vdl.security.acl import ALLOW_ALL, AclEntry, Authorizer, Operation, ResourceType

NODE = NodeInfo(node_id=7, host="127.0.0.1", port=9092, cluster_id="c")
TOPIC = "t"
OTHER = "u"


@dataclass
class _Topic:
    name: str
    partitions: int


@dataclass
class _Catalog:
    topics: dict[str, _Topic] = field(
        default_factory=lambda: {TOPIC: _Topic(TOPIC, 2), OTHER: _Topic(OTHER, 1)}
    )

    def get(self, name: str) -> _Topic | None:
        return self.topics.get(name)

    def all(self) -> list[_Topic]:
        return list(self.topics.values())


@dataclass
class FakeBroker:
    groups: GroupService | None
    catalog: _Catalog = field(default_factory=_Catalog)
    cluster: None = None


class Client:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = cast(Broker, broker)
        self.correlation = itertools.count(1)
        self.authorizer = ALLOW_ALL
        self.principal: str | None = None

    async def call(self, key: ApiKey, version: int, /, **fields: Any) -> Any:
        request = request_class(key, version)(**fields, version=version)
        frame = kp_frame(request, correlation_id=next(self.correlation), client_id="cli")
        header = parse_request_header(frame)
        ctx = RequestContext(
            header, frame, self.broker, NODE, principal=self.principal, authorizer=self.authorizer
        )
        out = await dispatch(ctx)()
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


def versions(key: ApiKey) -> list[int]:
    low, high = ADVERTISED[key]
    return list(range(low, high + 1))


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, null user data."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


async def join(client: Client, group: str, metadata: bytes) -> str:
    fields: dict[str, Any] = {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)],
    }
    response = await client.call(ApiKey.JOIN_GROUP, 3, **fields)
    assert response.error_code == 0
    member: str = response.member_id
    return member


async def commit(client: Client, group: str, offsets: dict[tuple[str, int], int]) -> None:
    topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
    part = topic_cls.OffsetCommitRequestPartition
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            part(partition_index=partition, committed_offset=offset, committed_metadata="")
        )
    response = await client.call(
        ApiKey.OFFSET_COMMIT,
        2,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        retention_time_ms=-1,
        topics=[topic_cls(name=name, partitions=parts) for name, parts in by_topic.items()],
    )
    assert all(p.error_code == 0 for t in response.topics for p in t.partitions)


async def committed(client: Client, group: str, topic: str, partition: int) -> int:
    response = await client.call(
        ApiKey.OFFSET_FETCH,
        1,
        group_id=group,
        topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[partition])
        ],
    )
    offset: int = response.topics[0].partitions[0].committed_offset
    return offset


@pytest.mark.parametrize("version", versions(ApiKey.DELETE_GROUPS))
async def test_delete_groups(client: Client, version: int) -> None:
    await commit(client, "solo", {(TOPIC, 0): 5, (OTHER, 0): 3})
    await join(client, "busy", subscription(TOPIC))
    deleted = await client.call(
        ApiKey.DELETE_GROUPS, version, groups_names=["solo", "busy", "nobody", "solo"]
    )
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("solo", 0),
        ("busy", ErrorCode.NON_EMPTY_GROUP),
        ("nobody", ErrorCode.GROUP_ID_NOT_FOUND),
    ]
    assert await committed(client, "solo", TOPIC, 0) == -1
    assert await committed(client, "solo", OTHER, 0) == -1
    again = await client.call(ApiKey.DELETE_GROUPS, version, groups_names=["solo"])
    assert again.results[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    listed = await client.call(ApiKey.LIST_GROUPS, 0)
    assert [g.group_id for g in listed.groups] == ["busy"]


async def test_offset_delete_keeps_what_a_member_subscribes_to(client: Client) -> None:
    _topic = OffsetDeleteRequest.OffsetDeleteRequestTopic
    _part = _topic.OffsetDeleteRequestPartition
    # Committed before the member joined (a member's own commits carry its generation).
    await commit(client, "live", {(TOPIC, 0): 5, (OTHER, 0): 3})
    await join(client, "live", subscription(TOPIC))
    response = await client.call(
        ApiKey.OFFSET_DELETE,
        0,
        group_id="live",
        topics=[
            _topic(name=TOPIC, partitions=[_part(partition_index=0)]),
            _topic(name=OTHER, partitions=[_part(partition_index=0), _part(partition_index=4)]),
        ],
    )
    assert response.error_code == 0
    assert {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    } == {
        (TOPIC, 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
        (OTHER, 0): 0,
        (OTHER, 4): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert await committed(client, "live", TOPIC, 0) == 5
    assert await committed(client, "live", OTHER, 0) == -1
    unknown = await client.call(
        ApiKey.OFFSET_DELETE,
        0,
        group_id="nobody",
        topics=[_topic(name=TOPIC, partitions=[_part(partition_index=0)])],
    )
    assert (unknown.error_code, unknown.topics) == (ErrorCode.GROUP_ID_NOT_FOUND, [])


@pytest.mark.parametrize("version", versions(ApiKey.ELECT_LEADERS))
async def test_elect_leaders_on_one_node(client: Client, version: int) -> None:
    tps = ElectLeadersRequest.TopicPartitions
    typed = {"election_type": 0} if version >= 1 else {}
    named = await client.call(
        ApiKey.ELECT_LEADERS,
        version,
        topic_partitions=[tps(topic=TOPIC, partitions=[1, 9])],
        timeout_ms=1000,
        **typed,
    )
    assert {
        (r.topic, p.partition_id): p.error_code
        for r in named.replica_election_results
        for p in r.partition_result
    } == {
        (TOPIC, 1): ErrorCode.ELECTION_NOT_NEEDED,
        (TOPIC, 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    every = await client.call(
        ApiKey.ELECT_LEADERS, version, topic_partitions=None, timeout_ms=1000, **typed
    )
    listed = {
        (r.topic, p.partition_id): p.error_code
        for r in every.replica_election_results
        for p in r.partition_result
    }
    assert listed == {
        tp: ErrorCode.ELECTION_NOT_NEEDED for tp in [(TOPIC, 0), (TOPIC, 1), (OTHER, 0)]
    }
    if version >= 1:
        unclean = await client.call(
            ApiKey.ELECT_LEADERS,
            version,
            election_type=1,
            topic_partitions=[tps(topic=TOPIC, partitions=[0])],
            timeout_ms=1000,
        )
        [result] = unclean.replica_election_results[0].partition_result
        assert result.error_code == ErrorCode.INVALID_REQUEST
        assert "unclean" in result.error_message


async def test_what_the_rules_deny_is_refused(client: Client) -> None:
    _topic = OffsetDeleteRequest.OffsetDeleteRequestTopic
    _part = _topic.OffsetDeleteRequestPartition
    await commit(client, "g", {(TOPIC, 0): 5, (OTHER, 0): 3})
    # eve may delete group g and read topic t, and nothing else.
    client.principal = "User:eve"
    client.authorizer = Authorizer(
        [
            AclEntry("User:eve", ResourceType.GROUP, "g", Operation.DELETE),
            AclEntry("User:eve", ResourceType.TOPIC, TOPIC, Operation.READ),
        ]
    )
    denied = await client.call(ApiKey.DELETE_GROUPS, 1, groups_names=["h"])
    assert denied.results[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    other_group = await client.call(
        ApiKey.OFFSET_DELETE,
        0,
        group_id="h",
        topics=[_topic(name=TOPIC, partitions=[_part(partition_index=0)])],
    )
    assert other_group.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    election = await client.call(
        ApiKey.ELECT_LEADERS, 1, election_type=0, topic_partitions=None, timeout_ms=0
    )
    assert election.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert election.replica_election_results == []
    offsets = await client.call(
        ApiKey.OFFSET_DELETE,
        0,
        group_id="g",
        topics=[
            _topic(name=TOPIC, partitions=[_part(partition_index=0)]),
            _topic(name=OTHER, partitions=[_part(partition_index=0)]),
        ],
    )
    assert {
        (t.name, p.partition_index): p.error_code for t in offsets.topics for p in t.partitions
    } == {(TOPIC, 0): 0, (OTHER, 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    # What eve may do, she does.
    deleted = await client.call(ApiKey.DELETE_GROUPS, 1, groups_names=["g"])
    assert deleted.results[0].error_code == 0
    client.authorizer = ALLOW_ALL
    assert await committed(client, "g", OTHER, 0) == -1


def test_subscribed_topics_of_good_and_bad_metadata() -> None:
    assert subscribed_topics(subscription("a", "bc")) == {"a", "bc"}
    assert subscribed_topics(b"") == frozenset()
    assert subscribed_topics(b"\x00\x00\x00\x00\x00\x05\x00\x10ab") == frozenset()
    assert subscribed_topics(b"\x00\x00\x00\x00\x00\x01\x00\x02\xff\xfe") == frozenset()
