"""OffsetFetch v6-8 through dispatch, in memory: `require_stable` (v7, KIP-447) answers
UNSTABLE_OFFSET_COMMIT for exactly the partitions an Ongoing transaction holds offsets for,
and v8 (KIP-709) answers several groups, each with its own error."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import trio
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest

from tests.unit.kafka.kafka_oracle import kp_frame
from vdl.broker.broker import Broker
from vdl.cluster.commands import decode_command, encode_command
from vdl.cluster.memory_meta import MemoryMetaStore
from vdl.cluster.metadata import MetadataState
from vdl.cluster.metadata_group import MetadataGroup
from vdl.cluster.offset_commands import ReplicatedOffsets
from vdl.groups.coordinator import GroupConfig
from vdl.groups.offsets import CommittedOffset, OffsetStore
from vdl.groups.service import GroupService
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import NodeInfo, RequestContext
from vdl.net.kafka.apis.dispatch import dispatch
from vdl.net.kafka.control_codec import request_class, response_class
from vdl.net.kafka.header import parse_request_header
from vdl.net.kafka.versions import ADVERTISED, ApiKey
from vdl.txn.commands import LocalTxnLog, ReplicatedTxns, store_txn_command
from vdl.txn.pending_offsets import pending_offsets
from vdl.txn.state import TxnRecord, TxnState

NODE = NodeInfo(node_id=7, host="127.0.0.1", port=9092, cluster_id="c")
TOPIC = "t"
_Topic = OffsetFetchRequest.OffsetFetchRequestTopic
_Group = OffsetFetchRequest.OffsetFetchRequestGroup
_GroupTopic = _Group.OffsetFetchRequestTopics
UNSTABLE = ErrorCode.UNSTABLE_OFFSET_COMMIT


@dataclass
class _CatalogTopic:
    partitions: int


@dataclass
class _Catalog:
    topics: dict[str, _CatalogTopic] = field(default_factory=lambda: {TOPIC: _CatalogTopic(3)})

    def get(self, name: str) -> _CatalogTopic | None:
        return self.topics.get(name)


@dataclass
class _Broker:
    """What OffsetCommit and OffsetFetch touch: the groups and the store they share."""

    groups: GroupService | None
    meta: MemoryMetaStore
    catalog: _Catalog = field(default_factory=_Catalog)
    cluster: None = None
    transactions: None = None


class Client:
    def __init__(self, broker: _Broker) -> None:
        self.broker = broker
        self.correlation = itertools.count(1)

    async def call(self, key: ApiKey, version: int, /, **fields: Any) -> Any:
        request = request_class(key, version)(**fields, version=version)
        frame = kp_frame(request, correlation_id=next(self.correlation), client_id="cli")
        header = parse_request_header(frame)
        ctx = RequestContext(header, frame, cast(Broker, self.broker), NODE)
        out = await dispatch(ctx)()
        assert isinstance(out, bytes)
        return response_class(key, version).decode(out, version=version, header=True, framed=True)

    async def commit(self, group: str, offsets: dict[int, int]) -> None:
        topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
        part = topic_cls.OffsetCommitRequestPartition
        response = await self.call(
            ApiKey.OFFSET_COMMIT,
            7,
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                topic_cls(
                    name=TOPIC,
                    partitions=[
                        part(partition_index=p, committed_offset=o, committed_metadata="")
                        for p, o in offsets.items()
                    ],
                )
            ],
        )
        assert all(p.error_code == 0 for t in response.topics for p in t.partitions)

    async def fetch(self, version: int, group: str, stable: bool) -> dict[int, tuple[int, int]]:
        """{partition: (offset, error)} of partitions 0-2 by a v6/v7 request."""
        fields: dict[str, Any] = {"require_stable": stable} if version >= 7 else {}
        response = await self.call(
            ApiKey.OFFSET_FETCH,
            version,
            group_id=group,
            topics=[_Topic(name=TOPIC, partition_indexes=[0, 1, 2])],
            **fields,
        )
        assert response.error_code == 0
        [topic] = response.topics
        return {p.partition_index: (p.committed_offset, p.error_code) for p in topic.partitions}


def _txn(tid: str, state: TxnState, offsets: dict[str, dict[int, int]]) -> TxnRecord:
    return TxnRecord(
        tid,
        1000,
        0,
        60_000,
        state,
        groups=tuple(offsets),
        offsets={
            group: {(TOPIC, p): CommittedOffset(o, "", -1, 1) for p, o in parts.items()}
            for group, parts in offsets.items()
        },
    )


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    meta = MemoryMetaStore()
    service = GroupService(
        meta, GroupConfig(initial_rebalance_delay_ms=0), wall_clock_ms=lambda: 99
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        yield Client(_Broker(service, meta))
        service.stop()


def test_served_up_to_v8() -> None:
    assert ADVERTISED[ApiKey.OFFSET_FETCH] == (1, 8)


async def test_require_stable_until_the_transaction_commits(client: Client) -> None:
    await client.commit("g", {0: 5, 1: 6})
    txn_log = LocalTxnLog(client.broker.meta)
    await txn_log.store(_txn("tx", TxnState.ONGOING, {"g": {0: 50, 2: 70}}))

    stable = await client.fetch(7, "g", stable=True)
    assert stable == {0: (-1, UNSTABLE), 1: (6, 0), 2: (-1, UNSTABLE)}
    # Without require_stable (or before v7) the committed offsets, as before the transaction.
    expected = {0: (5, 0), 1: (6, 0), 2: (-1, 0)}
    assert await client.fetch(7, "g", stable=False) == expected
    assert await client.fetch(6, "g", stable=True) == expected
    # Another group is not held up by it.
    await client.commit("other", {0: 1})
    assert await client.fetch(7, "other", stable=True) == {0: (1, 0), 1: (-1, 0), 2: (-1, 0)}

    await txn_log.store(_txn("tx", TxnState.PREPARE_COMMIT, {"g": {0: 50, 2: 70}}))
    assert await client.fetch(7, "g", stable=True) == {0: (50, 0), 1: (6, 0), 2: (70, 0)}


async def test_an_abort_leaves_the_committed_offsets(client: Client) -> None:
    await client.commit("g", {0: 5})
    txn_log = LocalTxnLog(client.broker.meta)
    await txn_log.store(_txn("a", TxnState.ONGOING, {"g": {0: 9}}))
    await txn_log.store(_txn("b", TxnState.ONGOING, {"g": {0: 11}}))
    await txn_log.store(_txn("a", TxnState.PREPARE_ABORT, {"g": {0: 9}}))
    # Still pending in "b".
    assert (await client.fetch(7, "g", stable=True))[0] == (-1, UNSTABLE)
    await txn_log.store(_txn("b", TxnState.PREPARE_ABORT, {"g": {0: 11}}))
    assert (await client.fetch(7, "g", stable=True))[0] == (5, 0)
    assert not pending_offsets(client.broker.meta).pending("g")


async def test_v8_answers_each_group(client: Client) -> None:
    await client.commit("g1", {0: 3})
    await client.commit("g2", {1: 4, 2: 8})
    await LocalTxnLog(client.broker.meta).store(_txn("tx", TxnState.ONGOING, {"g2": {2: 9}}))

    async def fetch(stable: bool) -> dict[str, list[tuple[int, int, int]]]:
        response = await client.call(
            ApiKey.OFFSET_FETCH,
            8,
            groups=[
                _Group(group_id="g1", topics=[_GroupTopic(name=TOPIC, partition_indexes=[0])]),
                _Group(group_id="g2", topics=None),
                _Group(group_id="none", topics=None),
            ],
            require_stable=stable,
        )
        got = {}
        for group in response.groups:
            assert group.error_code == 0
            got[group.group_id] = [
                (p.partition_index, p.committed_offset, p.error_code)
                for t in group.topics
                for p in t.partitions
            ]
        return got

    assert await fetch(stable=False) == {
        "g1": [(0, 3, 0)],
        "g2": [(1, 4, 0), (2, 8, 0)],
        "none": [],
    }
    assert await fetch(stable=True) == {
        "g1": [(0, 3, 0)],
        "g2": [(1, 4, 0), (2, -1, UNSTABLE)],
        "none": [],
    }


async def test_v8_without_a_coordinator_is_a_group_error() -> None:
    client = Client(_Broker(None, MemoryMetaStore()))
    response = await client.call(
        ApiKey.OFFSET_FETCH,
        8,
        groups=[_Group(group_id="g", topics=[_GroupTopic(name=TOPIC, partition_indexes=[0])])],
        require_stable=True,
    )
    [group] = response.groups
    assert (group.group_id, group.error_code, group.topics) == (
        "g",
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        [],
    )


def test_the_index_is_built_from_records_stored_before_it() -> None:
    meta = MemoryMetaStore()
    trio.run(LocalTxnLog(meta).store, _txn("tx", TxnState.ONGOING, {"g": {1: 2}}))
    assert set(pending_offsets(meta).pending("g")) == {(TOPIC, 1)}
    trio.run(LocalTxnLog(meta).store, _txn("tx", TxnState.COMPLETE_COMMIT, {}))
    assert not pending_offsets(meta).pending("g")


def test_the_index_follows_applied_metadata_commands() -> None:
    # On a cluster every node applies the records through group 0 (vdl.txn.commands).
    meta = MemoryMetaStore()
    state = MetadataState()
    group = MetadataGroup(state)
    offsets = ReplicatedOffsets(group, meta)
    offsets.register(state)
    ReplicatedTxns(group, meta, offsets).register(state)
    index = pending_offsets(meta)

    def apply(at: int, record: TxnRecord) -> None:
        state.applying_index = at
        command = decode_command(encode_command(store_txn_command(record), at))
        assert state.apply(command).error == ErrorCode.NONE

    apply(1, _txn("tx", TxnState.ONGOING, {"g": {0: 4}}))
    assert set(index.pending("g")) == {(TOPIC, 0)}
    apply(2, _txn("tx", TxnState.PREPARE_COMMIT, {"g": {0: 4}}))
    assert not index.pending("g")
    assert OffsetStore(meta).fetch("g", [(TOPIC, 0)])[(TOPIC, 0)] == CommittedOffset(4, "", -1, 1)
