"""``Ydb.Topic.V1/StreamWrite``: one writer session per call.

A session is pinned to one partition (explicit ``partition_id``, else a stable hash of the
message group / producer id over the partitions the topic had before any were added, else,
for a session with neither, one the server picks: round robin over the partitions this node
leads), so a producer's messages keep their order and its deduplication state lives in one
place: the partition's :class:`YdbProducerTable`, rebuilt from the log. Per message:
``seq_no`` at or below the producer's last one is acked ``skipped`` (after the first copy is
durable), anything newer is appended and acked ``written`` with its offset once committed. Acks go
out one per message, in the order the messages came, from a single sender task, so they
never interleave with other replies.

Codecs: a topic without a codec list advertises ``[RAW]`` only, which stops the SDK from
switching to GZIP on its second batch (GZIP costs server CPU and is stored decoded anyway),
and takes any codec served. GZIP and ZSTD payloads are decompressed (bounded by the size
limit; in a worker thread when a request carries much of them) and stored plain, so Kafka
consumers and YDB readers both see the original bytes, and readers receive codec RAW.
Custom codecs (10000 and above) pass from writer to reader untouched, as YDB does: stored
as written, with the codec and declared size in ``__ydb.*`` headers (``ydb_mapping``).
LZOP and unknown codecs are refused.

Size limit: a message's decoded payload may be at most the topic's ``max.message.bytes``;
a bigger one ends the session with BAD_REQUEST naming the seq_no and both sizes.
"""

from __future__ import annotations

import itertools
import logging
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from vdl.broker.broker import Broker
from vdl.broker.topics import Topic
from vdl.log.codecs import CodecError, PayloadTooLarge, decompress
from vdl.log.compaction import is_compacted
from vdl.log.record_batch import COMPRESSION_GZIP, COMPRESSION_ZSTD, parse_batch_header
from vdl.log.stream import LogStream
from vdl.log.ydb_mapping import (
    CODEC_GZIP,
    CODEC_RAW,
    CODEC_ZSTD,
    YdbProducerTable,
    codec_headers,
    is_custom_codec,
    is_reserved_key,
)
from vdl.net.grpc import ServerContext, ServerStream
from vdl.net.grpc.protobuf import decode
from vdl.net.ydb.auth import Authenticator, StreamAuth
from vdl.net.ydb.cluster import YdbCluster
from vdl.net.ydb.operation import (
    StatusIds,
    YdbError,
    as_ydb_error,
    count_error,
    leaf_error,
    wire,
)
from vdl.net.ydb.protos import ydb_topic_pb2
from vdl.net.ydb.topic_admin import TopicAdmin
from vdl.net.ydb.write_batch import PendingMessage, SessionBatchEncoder
from vdl.security.acl import Operation, ResourceType

log = logging.getLogger(__name__)

FromClient = ydb_topic_pb2.StreamWriteMessage.FromClient
FromServer = ydb_topic_pb2.StreamWriteMessage.FromServer
WriteAck = ydb_topic_pb2.StreamWriteMessage.WriteResponse.WriteAck
_REASON_ALREADY_WRITTEN = 1
# Write responses waiting for their commit; a full queue stops reading from the client.
_ACK_QUEUE = 1024
# Payload bytes appended and not yet acked per session: reading from the client pauses above
# it. The appended data waits in memory for the flusher, so this bounds memory per session
# (a count of requests alone would not: one request may carry 64 MB), and it is the depth of
# the pipeline that hides the commit latency (throughput ~ this / time to commit).
_UNACKED_BYTES = 32 << 20
# How long a stopping node lets a session's pending acks drain before cutting it off.
_STOP_DRAIN_S = 5.0
# How long a writer's init waits for a partition without a known leader (on a cluster).
_ELECTION_WAIT_S = 0.5
# Turns of the round robin for sessions without partition, producer id or message group.
_UNKEYED_TURN = itertools.count()


def choose_partition(
    partitions: int,
    producer_id: str,
    message_group_id: str,
    partition_id: int | None,
    *,
    hashed: int | None = None,
) -> int:
    """The partition a writer is pinned to; stable across reconnects and restarts, and
    across partitions being added: without a partition id the key is hashed over `hashed`
    partitions (the count before the topic first grew, `Topic.hashed_partitions`)."""
    if partition_id is not None:
        if not 0 <= partition_id < partitions:
            raise YdbError(
                StatusIds.BAD_REQUEST,
                f"partition {partition_id} does not exist (the topic has {partitions})",
            )
        return partition_id
    key = message_group_id or producer_id
    if not key:
        return 0
    return zlib.crc32(key.encode()) % (hashed or partitions)


