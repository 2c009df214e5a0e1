"""A topic writer over ``StreamWrite``: a bounded buffer, acks, reconnect and resend.

``write()`` only buffers: it returns once the messages are in the buffer, waiting for space
while the buffer is full (by message count and by bytes). A background task sends the
buffer and matches the server's acks, which free the space. A single call bigger than the
whole buffer is accepted once the buffer is empty, so it cannot stall forever.

Sequence numbers continue from the ``last_seq_no`` the server reports for the producer on
the first connection. Each message keeps its number for life, so after a retriable failure
(on a cluster: its node died, or no longer leads the partition) the writer opens a new
stream, on another node of the connection's pool if need be, learns from its init response
the last seq_no the partition holds for the producer, counts the messages up to it as
written (their acks were lost with the stream), and resends the rest as they were (the
server would ack a duplicate as *skipped* anyway). That is what makes a reconnect safe (no
duplicates) and complete (no gaps). Non-retriable errors (bad request, auth, missing topic,
a protocol violation) stop the writer and are raised by every later call.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from vdl.client.connection import Connection
from vdl.client.errors import (
    BufferFullError,
    ClosedError,
    CloseTimeoutError,
    ProtocolError,
    check_status,
    timeout_after,
)
from vdl.client.messages import Message, WriteResult
from vdl.client.stream_sessions import run_sessions
from vdl.net.grpc import GrpcChannel, GrpcError, StatusCode
from vdl.net.grpc.client import ClientStream
from vdl.net.grpc.driver import Signal, unwrap_single_exception
from vdl.net.ydb.protos import ydb_topic_pb2

WRITE_METHOD = "/Ydb.Topic.V1.TopicService/StreamWrite"
FromClient = ydb_topic_pb2.StreamWriteMessage.FromClient
FromServer = ydb_topic_pb2.StreamWriteMessage.FromServer
CODEC_RAW = 1

MessageLike = bytes | bytearray | memoryview | Message
# Bytes a message costs in a WriteRequest beyond its payload and metadata: seq_no,
# created_at, uncompressed_size, tags and lengths (generous, so the estimate stays an
# upper bound and requests never exceed the gRPC message limit).
_MESSAGE_OVERHEAD = 64
_REQUEST_OVERHEAD = 64
# Requests are cut at this size even when more is buffered: acks come back sooner and one
# request never holds the send path for long.
_TARGET_REQUEST_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class WriterSettings:
    producer_id: str | None = None
    #: Pin the writer to this partition; otherwise the server picks one from the producer id.
    partition_id: int | None = None
    #: Upper bounds of the buffer of not-yet-acknowledged messages.
    max_buffer_messages: int = 10_000
    max_buffer_bytes: int = 64 << 20
    #: Default for write(): None waits for buffer space forever.
    write_timeout: float | None = None
    session_metadata: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class _Pending:
    data: bytes
    created_at_ms: int
    metadata: tuple[tuple[str, bytes], ...]
    size: int
    seq_no: int = 0
    result: WriteResult | None = None


def _pending(message: MessageLike, now_ms: int) -> _Pending:
    if isinstance(message, Message):
        items = tuple((key, bytes(value)) for key, value in message.metadata.items())
        size = len(message.data) + _MESSAGE_OVERHEAD + sum(len(k) + len(v) + 8 for k, v in items)
        created = message.created_at_ms if message.created_at_ms is not None else now_ms
        return _Pending(bytes(message.data), created, items, size)
    if not isinstance(message, bytes | bytearray | memoryview):
        raise TypeError(f"a message must be bytes or Message, not {type(message).__name__}")
    data = bytes(message)
    return _Pending(data, now_ms, (), len(data) + _MESSAGE_OVERHEAD)


class Writer:
    """Start :meth:`run` in a nursery (``async with open_writer(...)`` does it for you)."""

    def __init__(self, connection: Connection, topic: str, settings: WriterSettings) -> None:
        if settings.max_buffer_messages < 1 or settings.max_buffer_bytes < 1:
            raise ValueError("buffer limits must be positive")
        self._connection = connection
        self.topic = topic
        self.settings = settings
        self.producer_id = settings.producer_id or uuid.uuid4().hex
        # The largest request the gRPC limit allows; one message must fit in one.
        self._max_request = connection.config.max_message_size - _REQUEST_OVERHEAD
        self._queue: deque[_Pending] = deque()  # not yet sent on the current stream
        self._inflight: deque[_Pending] = deque()  # sent, waiting for their acks
        self._buffered_messages = 0
        self._buffered_bytes = 0
        self._accepted = 0  # messages ever accepted by write()
        self._acked = 0  # messages ever acknowledged
        self._last_seq_no: int | None = None  # the last number handed out
        self._first_last_seq_no: int | None = None  # what the first init_response said
        self.partition: int | None = None
        self._changed = Signal()  # acks, errors, close: waiters re-check
        self._work = Signal()  # new messages for the sender
        self._error: BaseException | None = None
        self._closing = False
        self._scope = trio.CancelScope()
        self._finished = trio.Event()
        self._init_done = trio.Event()
        #: Streams opened so far (the first one plus reconnects).
        self.sessions = 0

    # -- the application side -------------------------------------------------------------

    @property
    def buffered(self) -> tuple[int, int]:
        """Messages and bytes written but not yet acknowledged."""
        return self._buffered_messages, self._buffered_bytes

    async def write(
        self, messages: MessageLike | Sequence[MessageLike], *, timeout: float | None = None
    ) -> None:
        """Buffer ``messages`` (one, or a sequence written as one unit); waits for space up
        to ``timeout`` (default: the writer's ``write_timeout``), then BufferFullError."""
        await self._accept(messages, timeout)

    async def write_with_ack(
        self, messages: MessageLike | Sequence[MessageLike], *, timeout: float | None = None
    ) -> list[WriteResult]:
        """Write and wait for the acks: one WriteResult per message, in order. ``timeout``
        bounds only the wait for buffer space."""
        pendings = await self._accept(messages, timeout)
        results: list[WriteResult] = []
        for pending in pendings:
            while pending.result is None:
                self._raise_if_failed()
                if self._finished.is_set():
                    raise ClosedError("the writer was closed before the ack arrived")
                await self._changed.wait()
            results.append(pending.result)
        return results

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until everything written before this call is acknowledged (TimeoutError
        after ``timeout``)."""
        self._raise_if_closed()
        target = self._accepted
        with timeout_after(timeout, "flush"):
            while self._acked < target:
                self._raise_if_failed()
                if self._finished.is_set():
                    raise ClosedError("the writer is closed")
                await self._changed.wait()

    async def close(self, timeout: float | None = None) -> None:
        """Stop accepting writes, wait (up to ``timeout``) for the acks of everything
        accepted, then stop the background tasks and wait for them to end.

        Raises the writer's fatal error, or CloseTimeoutError, if messages were left
        unacknowledged. A second close only waits for the first one's work to finish.
        """
        first = not self._closing
        self._closing = True
        self._changed.fire()
        if first:
            with trio.move_on_after(math.inf if timeout is None else timeout):
                while (
                    self._acked < self._accepted
                    and self._error is None
                    and not self._finished.is_set()
                ):
                    await self._changed.wait()
        self._scope.cancel()
        await self._finished.wait()
        if not first:
            return
        unacked = self._accepted - self._acked
        if unacked:
            if self._error is not None:
                raise self._error
            raise CloseTimeoutError(
                f"closed with {unacked} message(s) not acknowledged within {timeout} s", unacked
            )

    async def wait_init(self) -> int:
        """Wait for the first stream to open; returns the producer's last seq_no then."""
        while not self._init_done.is_set():
            self._raise_if_failed()
            if self._finished.is_set():
                raise ClosedError("the writer is closed")
            with trio.move_on_after(0.5):
                await self._init_done.wait()
        assert self._first_last_seq_no is not None
        return self._first_last_seq_no

    def _raise_if_closed(self) -> None:
        if self._closing:
            raise ClosedError("the writer is closed")

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    async def _accept(
        self, messages: MessageLike | Sequence[MessageLike], timeout: float | None
    ) -> list[_Pending]:
        self._raise_if_closed()
        self._raise_if_failed()
        now_ms = time.time_ns() // 1_000_000
        items = [messages] if isinstance(messages, MessageLike) else list(messages)
        pendings = [_pending(m, now_ms) for m in items]
        if not pendings:
            return []
        for pending in pendings:
            if pending.size > self._max_request:
                raise ValueError(
                    f"a message of {len(pending.data)} bytes cannot fit in one gRPC message "
                    f"(limit {self._connection.config.max_message_size})"
                )
        count, size = len(pendings), sum(p.size for p in pendings)
        if timeout is None:
            timeout = self.settings.write_timeout
        with trio.move_on_after(math.inf if timeout is None else timeout):
            while not self._fits(count, size):
                await self._changed.wait()
                self._raise_if_closed()
                self._raise_if_failed()
                if self._finished.is_set():  # background task cancelled by its nursery
                    raise ClosedError("the writer has stopped")
            self._queue.extend(pendings)
            self._buffered_messages += count
            self._buffered_bytes += size
            self._accepted += count
            self._work.fire()
            return pendings
        raise BufferFullError(
            f"no buffer space for {count} message(s) ({size} bytes) within {timeout} s"
        )

    def _fits(self, count: int, size: int) -> bool:
        if self._buffered_messages == 0:
            return True  # even an oversized call goes through an empty buffer
        settings = self.settings
        return (
            self._buffered_messages + count <= settings.max_buffer_messages
            and self._buffered_bytes + size <= settings.max_buffer_bytes
        )

    # -- the background side --------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer's background work; returns after close() or a fatal error."""
        task_status.started()
        try:
            with self._scope:
                await self._reconnect_loop()
        finally:
            self._finished.set()
            self._changed.fire()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._changed.fire()

    async def _reconnect_loop(self) -> None:
        error = await run_sessions(
            self._connection, self._session, lambda: self.sessions, what="write"
        )
        if error is not None:
            self._fail(error)

    async def _session(self, channel: GrpcChannel) -> None:
        async with channel.stream(WRITE_METHOD, self._connection.metadata()) as call:
            await call.send(self._init_request().SerializeToString())
            reply = await self._receive(call)
            if reply.WhichOneof("server_message") != "init_response":
                raise ProtocolError("the first reply to a writer must be init_response")
            init = reply.init_response
            if self._last_seq_no is None:
                self._last_seq_no = self._first_last_seq_no = int(init.last_seq_no)
            self.partition = int(init.partition_id)
            self.sessions += 1
            self._init_done.set()
            self._written_before(int(init.last_seq_no), self.partition)
            # Everything unacknowledged goes again, in its original order and numbering.
            self._queue.extendleft(reversed(self._inflight))
            self._inflight.clear()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._send_loop, call)
                await self._receive_loop(call)

    def _written_before(self, last_seq_no: int, partition: int) -> None:
        """Messages in flight up to ``last_seq_no`` reached the partition on a stream that
        ended before their acks: they count as acknowledged (without an offset, like a
        skipped duplicate) and are not sent again."""
        done = False
        while self._inflight and self._inflight[0].seq_no <= last_seq_no:
            pending = self._inflight.popleft()
            pending.result = WriteResult(pending.seq_no, partition, None)
            self._buffered_messages -= 1
            self._buffered_bytes -= pending.size
            self._acked += 1
            done = True
        if done:
            self._changed.fire()

    def _init_request(self) -> FromClient:
        request = FromClient()
        init = request.init_request
        init.path = self.topic
        init.producer_id = self.producer_id
        init.write_session_meta.update(self.settings.session_metadata)
        init.get_last_seq_no = True
        if self.settings.partition_id is not None:
            init.partition_id = self.settings.partition_id
        else:
            init.message_group_id = self.producer_id
        return request

    async def _receive(self, call: ClientStream) -> FromServer:
        data = await call.receive()
        if data is None:
            # Never a clean end while we write: treat it as a dropped stream.
            raise GrpcError(StatusCode.UNAVAILABLE, "the server ended the write stream")
        reply: FromServer = FromServer.FromString(data)
        check_status(int(reply.status), reply.issues)
        return reply

    async def _send_loop(self, call: ClientStream) -> None:
        while True:
            while not self._queue:
                await self._work.wait()
            await call.send(self._next_request())

    def _next_request(self) -> bytes:
        """Move messages from the queue into one WriteRequest within the size limits."""
        assert self._last_seq_no is not None
        request = FromClient()
        write = request.write_request
        write.codec = CODEC_RAW
        size = _REQUEST_OVERHEAD
        while self._queue:
            pending = self._queue[0]
            if write.messages and (
                size + pending.size > self._max_request
                or size + pending.size > _TARGET_REQUEST_BYTES
            ):
                break
            self._queue.popleft()
            if pending.seq_no == 0:
                self._last_seq_no += 1
                pending.seq_no = self._last_seq_no
            data = write.messages.add(
                seq_no=pending.seq_no,
                data=pending.data,
                uncompressed_size=len(pending.data),
            )
            data.created_at.FromMilliseconds(pending.created_at_ms)
            for key, value in pending.metadata:
                data.metadata_items.add(key=key, value=value)
            size += pending.size
            self._inflight.append(pending)
        encoded: bytes = request.SerializeToString()
        return encoded

    async def _receive_loop(self, call: ClientStream) -> None:
        while True:
            reply = await self._receive(call)
            kind = reply.WhichOneof("server_message")
            if kind == "write_response":
                self._on_acks(reply.write_response)
            elif kind != "update_token_response":
                raise ProtocolError(f"unexpected {kind} in a write stream")

    def _on_acks(self, response: ydb_topic_pb2.StreamWriteMessage.WriteResponse) -> None:
        partition = int(response.partition_id)
        for ack in response.acks:
            if not self._inflight:
                raise ProtocolError(f"ack for seq_no {ack.seq_no} with nothing in flight")
            pending = self._inflight.popleft()
            if ack.seq_no != pending.seq_no:
                raise ProtocolError(f"ack for seq_no {ack.seq_no}, expected {pending.seq_no}")
            status = ack.WhichOneof("message_write_status")
            if status == "written":
                offset: int | None = int(ack.written.offset)
            elif status == "skipped":
                offset = None
            else:
                raise ProtocolError(f"ack for seq_no {ack.seq_no} has no write status")
            pending.result = WriteResult(pending.seq_no, partition, offset)
            self._buffered_messages -= 1
            self._buffered_bytes -= pending.size
            self._acked += 1
        self._changed.fire()


@asynccontextmanager
async def open_writer(
    connection: Connection, topic: str, settings: WriterSettings | None = None
) -> AsyncIterator[Writer]:
    """A writer whose background task lives in a nursery of its own; leaving the block
    closes it (waiting for acks) unless the block raised."""
    writer = Writer(connection, topic, settings or WriterSettings())
    with unwrap_single_exception():
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            try:
                yield writer
            except BaseException:
                writer._scope.cancel()
                raise
            await writer.close()
