"""Bad input on the YDB gRPC port gets the right error, and the node keeps serving others."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trio
import ydb
from h2.errors import ErrorCodes
from hpack import Encoder
from hyperframe.frame import (
    ContinuationFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
)

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


class RawH2Client:
    """HTTP/2 written frame by frame, to send what a well-behaved client library never does
    (h2's own client would refuse to exceed the server's limits)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.encoder = Encoder()
        self.frames: list[Frame] = []
        self._buffer = bytearray()
        self.eof = False

    async def start(self) -> None:
        await self.stream.send_all(PREFACE + SettingsFrame(0).serialize())

    def request(self, stream_id: int, *extra: tuple[bytes, bytes]) -> bytes:
        """HEADERS (+ CONTINUATION, within the default 16 KiB frame size) of a StreamWrite."""
        block = self.encoder.encode(
            [
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", STREAM_WRITE.encode()),
                (b":authority", b"127.0.0.1"),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
                (b"x-ydb-database", DATABASE.encode()),
                *extra,
            ]
        )
        chunks = [block[i : i + 16_384] for i in range(0, len(block), 16_384)]
        frames: list[Frame] = [HeadersFrame(stream_id, data=chunks[0])]
        frames += [ContinuationFrame(stream_id, data=chunk) for chunk in chunks[1:]]
        frames[-1].flags.add("END_HEADERS")
        return b"".join(frame.serialize() for frame in frames)

    async def read_until(self, done: Callable[[], bool], timeout: float = 20) -> None:
        """Collect the server's frames until ``done()`` or the connection ends."""
        with trio.fail_after(timeout):
            while not done() and not self.eof:
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    data = b""
                if not data:
                    self.eof = True
                    return
                self._buffer += data
                while len(self._buffer) >= 9:
                    frame, length = Frame.parse_frame_header(memoryview(self._buffer[:9]))
                    if len(self._buffer) < 9 + length:
                        break
                    frame.parse_body(memoryview(bytes(self._buffer[9 : 9 + length])))
                    del self._buffer[: 9 + length]
                    self.frames.append(frame)

    def of(self, kind: type[Frame]) -> list[Any]:
        return [frame for frame in self.frames if isinstance(frame, kind)]


async def test_oversized_headers_end_only_that_connection(node: NodeProcess) -> None:
    limit = GrpcSettings().max_header_list_size
    async with await trio.open_tcp_stream("127.0.0.1", node.grpc_port) as stream:
        client = RawH2Client(stream)
        await client.start()
        await stream.send_all(client.request(1, (b"x-big", b"v" * (limit + 1024))))
        await client.read_until(lambda: bool(client.of(GoAwayFrame)))
        (goaway,) = client.of(GoAwayFrame)
        assert goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
        assert not client.of(HeadersFrame)
        await client.read_until(lambda: False)  # then the server closes the connection
        assert client.eof
    await _still_serving(node)


async def test_streams_over_the_limit_are_refused_one_by_one(node: NodeProcess) -> None:
    limit = GrpcSettings().max_concurrent_streams
    extra = 10
    ids = [2 * i + 1 for i in range(limit + extra)]
    async with await trio.open_tcp_stream("127.0.0.1", node.grpc_port) as stream:
        client = RawH2Client(stream)
        await client.start()
        # No END_STREAM: every StreamWrite stays open, waiting for its init_request.
        await stream.send_all(b"".join(client.request(sid) for sid in ids))
        await client.read_until(lambda: len(client.of(RstStreamFrame)) >= extra)
        refused = {(f.stream_id, f.error_code) for f in client.of(RstStreamFrame)}
        assert refused == {(sid, ErrorCodes.REFUSED_STREAM) for sid in ids[limit:]}
        assert not client.of(GoAwayFrame)
        # The connection and its open calls are still alive: a PING is answered.
        await stream.send_all(PingFrame(0, opaque_data=b"vdl-ping").serialize())
        await client.read_until(lambda: any("ACK" in f.flags for f in client.of(PingFrame)))
        assert not client.eof and not client.of(GoAwayFrame)
    await _still_serving(node)