def advertised_codecs(topic: Topic) -> list[int]:
    return list(topic.supported_codecs) if topic.supported_codecs else [CODEC_RAW]


def _metadata_items(items: Any) -> tuple[tuple[str, bytes], ...]:
    pairs = tuple((item.key, bytes(item.value)) for item in items)
    for key, _ in pairs:
        if is_reserved_key(key):
            raise YdbError(StatusIds.BAD_REQUEST, f"metadata key {key!r} is reserved (__ydb.*)")
    return pairs


# YDB codecs the server decodes, as the Kafka codec of the same format (vdl.log.codecs).
_DECODED = {CODEC_GZIP: COMPRESSION_GZIP, CODEC_ZSTD: COMPRESSION_ZSTD}
_CODEC_NAMES = {CODEC_GZIP: "GZIP", CODEC_ZSTD: "ZSTD"}
# Compressed bytes in one write request above which its payloads are decoded in a worker
# thread: below it the thread hop costs more than the decoding (well under a millisecond).
_THREAD_DECODE_BYTES = 256 * 1024


def is_stored_as_written(codec: int) -> bool:
    """RAW, and custom codecs: the payload is stored as it came."""
    return codec in (CODEC_RAW, 0) or is_custom_codec(codec)


def check_codec(codec: int) -> None:
    if not is_stored_as_written(codec) and codec not in _DECODED:
        raise YdbError(
            StatusIds.BAD_REQUEST,
            f"codec {codec} is not supported; use RAW (1), GZIP (2), ZSTD (4) "
            f"or a custom codec (10000 and above)",
        )


def decode_payload(codec: int, data: bytes, limit: int) -> bytes | None:
    """The plain payload, or None if it expands beyond ``limit`` (the caller names the
    message). RAW and custom codecs come back as they are."""
    if is_stored_as_written(codec):
        return data
    check_codec(codec)
    try:
        return decompress(_DECODED[codec], data, limit)
    except PayloadTooLarge:
        return None
    except CodecError as exc:
        raise YdbError(StatusIds.BAD_REQUEST, f"bad {_CODEC_NAMES[codec]} payload: {exc}") from None


def decode_payloads(codec: int, payloads: list[bytes], limit: int) -> list[bytes | None]:
    return [decode_payload(codec, data, limit) for data in payloads]


# How long an ack may wait for its write to commit before the session gives up.
COMMIT_WAIT_S = 30.0


@dataclass(slots=True)
class _Reply:
    """One server message; acks are held until offset ``wait_for`` is committed."""

    message: Any
    wait_for: int = -1
    size: int = 0  # payload bytes this reply acknowledges as appended


