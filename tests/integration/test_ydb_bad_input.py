"""Bad input on the YDB gRPC port gets the right error, and the node keeps serving others."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
import trio
import ydb

from tests.integration.node_process import NodeProcess
from vdl.net.grpc import GrpcChannel, GrpcError, GrpcSettings, StatusCode
from vdl.net.ydb.protos import ydb_discovery_pb2, ydb_topic_pb2

DATABASE = "/local"
LIST_ENDPOINTS = "/Ydb.Discovery.V1.DiscoveryService/ListEndpoints"
DESCRIBE_TOPIC = "/Ydb.Topic.V1.TopicService/DescribeTopic"
STREAM_WRITE = "/Ydb.Topic.V1.TopicService/StreamWrite"
METADATA = (("x-ydb-database", DATABASE),)
SUCCESS = 400000
BAD_REQUEST = 400010


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("ydb-bad") / "data") as process:
        yield process


async def _still_serving(node: NodeProcess) -> None:
    async with GrpcChannel.connect("127.0.0.1", node.grpc_port) as channel:
        request = ydb_discovery_pb2.ListEndpointsRequest(database=DATABASE)
        raw = await channel.unary(LIST_ENDPOINTS, request.SerializeToString(), METADATA, 10)
        response = ydb_discovery_pb2.ListEndpointsResponse.FromString(raw)
        assert response.operation.status == SUCCESS
        result = ydb_discovery_pb2.ListEndpointsResult()
        assert response.operation.result.Unpack(result)
        assert result.endpoints[0].port == node.grpc_port


async def _closed_by_server(node: NodeProcess, payload: bytes) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", node.grpc_port)
    async with stream:
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.send_all(payload)
        with trio.fail_after(10):
            while True:
                try:
                    data = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return
                if not data:
                    return


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(os.urandom(4096), id="random-bytes"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", id="http1-request"),
        pytest.param(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + bytes(64), id="bad-preface"),
        # A valid preface, then a frame of an impossible size for SETTINGS.
        pytest.param(PREFACE + b"\x00\x00\x05\x04\x00\x00\x00\x00\x00" + bytes(5), id="bad-frame"),
    ],
)
async def test_garbage_closes_only_that_connection(node: NodeProcess, payload: bytes) -> None:
    await _closed_by_server(node, payload)
    await _still_serving(node)


async def test_invalid_protobuf_in_unary_call(node: NodeProcess) -> None:
    async with GrpcChannel.connect("127.0.0.1", node.grpc_port) as channel:
        with pytest.raises(GrpcError) as failure:
            await channel.unary(DESCRIBE_TOPIC, b"\xff\xff\xff\xff", METADATA, 10)
        assert failure.value.status == StatusCode.INTERNAL
    await _still_serving(node)


async def test_invalid_protobuf_in_stream(node: NodeProcess) -> None:
    async with GrpcChannel.connect("127.0.0.1", node.grpc_port) as channel:
        async with channel.stream(STREAM_WRITE, METADATA, 10) as call:
            await call.send(b"\x0a\xff\xff\xff\xff")
            with pytest.raises(GrpcError) as failure:
                await call.receive()
            assert failure.value.status == StatusCode.INTERNAL
    await _still_serving(node)


async def test_write_before_init_is_bad_request(node: NodeProcess) -> None:
    message = ydb_topic_pb2.StreamWriteMessage.FromClient()
    message.write_request.messages.add(seq_no=1, data=b"x")
    async with GrpcChannel.connect("127.0.0.1", node.grpc_port) as channel:
        async with channel.stream(STREAM_WRITE, METADATA, 10) as call:
            await call.send(message.SerializeToString())
            raw = await call.receive()
            assert raw is not None
            reply = ydb_topic_pb2.StreamWriteMessage.FromServer.FromString(raw)
            assert reply.status == BAD_REQUEST
            assert "init_request" in reply.issues[0].message


async def test_message_over_the_grpc_size_limit(node: NodeProcess) -> None:
    settings = GrpcSettings(max_send_message_size=80_000_000)
    async with GrpcChannel.connect("127.0.0.1", node.grpc_port, settings=settings) as channel:
        async with channel.stream(STREAM_WRITE, METADATA, 30) as call:
            with pytest.raises(GrpcError) as failure:
                await call.send(bytes(64_000_001))
                await call.receive()
            assert failure.value.status == StatusCode.RESOURCE_EXHAUSTED
    await _still_serving(node)


def _write_oversized(node: NodeProcess) -> str:
    config = ydb.DriverConfig(endpoint=f"grpc://{node.grpc_address}", database=DATABASE)
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=10, fail_fast=True)
        topics = driver.topic_client
        topics.create_topic(f"{DATABASE}/big", consumers=["c"])
        writer = topics.writer(f"{DATABASE}/big", producer_id="big")
        try:
            writer.wait_init(timeout=10)
            with pytest.raises(ydb.BadRequest) as failure:
                writer.write_with_ack(ydb.TopicWriterMessage(bytes(2 << 20)), timeout=10)
            return str(failure.value)
        finally:
            with contextlib.suppress(ydb.BadRequest):
                writer.close(flush=False, timeout=10)
    finally:
        driver.stop(timeout=10)


async def test_message_over_the_topic_limit(node: NodeProcess) -> None:
    message = await trio.to_thread.run_sync(_write_oversized, node)
    assert "max.message.bytes" in message
    assert "2097152 bytes" in message
    await _still_serving(node)
