"""Leader epochs in Metadata v7+ and ListOffsets v4+ (KIP-320) on one node, through
dispatch, against a real Broker over real stores: the epoch told is the one the stream
stamps into its batches and fences requests with."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.unit.kafka.kafka_oracle import kp_batch, kp_frame
from vdl.backends.registry import open_meta_store
from vdl.broker.broker import Broker
from vdl.broker.topics import topic_config_specs
from vdl.log.flusher import Flusher
from vdl.log.record_batch import parse_batch_header
from vdl.net.kafka.apis.context import NodeInfo, RequestContext
from vdl.net.kafka.apis.dispatch import dispatch
from vdl.net.kafka.control_codec import request_class, response_class
from vdl.net.kafka.header import parse_request_header
from vdl.net.kafka.versions import ADVERTISED, ApiKey
from vdl.security.acl import Authorizer

NODE = NodeInfo(node_id=7, host="127.0.0.1", port=9092, cluster_id="epochs")
TOPIC = "t"
LATEST, EARLIEST = -1, -2
UNKNOWN_LEADER_EPOCH = 75  # the Kafka protocol guide's error code


class Node:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._correlation = itertools.count(1)

    async def call(self, key: ApiKey, version: int, /, **fields: Any) -> Any:
        request = request_class(key, version)(**fields, version=version)
        frame = kp_frame(request, correlation_id=next(self._correlation), client_id="cli")
        ctx = RequestContext(
            parse_request_header(frame),
            frame,
            self.broker,
            NODE,
            principal=None,
            authorizer=Authorizer((), enabled=False),
        )
        out = await dispatch(ctx)()
        assert isinstance(out, bytes)
        return response_class(key, version).decode(out, version=version, header=True, framed=True)

    async def epochs_in_metadata(self, version: int) -> list[tuple[int, int, int]]:
        """(partition, leader, leader epoch) of every partition of the topic."""
        cls = request_class(ApiKey.METADATA, version)
        response = await self.call(
            ApiKey.METADATA,
            version,
            topics=[cls.MetadataRequestTopic(name=TOPIC)],
            allow_auto_topic_creation=False,
        )
        return [
            (p.partition_index, p.leader_id, p.leader_epoch)
            for t in response.topics
            for p in t.partitions
        ]

    async def list_offset(
        self, version: int, timestamp: int, current_epoch: int = -1
    ) -> tuple[int, int, int]:
        """(error code, offset, leader epoch) of partition 0."""
        cls = request_class(ApiKey.LIST_OFFSETS, version)
        partition = cls.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=current_epoch, timestamp=timestamp
        )
        response = await self.call(
            ApiKey.LIST_OFFSETS,
            version,
            replica_id=-1,
            isolation_level=0,
            topics=[cls.ListOffsetsTopic(name=TOPIC, partitions=[partition])],
        )
        (part,) = response.topics[0].partitions
        return part.error_code, part.offset, part.leader_epoch


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    meta = open_meta_store(tmp_path / "meta")
    flusher = Flusher()
    specs = topic_config_specs(
        retention_ms=-1, retention_bytes=-1, segment_bytes=1 << 20, max_message_bytes=10_000
    )
    broker = Broker(tmp_path, meta, flusher, lambda: 1_800_000_000_000, config_specs=specs)
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        broker.create_topic(TOPIC, 2)
        try:
            yield Node(broker)
        finally:
            await broker.close()
            flusher.stop()
    meta.close()


def _versions(key: ApiKey, first: int) -> list[int]:
    low, high = ADVERTISED[key]
    return list(range(max(low, first), high + 1))


@pytest.mark.parametrize("version", _versions(ApiKey.METADATA, 7))
async def test_metadata_names_the_epoch_the_stream_stamps(node: Node, version: int) -> None:
    stream = node.broker.stream(TOPIC, 0)
    batch = kp_batch(3)
    appended = stream.append(memoryview(bytearray(batch)), parse_batch_header(batch))
    await stream.wait_committed(appended.last_offset)
    stamped = parse_batch_header(bytes(stream.read(0, 1 << 20)[0])).partition_leader_epoch
    assert stamped == stream.leader_epoch >= 1
    assert await node.epochs_in_metadata(version) == [
        (0, NODE.node_id, stamped),
        (1, NODE.node_id, stamped),
    ]


@pytest.mark.parametrize("version", _versions(ApiKey.LIST_OFFSETS, 4))
async def test_list_offsets_names_the_epoch_of_the_offset(node: Node, version: int) -> None:
    stream = node.broker.stream(TOPIC, 0)
    epoch = stream.leader_epoch
    # An empty log: the offset the next batch gets, in the epoch now.
    assert await node.list_offset(version, EARLIEST) == (0, 0, epoch)
    for count in (2, 3):
        batch = kp_batch(count)
        appended = stream.append(memoryview(bytearray(batch)), parse_batch_header(batch))
    await stream.wait_committed(appended.last_offset)
    assert await node.list_offset(version, EARLIEST, epoch) == (0, 0, epoch)
    assert await node.list_offset(version, LATEST) == (0, 5, epoch)
    assert await node.list_offset(version, 0) == (0, 0, epoch)  # the first record at or after
    # No record that late: no offset and no epoch.
    assert await node.list_offset(version, 1 << 50) == (0, -1, -1)
    # The epoch the client names is checked against the same one (0 is "unknown").
    assert (await node.list_offset(version, LATEST, epoch + 1))[0] == UNKNOWN_LEADER_EPOCH
    assert (await node.list_offset(version, LATEST, 0))[0] == 0
