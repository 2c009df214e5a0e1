"""An in-memory StreamWrite server on our own gRPC server, for writer semantics that need
control the real node does not give: acks held back, in-band errors on demand, a record of
every request's size."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import trio

from vdl.net.grpc import GrpcChannel, GrpcError, GrpcServer, ServerContext, ServerStream
from vdl.net.grpc.memory import open_memory_channel
from vdl.net.ydb.protos import ydb_status_codes_pb2, ydb_topic_pb2

FromClient = ydb_topic_pb2.StreamWriteMessage.FromClient
FromServer = ydb_topic_pb2.StreamWriteMessage.FromServer
Status = ydb_status_codes_pb2.StatusIds
SUCCESS, BAD_REQUEST, UNAVAILABLE = Status.SUCCESS, Status.BAD_REQUEST, Status.UNAVAILABLE


class FakeTopicServer:
    def __init__(self, *, last_seq_no: int = 0) -> None:
        self.server = GrpcServer()
        self.server.add_stream("/Ydb.Topic.V1.TopicService/StreamWrite", self._stream_write)
        self.last_seq_no = last_seq_no
        #: seq_no of every message appended, in offset order.
        self.log: list[int] = []
        self.request_sizes: list[int] = []
        self.streams = 0
        self.init_status = SUCCESS
        #: After this many more messages arrive, answer UNAVAILABLE in-band (once).
        self.fail_after: int | None = None
        self._acks_open = trio.Event()
        self._acks_open.set()

    def channel(self) -> AbstractAsyncContextManager[GrpcChannel]:
        return open_memory_channel(self.server)

    def hold_acks(self) -> None:
        if self._acks_open.is_set():
            self._acks_open = trio.Event()

    def release_acks(self) -> None:
        self._acks_open.set()

    async def _stream_write(self, stream: ServerStream, context: ServerContext) -> None:
        self.streams += 1
        first = FromClient.FromString(await stream.receive())
        assert first.WhichOneof("client_message") == "init_request"
        if self.init_status != SUCCESS:
            reply = FromServer(status=self.init_status)
            reply.issues.add(message="refused by the fake")
            await stream.send(reply.SerializeToString())
            return
        reply = FromServer(status=SUCCESS)
        reply.init_response.last_seq_no = self.last_seq_no
        reply.init_response.partition_id = 0
        await stream.send(reply.SerializeToString())
        send, receive = trio.open_memory_channel[Any](1000)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._send_acks, stream, receive)
            await self._receive_requests(stream, send)
            nursery.cancel_scope.cancel()

    async def _receive_requests(
        self, stream: ServerStream, send: trio.MemorySendChannel[Any]
    ) -> None:
        while True:
            try:
                data = await stream.receive()
            except GrpcError:
                return  # the client reset the call (as it does on close)
            if data is None:
                return
            self.request_sizes.append(len(data))
            request = FromClient.FromString(data).write_request
            if self.fail_after is not None:
                self.fail_after -= len(request.messages)
                if self.fail_after <= 0:
                    # Like a restarting node: nothing of this request is acked.
                    self.fail_after = None
                    error = FromServer(status=UNAVAILABLE)
                    error.issues.add(message="fake restart")
                    await stream.send(error.SerializeToString())
                    return
            await send.send(self._write(request))

    def _write(self, request: Any) -> Any:
        reply = FromServer(status=SUCCESS)
        for message in request.messages:
            ack = reply.write_response.acks.add(seq_no=message.seq_no)
            if message.seq_no <= self.last_seq_no:
                ack.skipped.reason = 1
            else:
                ack.written.offset = len(self.log)
                self.log.append(message.seq_no)
                self.last_seq_no = message.seq_no
        return reply

    async def _send_acks(
        self, stream: ServerStream, replies: trio.MemoryReceiveChannel[Any]
    ) -> None:
        async for reply in replies:
            await self._acks_open.wait()
            await stream.send(reply.SerializeToString())
