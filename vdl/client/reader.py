"""A topic reader over ``StreamRead``: partition sessions, batches, commits, flow control.

The server assigns partitions by ``start_partition_session`` and takes them back with
``stop_partition_session``; data arrives only for started sessions and only against the byte
credit we grant (half of the buffer is re-granted once the application has taken that much).

A batch is committed on the stream it came from: commit ranges are contiguous per partition
session, starting at the committed offset the server announced, so the server can merge
them. When the stream breaks, its sessions die with it: buffered batches of those sessions
are dropped and their pending commits fail with CommitError. The new stream (on another
node of the connection's pool when the old one's node died) starts each partition after the
last message handed to the application, or at the committed offset if that is further; the
first commit there covers the range from the committed offset, so a commit lost with the
old stream is made good. ``close()`` does not reconnect: it waits for the acks of commits
already made on the live stream, then stops.

A reader without a consumer (``consumer=None``) reads the partitions it names, or every
partition of the topic, from their start (or ``start_from``) and cannot commit: the server
stores nothing for it, as YDB does for a read session without a consumer.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import trio

from vdl.client.admin import Admin
from vdl.client.connection import Connection
from vdl.client.errors import (
    ClosedError,
    CommitError,
    ProtocolError,
    check_status,
    timeout_after,
)
from vdl.client.messages import ReadMessage
from vdl.client.stream_sessions import run_sessions
from vdl.log.batch_header import COMPRESSION_GZIP, COMPRESSION_ZSTD
from vdl.log.codecs import CodecError, decompress
from vdl.log.ydb_mapping import CODEC_GZIP, CODEC_RAW, CODEC_ZSTD, is_custom_codec
from vdl.net.grpc import GrpcChannel, GrpcError, StatusCode
from vdl.net.grpc.client import ClientStream
from vdl.net.grpc.driver import Signal, unwrap_single_exception
from vdl.net.ydb.protos import ydb_topic_pb2

READ_METHOD = "/Ydb.Topic.V1.TopicService/StreamRead"
FromClient = ydb_topic_pb2.StreamReadMessage.FromClient
FromServer = ydb_topic_pb2.StreamReadMessage.FromServer
# YDB codecs this reader decodes, as the Kafka codec of the same format (vdl.log.codecs).
_DECODED = {CODEC_GZIP: COMPRESSION_GZIP, CODEC_ZSTD: COMPRESSION_ZSTD}

#: Where a partition starts the first time this reader gets it: the consumer's committed
#: offset (None), the first or the next-to-be-written offset, or an explicit offset.
PartitionStart = None | Literal["earliest", "latest"] | int
#: One start for every partition, or one per partition (``{0: 120, 3: "latest"}``);
#: partitions a mapping leaves out start at the consumer's committed offset (or, without
#: a consumer, at their start).
StartFrom = PartitionStart | Mapping[int, PartitionStart]


@dataclass(frozen=True, slots=True)
class ReaderSettings:
    #: The consumer to read (and commit) as; None: read without one (no commits).
    consumer: str | None
    #: Only these partitions (None: whatever the server assigns, or without a consumer
    #: every partition of the topic).
    partitions: tuple[int, ...] | None = None
    start_from: StartFrom = None
    buffer_bytes: int = 16 << 20


@dataclass(slots=True, eq=False)
class _PartitionSession:
    id: int
    topic: str
    partition: int
    committed: int  # the server's latest committed offset for it
    next_commit_start: int
    alive: bool = True
    #: End offsets of commits sent and not yet acknowledged.
    pending: list[int] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class Batch:
    """Messages of one partition, in offset order; commit it with :meth:`Reader.commit`."""

    topic: str
    partition: int
    messages: list[ReadMessage]
    _session: _PartitionSession
    _commit_start: int
    _commit_end: int
    _credit: int

    def head(self, count: int) -> Batch:
        """The first ``count`` messages, committing only up to the last of them."""
        messages = self.messages[:count]
        end = messages[-1].offset + 1 if messages else self._commit_start
        return Batch(
            self.topic, self.partition, messages, self._session, self._commit_start, end, 0
        )


def _decode(codec: int, data: bytes) -> bytes:
    """The payload of a batch in ``codec``; a custom codec's (10000 and above) is left as
    the writer encoded it, for the application (``ReadMessage.codec`` names it)."""
    if codec in (CODEC_RAW, 0) or is_custom_codec(codec):
        return data
    kafka_codec = _DECODED.get(codec)
    if kafka_codec is None:
        raise ProtocolError(f"codec {codec} is not supported by this reader")
    try:
        return decompress(kafka_codec, data)
    except CodecError as exc:
        raise ProtocolError(f"cannot decode a codec {codec} batch: {exc}") from None


class Reader:
    """Start :meth:`run` in a nursery (``async with open_reader(...)`` does it for you)."""

    def __init__(self, connection: Connection, topic: str, settings: ReaderSettings) -> None:
        self._connection = connection
        self.topic = topic
        self.settings = settings
        self._batches: deque[Batch] = deque()
        self._sessions: dict[int, _PartitionSession] = {}
        # Next offset per partition after what the application was handed: where a new
        # stream resumes, so a reconnect neither skips nor needlessly repeats.
        self._resume: dict[int, int] = {}
        self._outbox: trio.MemorySendChannel[bytes] | None = None
        self._released = 0
        # Commits whose stream ended before their ack.
        self._lost_commits = 0
        self._changed = Signal()
        self._error: BaseException | None = None
        self._closing = False
        self._stream_open = False
        self._scope = trio.CancelScope()
        self._finished = trio.Event()
        self.session_id = ""
        #: Streams opened so far.
        self.streams = 0

    # -- the application side -------------------------------------------------------------

    async def receive_batch(self, timeout: float | None = None) -> Batch:
        """The next batch; TimeoutError if none arrives within ``timeout``."""
        with timeout_after(timeout, "receive_batch"):
            while True:
                if self._closing:
                    raise ClosedError("the reader is closed")
                while self._batches:
                    batch = self._batches.popleft()
                    if batch._session.alive:
                        await self._release(batch._credit)
                        self._resume[batch.partition] = batch.messages[-1].offset + 1
                        return batch
                if self._error is not None:
                    raise self._error
                if self._finished.is_set():
                    raise ClosedError("the reader has stopped")
                await self._changed.wait()

    async def commit(self, batch: Batch) -> None:
        """Send the commit of ``batch`` (everything up to its last message is processed);
        returns without waiting for the server's ack."""
        session = batch._session
        if self.settings.consumer is None:
            raise CommitError("a reader without a consumer cannot commit")
        if self._error is not None:
            raise self._error
        if not session.alive or self._outbox is None:
            raise CommitError(
                f"partition {batch.partition} of {batch.topic} was reassigned or its stream "
                "ended; its messages will be delivered again"
            )
        start, end = batch._commit_start, batch._commit_end
        if end <= session.committed:
            return
        request = FromClient()
        commit = request.commit_offset_request.commit_offsets.add(partition_session_id=session.id)
        commit.offsets.add(start=max(start, session.committed), end=end)
        session.pending.append(end)
        await self._outbox.send(request.SerializeToString())

    async def commit_with_ack(self, batch: Batch, timeout: float | None = None) -> None:
        await self.commit(batch)
        session = batch._session
        with timeout_after(timeout, "commit_with_ack"):
            while session.committed < batch._commit_end:
                if not session.alive:
                    raise CommitError(f"partition {batch.partition} session ended before the ack")
                await self._changed.wait()

    async def close(self, timeout: float | None = None) -> None:
        """Stop reading, wait (up to ``timeout``) for the acks of commits made so far, stop
        the background tasks. Raises CommitError if commits were left unacknowledged."""
        first = not self._closing
        self._closing = True
        self._changed.fire()
        lost_before = self._lost_commits
        if first:
            with trio.move_on_after(math.inf if timeout is None else timeout):
                while self._unacked_commits() and self._stream_open:
                    await self._changed.wait()
        self._scope.cancel()
        await self._finished.wait()
        left = self._lost_commits - lost_before
        if first and left:
            raise CommitError(f"{left} commit(s) were not acknowledged before close")

    def _unacked_commits(self) -> int:
        return sum(
            sum(1 for end in s.pending if end > s.committed) for s in self._sessions.values()
        )

    async def _release(self, credit: int) -> None:
        self._released += credit
        if self._outbox is not None and self._released >= self.settings.buffer_bytes // 2:
            request = FromClient()
            request.read_request.bytes_size = self._released
            self._released = 0
            await self._outbox.send(request.SerializeToString())

    # -- the background side --------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            with self._scope:
                await self._reconnect_loop()
        finally:
            self._finished.set()
            self._changed.fire()

    async def _reconnect_loop(self) -> None:
        error = await run_sessions(
            self._connection,
            self._session,
            lambda: self.streams,
            what="read",
            # Closing: commits belong to the stream that ended, a new one cannot ack them.
            closing=lambda: self._closing,
        )
        if error is not None:
            self._error = error

    async def _session(self, channel: GrpcChannel) -> None:
        partitions = self.settings.partitions
        if self.settings.consumer is None and partitions is None:
            # Named explicitly: a server without auto-partitioning support wants them.
            described = await Admin(self._connection).describe_topic(self.topic)
            partitions = tuple(p.partition for p in described.partitions)
        send, outgoing = trio.open_memory_channel[bytes](64)
        try:
            async with channel.stream(READ_METHOD, self._connection.metadata()) as call:
                await call.send(self._init_request(partitions).SerializeToString())
                reply = await self._receive(call)
                if reply.WhichOneof("server_message") != "init_response":
                    raise ProtocolError("the first reply to a reader must be init_response")
                self.session_id = reply.init_response.session_id
                self.streams += 1
                self._stream_open = True
                self._released = 0
                credit = FromClient()
                credit.read_request.bytes_size = self.settings.buffer_bytes
                await call.send(credit.SerializeToString())
                self._outbox = send
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._send_loop, call, outgoing)
                    await self._receive_loop(call)
        finally:
            self._outbox = None
            self._stream_open = False
            self._lost_commits += self._unacked_commits()
            for session in self._sessions.values():
                session.alive = False
            self._sessions.clear()
            self._batches.clear()
            self._changed.fire()

    def _init_request(self, partitions: tuple[int, ...] | None) -> FromClient:
        request = FromClient()
        init = request.init_request
        if self.settings.consumer is not None:
            init.consumer = self.settings.consumer
        selector = init.topics_read_settings.add(path=self.topic)
        if partitions is not None:
            selector.partition_ids.extend(partitions)
        return request

    async def _receive(self, call: ClientStream) -> FromServer:
        data = await call.receive()
        if data is None:
            raise GrpcError(StatusCode.UNAVAILABLE, "the server ended the read stream")
        reply: FromServer = FromServer.FromString(data)
        check_status(int(reply.status), reply.issues)
        return reply

    async def _send_loop(
        self, call: ClientStream, outgoing: trio.MemoryReceiveChannel[bytes]
    ) -> None:
        async for data in outgoing:
            await call.send(data)

    async def _receive_loop(self, call: ClientStream) -> None:
        while True:
            reply = await self._receive(call)
            kind = reply.WhichOneof("server_message")
            if kind == "read_response":
                self._on_data(reply.read_response)
            elif kind == "start_partition_session_request":
                await self._on_start(call, reply.start_partition_session_request)
            elif kind == "stop_partition_session_request":
                await self._on_stop(call, reply.stop_partition_session_request)
            elif kind == "commit_offset_response":
                for item in reply.commit_offset_response.partitions_committed_offsets:
                    session = self._sessions.get(item.partition_session_id)
                    if session is not None:
                        session.committed = max(session.committed, int(item.committed_offset))
                        session.pending = [e for e in session.pending if e > session.committed]
                self._changed.fire()
            elif kind == "end_partition_session":
                pass  # its data has all been sent; nothing more will come for it
            # update_token_response, partition_session_status_response: nothing to do.

    async def _on_start(self, call: ClientStream, request: Any) -> None:
        info = request.partition_session
        committed = int(request.committed_offset)
        session = _PartitionSession(
            int(info.partition_session_id), self.topic, int(info.partition_id), committed, committed
        )
        self._sessions[session.id] = session
        reply = FromClient()
        response = reply.start_partition_session_response
        response.partition_session_id = session.id
        read_offset = self._read_offset(session.partition, committed, request.partition_offsets)
        if read_offset is not None:
            response.read_offset = read_offset
        await call.send(reply.SerializeToString())

    def _read_offset(self, partition: int, committed: int, offsets: Any) -> int | None:
        if partition in self._resume:
            return max(self._resume[partition], committed)
        start_from: StartFrom = self.settings.start_from
        if isinstance(start_from, Mapping):
            start_from = start_from.get(partition)
        if start_from == "earliest":
            return int(offsets.start)
        if start_from == "latest":
            return int(offsets.end)
        return start_from if isinstance(start_from, int) else None

    async def _on_stop(self, call: ClientStream, request: Any) -> None:
        session = self._sessions.pop(int(request.partition_session_id), None)
        if session is not None:
            session.alive = False
            self._changed.fire()
        if request.graceful:
            reply = FromClient()
            reply.stop_partition_session_response.partition_session_id = (
                request.partition_session_id
            )
            await call.send(reply.SerializeToString())

    def _on_data(self, response: Any) -> None:
        parts = list(response.partition_data)
        total = int(response.bytes_size)
        share, extra = divmod(total, max(1, len(parts)))
        for index, part in enumerate(parts):
            credit = share + (extra if index == len(parts) - 1 else 0)
            session = self._sessions.get(part.partition_session_id)
            if session is None:
                # A session we already gave up: its data is not ours to hand out.
                self._released += credit
                continue
            messages: list[ReadMessage] = []
            for batch in part.batches:
                written_at = batch.written_at.ToMilliseconds()
                for data in batch.message_data:
                    messages.append(
                        ReadMessage(
                            data=_decode(batch.codec, data.data),
                            codec=batch.codec if is_custom_codec(batch.codec) else CODEC_RAW,
                            offset=int(data.offset),
                            seq_no=int(data.seq_no),
                            created_at_ms=data.created_at.ToMilliseconds(),
                            written_at_ms=written_at,
                            producer_id=batch.producer_id,
                            message_group_id=data.message_group_id,
                            metadata={item.key: item.value for item in data.metadata_items},
                            topic=self.topic,
                            partition=session.partition,
                        )
                    )
            if not messages:
                self._released += credit
                continue
            end = messages[-1].offset + 1
            self._batches.append(
                Batch(
                    self.topic,
                    session.partition,
                    messages,
                    session,
                    session.next_commit_start,
                    end,
                    credit,
                )
            )
            session.next_commit_start = end
        self._changed.fire()


@asynccontextmanager
async def open_reader(
    connection: Connection, topic: str, settings: ReaderSettings
) -> AsyncIterator[Reader]:
    """A reader whose background task lives in a nursery of its own; leaving the block
    closes it (waiting for commit acks) unless the block raised."""
    reader = Reader(connection, topic, settings)
    with unwrap_single_exception():
        async with trio.open_nursery() as nursery:
            await nursery.start(reader.run)
            try:
                yield reader
            except BaseException:
                reader._scope.cancel()
                raise
            await reader.close()