class WriteSession:
    def __init__(
        self,
        broker: Broker,
        admin: TopicAdmin,
        auth: Authenticator,
        clock_ms: Callable[[], int],
        stopping: trio.Event,
        stream: ServerStream,
        context: ServerContext,
        cluster: YdbCluster | None = None,
    ) -> None:
        self._broker = broker
        self._cluster = cluster
        self._admin = admin
        self._auth = auth
        self._clock_ms = clock_ms
        self._stopping = stopping
        self._stream = stream
        self._context = context
        self._session_id = uuid.uuid4().hex
        self._producer_id = ""
        self._message_group_id = ""
        self._session_meta: dict[str, str] = {}
        self._partition = 0
        self._topic: Topic | None = None
        self._log: LogStream | None = None
        self._table: YdbProducerTable | None = None
        self._encoder: SessionBatchEncoder | None = None
        self._unacked = 0
        self._room = trio.Event()
        self._who: StreamAuth

    async def run(self) -> None:
        try:
            self._who = StreamAuth(self._auth, self._context)
            await self._init()
            await self._serve()
        except BaseException as exc:
            leaf = leaf_error(exc)
            error = as_ydb_error(leaf)
            if error is None:
                if leaf is exc:
                    raise
                raise leaf from None
            count_error(self._context.method, error.status)
            await self._send_error(error.status, error.message)

    async def _send_error(self, status: StatusIds, message: str) -> None:
        # In-band: the SDK reads the status of every message; a clean end of the call
        # without one would be fatal (async) or hang (sync) for it.
        reply = FromServer(status=wire(status))
        reply.issues.add(message=message, severity=1)
        await self._stream.send(reply.SerializeToString())

    async def _receive(self) -> Any | None:
        data = await self._stream.receive()
        if data is None:
            return None
        return decode(FromClient, data)

    async def _init(self) -> None:
        first = await self._receive()
        if first is None:
            raise YdbError(StatusIds.BAD_REQUEST, "stream closed before init_request")
        if first.WhichOneof("client_message") != "init_request":
            raise YdbError(StatusIds.BAD_REQUEST, "the first message must be init_request")
        init = first.init_request
        name = self._admin.name_of(init.path)
        self._auth.require(self._who.identity, Operation.WRITE, ResourceType.TOPIC, name)
        topic = self._admin.topic(init.path)
        partitioning = init.WhichOneof("partitioning")
        explicit: int | None = None
        if partitioning == "partition_id":
            explicit = int(init.partition_id)
        elif partitioning == "partition_with_generation":
            explicit = int(init.partition_with_generation.partition_id)
        self._producer_id = init.producer_id
        self._message_group_id = init.message_group_id if partitioning == "message_group_id" else ""
        self._session_meta = dict(init.write_session_meta)
        self._encoder = SessionBatchEncoder(
            self._producer_id, self._message_group_id, self._session_meta
        )
        if explicit is None and not (self._producer_id or self._message_group_id):
            self._partition = self._server_chosen(topic)
        else:
            self._partition = choose_partition(
                topic.partitions,
                self._producer_id,
                self._message_group_id,
                explicit,
                hashed=topic.hashed_partitions,
            )
        self._topic = topic
        await self._require_leader(topic.name, self._partition)
        self._log = self._broker.stream(topic.name, self._partition)
        self._table = self._log.ydb_producers()
        reply = FromServer(status=wire(StatusIds.SUCCESS))
        response = reply.init_response
        response.last_seq_no = self._table.last_seq_no(self._producer_id)
        response.session_id = self._session_id
        response.partition_id = self._partition
        response.supported_codecs.codecs.extend(advertised_codecs(topic))
        await self._stream.send(reply.SerializeToString())
        log.debug(
            "writer %s: producer %r on %s[%d], last seq_no %d",
            self._session_id,
            self._producer_id,
            topic.name,
            self._partition,
            response.last_seq_no,
        )

    def _server_chosen(self, topic: Topic) -> int:
        """A session with no partition, producer id or message group leaves the choice to
        the server (Ydb.Topic.StreamWriteMessage.InitRequest: without them the write is not
        deduplicated and any partition will do): the sessions take the partitions in turn,
        on a cluster only those this node leads, which it can serve."""
        cluster = self._cluster
        candidates = [
            p
            for p in range(topic.partitions)
            if cluster is None or cluster.is_leader(topic.name, p)
        ] or list(range(topic.partitions))
        return candidates[next(_UNKEYED_TURN) % len(candidates)]

    @property
    def _max_message_bytes(self) -> int:
        """The topic's max.message.bytes as it is now: a change applies to open sessions."""
        topic = self._topic
        if topic is None:
            return 0
        current = self._broker.catalog.get(topic.name) or topic
        return int(self._broker.topic_config(current, "max.message.bytes"))

    @property
    def _compacted(self) -> bool:
        """Whether the topic is compacted now (cleanup.policy): its records need a key."""
        topic = self._topic
        if topic is None:
            return False
        current = self._broker.catalog.get(topic.name) or topic
        return is_compacted(self._broker.topic_config(current, "cleanup.policy"))

    async def _require_leader(self, topic: str, partition: int) -> None:
        """On a cluster only the partition's leader takes a writer (see
        ``vdl.net.ydb.cluster``): elsewhere UNAVAILABLE sends the SDK to the next node."""
        cluster = self._cluster
        if cluster is None or cluster.is_leader(topic, partition):
            return
        leader = cluster.leader_of(topic, partition)
        if leader <= 0:
            # An election is running: wait a little for it here rather than have the
            # client spin through the nodes every few milliseconds.
            with trio.move_on_after(_ELECTION_WAIT_S):
                while cluster.leader_of(topic, partition) <= 0:
                    await trio.sleep(0.05)
            if cluster.is_leader(topic, partition):
                return
            leader = cluster.leader_of(topic, partition)
        log.debug("writer %s: %s[%d] is led by node %d", self._session_id, topic, partition, leader)
        raise YdbError(
            StatusIds.UNAVAILABLE,
            f"node {cluster.node_id} does not lead {topic} partition {partition} "
            f"(node {leader} does, -1: unknown); reconnect",
        )

    async def _serve(self) -> None:
        send, receive = trio.open_memory_channel[_Reply](_ACK_QUEUE)
        async with trio.open_nursery() as nursery:
            sent = trio.Event()
            nursery.start_soon(self._send_replies, receive, sent)
            nursery.start_soon(self._who.watch_expiry)
            watching = trio.CancelScope()
            async with send:
                with trio.CancelScope() as reading:
                    nursery.start_soon(self._cancel_on_stop, reading, watching)
                    while True:
                        message = await self._receive()
                        if message is None:
                            # Half-close: the SDK never does it, but acks still go out.
                            break
                        await self._handle(message, send)
            watching.cancel()
            if reading.cancelled_caught:
                # Stopping: let what was appended be acked, then ask the client to come back.
                with trio.move_on_after(_STOP_DRAIN_S):
                    while receive.statistics().current_buffer_used:
                        await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
                raise YdbError(StatusIds.UNAVAILABLE, "the node is shutting down")
            # Half-closed: the acks already queued still go out (``send`` is closed, so the
            # sender ends after them); only then stop the session's other tasks.
            await sent.wait()
            nursery.cancel_scope.cancel()

    async def _cancel_on_stop(self, reading: trio.CancelScope, watching: trio.CancelScope) -> None:
        with watching:
            await self._stopping.wait()
            reading.cancel()

    async def _handle(self, message: Any, send: trio.MemorySendChannel[_Reply]) -> None:
        kind = message.WhichOneof("client_message")
        if kind == "write_request":
            while self._unacked >= _UNACKED_BYTES:
                self._room = trio.Event()
                await self._room.wait()
            request = message.write_request
            codec = self._check_codec(int(request.codec))
            decoded: list[bytes | None] | None = None
            if not is_stored_as_written(codec):
                payloads = [data.data for data in request.messages]
                if sum(map(len, payloads)) > _THREAD_DECODE_BYTES:
                    # Large compressed requests decode off the event loop (zlib and cramjam
                    # release the GIL), so other sessions keep being served meanwhile.
                    decoded = await trio.to_thread.run_sync(
                        decode_payloads, codec, payloads, self._max_message_bytes
                    )
            reply = self._write(request, decoded)
            self._unacked += reply.size
            await send.send(reply)
        elif kind == "update_token_request":
            self._who.update(message.update_token_request.token)
            reply = FromServer(status=wire(StatusIds.SUCCESS))
            reply.update_token_response.SetInParent()
            await send.send(_Reply(reply))
        else:
            raise YdbError(StatusIds.BAD_REQUEST, f"unexpected {kind} in a write session")

    def _check_codec(self, codec: int) -> int:
        assert self._topic is not None
        topic = self._topic
        if topic.supported_codecs and codec not in topic.supported_codecs:
            raise YdbError(
                StatusIds.BAD_REQUEST,
                f"codec {codec} is not allowed for this topic ({list(topic.supported_codecs)})",
            )
        check_codec(codec)
        return codec

    def _write(self, request: Any, decoded: list[bytes | None] | None = None) -> _Reply:
        """Append the new messages now (in order), and return their acks to send later;
        ``decoded``: the request's payloads, already decoded (else they are decoded here)."""
        assert self._topic is not None and self._log is not None and self._table is not None
        codec = self._check_codec(int(request.codec))
        if request.HasField("tx"):
            raise YdbError(StatusIds.UNSUPPORTED, "transactional writes are not supported")
        now = self._clock_ms()
        producer = self._producer_id
        table = self._table
        limit = self._max_message_bytes
        # A compacted topic keeps the latest record per key; a YDB message's key is its
        # message_group_id, so a message without one (and no session group) is refused.
        keyless_refused = not self._message_group_id and self._compacted
        plain = is_stored_as_written(codec)
        custom = is_custom_codec(codec)
        pending: list[PendingMessage] = []
        # Per message in request order: its seq_no and whether it is new (else skipped).
        seq_nos: list[int] = []
        skipped: list[bool] | None = None
        wait_for = -1
        size = 0
        last_seen = table.last_seq_no(producer)
        # The loop runs once per message: protobuf fields are read once each, and what is
        # the same for the whole session is left to the batch encoder.
        for index, data in enumerate(request.messages):
            seq_no = data.seq_no
            seq_nos.append(seq_no)
            if producer and seq_no <= last_seen:
                earlier = table.last(producer)
                # Skipped, but only acked once the first copy is durable.
                if earlier is not None:
                    wait_for = max(wait_for, earlier.offset)
                if skipped is None:
                    skipped = [False] * (len(seq_nos) - 1)
                skipped.append(True)
                continue
            if skipped is not None:
                skipped.append(False)
            payload: bytes | None
            if plain:
                payload = data.data
            elif decoded is not None:
                payload = decoded[index]
            else:
                payload = decode_payload(codec, data.data, limit)
            if payload is None or len(payload) > limit:
                has = "decodes to" if payload is None else f"has {len(payload)} bytes,"
                raise YdbError(
                    StatusIds.BAD_REQUEST,
                    f"message seq_no {seq_no} {has} more than the "
                    f"topic's limit of {limit} bytes (max.message.bytes)",
                )
            created = now
            if data.HasField("created_at"):
                stamp = data.created_at
                created = stamp.seconds * 1000 + stamp.nanos // 1_000_000
            message = PendingMessage(payload, seq_no, created)
            if data.metadata_items:
                message.metadata_items = _metadata_items(data.metadata_items)
            if custom:
                # After the metadata items, where ``ydb_mapping.to_record`` puts them.
                size_declared = data.uncompressed_size or len(payload)
                message.metadata_items += codec_headers(codec, size_declared)
            if data.WhichOneof("partitioning") == "message_group_id":
                message.message_group_id = data.message_group_id
            if keyless_refused and not message.message_group_id:
                raise YdbError(
                    StatusIds.BAD_REQUEST,
                    f"message seq_no {seq_no} has no message_group_id: topic "
                    f"{self._topic.name!r} is compacted (cleanup.policy), and keeps the "
                    "latest message of each message_group_id",
                )
            pending.append(message)
            size += len(payload)
            if producer:
                last_seen = seq_no
        offsets: list[int] = []
        if pending:
            wait_for = max(wait_for, self._append(pending, now, offsets))
        reply = FromServer(status=wire(StatusIds.SUCCESS))
        response = reply.write_response
        response.partition_id = self._partition
        add = response.acks.add
        if skipped is None:
            for seq_no, offset in zip(seq_nos, offsets, strict=True):
                add(seq_no=seq_no, written={"offset": offset})
        else:
            written = iter(offsets)
            for seq_no, skip in zip(seq_nos, skipped, strict=True):
                if skip:
                    add(seq_no=seq_no, skipped={"reason": _REASON_ALREADY_WRITTEN})
                else:
                    add(seq_no=seq_no, written={"offset": next(written)})
        return _Reply(reply, wait_for, size)

    def _append(self, pending: list[PendingMessage], now: int, offsets: list[int]) -> int:
        """Append as batches of at most max.message.bytes, adding each message's offset to
        ``offsets``; return the last offset."""
        assert self._log is not None and self._table is not None and self._encoder is not None
        last = -1
        start = 0
        while start < len(pending):
            size = 0
            end = start
            while end < len(pending) and (
                end == start or size + len(pending[end].data) + 128 <= self._max_message_bytes
            ):
                size += len(pending[end].data) + 128
                end += 1
            batch = memoryview(self._encoder.encode(pending[start:end], now))
            appended = self._log.append(batch, parse_batch_header(batch))
            offsets.extend(range(appended.base_offset, appended.base_offset + end - start))
            if self._producer_id:
                # seq_nos only grow within a request: the chunk's last one is the producer's.
                self._table.record(self._producer_id, pending[end - 1].seq_no, offsets[-1])
            last = appended.last_offset
            start = end
        return last

    async def _send_replies(
        self, replies: trio.MemoryReceiveChannel[_Reply], sent: trio.Event
    ) -> None:
        assert self._log is not None
        async with replies:
            async for reply in replies:
                if reply.wait_for >= 0:
                    with trio.move_on_after(COMMIT_WAIT_S) as waited:
                        await self._log.wait_committed(reply.wait_for)
                    if waited.cancelled_caught:
                        # No quorum for this long: the writer reconnects and resends, and
                        # seq_no dedup makes that safe whether or not the write survives.
                        raise YdbError(
                            StatusIds.UNAVAILABLE,
                            f"write not committed within {COMMIT_WAIT_S:.0f} s",
                        )
                await self._stream.send(reply.message.SerializeToString())
                self._unacked -= reply.size
                self._room.set()
        sent.set()
