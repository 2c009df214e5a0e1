"""``Ydb.Topic.V1/StreamRead``: one read session per call, for one consumer or for none.

Partitions are handed out by the :class:`ReadCoordinator` among every live session of the
consumer; a session tells its client ``start_partition_session`` for each partition it
acquires (at the consumer's committed offset) and ``stop_partition_session`` for each it must
give up. Data flows only for started sessions and only against the client's byte credit
(``ReadRequest.bytes_size``); every response debits the payload bytes it carries. Commits
(in-stream, and ``CommitOffset``) go to the offsets store shared with Kafka consumer groups
and are answered with the partition's committed offset once durable.

A session without a consumer (``InitRequest.consumer`` empty) reads the partitions it names
(``partition_ids``; all of them when it names none and says ``auto_partitioning_support``,
else BAD_REQUEST), from each partition's start or the topic's ``read_from``, with no
balancing among sessions and nothing stored: a commit on it (in-stream, or a
``commit_offset`` in ``start_partition_session_response``) ends the session with
BAD_REQUEST, as YDB's read session actor does ("can't commit when reading without a
consumer"). A topic's ``max_lag`` (either kind of session) skips the messages written
longer ago than that, as its proto comment says; the log is searched for where that
starts only once the lag window has moved past what the session read
(``vdl.net.ydb.max_lag``).

Records are converted by ``vdl.log.ydb_mapping``: YDB-written messages come back with their
seq_no, producer and metadata; Kafka-written records read with that module's defaults.
Kafka transactions (KIP-98) are read as a read_committed Kafka consumer reads them: only up
to the partition's last stable offset, and the records of an aborted transaction (and the
markers) are skipped, never delivered.
Batches are sent with codec RAW: stored batches are decompressed here whatever the Kafka
codec that wrote them (``vdl.log.codecs``; in a worker thread when a read meets many
compressed bytes), except for messages written with a custom codec, which go out with it.

A partition changes hands only after its holder's client answered
``stop_partition_session_request`` (graceful) with ``stop_partition_session_response``: the
SDK sends that after every commit it made on the partition, and each commit is durable
before the next client message is read, so the next holder starts after the last commit.
A client that does not answer within ``STOP_TIMEOUT_S`` loses the partition anyway: it
is told so first, with a stop that is not graceful (after which the SDK refuses commits
there itself), and never while a commit of it is being made durable, so no commit of that
session lands after the next holder started from the committed offset.

On a cluster a session serves every partition, whichever nodes hold its replicas: from
this node's replica when it holds one, whether it leads or follows (every replica holds the
same committed records at the same offsets), else from another node's
(``vdl.net.ydb.partition_reads``); its commits go through the metadata group
(``ConsumerOffsets``). The readers of a consumer are balanced across the nodes by
``vdl.net.ydb.cluster_reads`` (one balancer, on the metadata group's leader), with the
same interface as the per-node ``ReadCoordinator``.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from vdl.backends.api import Buffer
from vdl.broker.broker import Broker
from vdl.broker.topics import TopicError
from vdl.consensus.record_reads import RecordReadError, RecordSource
from vdl.log.error_codes import ErrorCode
from vdl.log.record_batch import InvalidBatch, UnsupportedCodec, iter_records, parse_batch_header
from vdl.log.ydb_mapping import YdbMessage, from_record
from vdl.net.grpc import ServerContext, ServerStream
from vdl.net.grpc.protobuf import decode
from vdl.net.ydb.auth import Authenticator, StreamAuth
from vdl.net.ydb.cluster_reads import ClusterReads, ReadChannel
from vdl.net.ydb.commits import CommitTracker
from vdl.net.ydb.max_lag import LagWitness
from vdl.net.ydb.offsets import ConsumerOffsets
from vdl.net.ydb.operation import (
    StatusIds,
    YdbError,
    as_ydb_error,
    count_error,
    leaf_error,
    wire,
)
from vdl.net.ydb.partition_reads import (
    BrokerRecords,
    LocalPartition,
    PartitionReader,
    RemotePartition,
    Replicas,
)
from vdl.net.ydb.protos import ydb_topic_pb2
from vdl.net.ydb.read_balancer import ReadCoordinator, Wanted
from vdl.net.ydb.topic_admin import TopicAdmin
from vdl.security.acl import Operation, ResourceType
from vdl.txn.partition_txns import AbortedTxn, aborted_batch

log = logging.getLogger(__name__)

FromClient = ydb_topic_pb2.StreamReadMessage.FromClient
FromServer = ydb_topic_pb2.StreamReadMessage.FromServer
# Keeps each response far below the 64 MB message limit and lets partitions take turns.
MAX_RESPONSE_BYTES = 4 << 20
_NO_CONSUMER_COMMIT = "can't commit when reading without a consumer"
# What one message costs in the credit beyond its payload (offsets, timestamps, framing).
_MESSAGE_OVERHEAD = 32
# Compressed bytes in one read above which its batches are decoded in a worker thread, off
# the event loop (zlib and cramjam release the GIL); below it the hop costs more than it saves.
_THREAD_DECODE_BYTES = 256 * 1024
# How long a client may take to answer a graceful stop_partition_session_request.
STOP_TIMEOUT_S = 10.0
# How long a partition's start waits for the replica read to reach the committed offset.
CATCH_UP_S = 2.0


@dataclass(slots=True)
class _TopicRead:
    path: str  # as the client spelled it: the SDK keys its sessions by it
    name: str
    topic_id: uuid.UUID
    partitions: int
    wanted: Wanted
    read_from_ms: int | None
    max_lag_ms: int = 0  # 0: no limit


@dataclass(slots=True)
class _Partition:
    id: int
    topic: _TopicRead
    partition: int
    stream: PartitionReader
    tracker: CommitTracker
    read_offset: int
    started: bool = False
    # Asked to stop (graceful): no more data; released on the client's answer or then.
    stop_deadline: float | None = None
    # A commit of it is being made durable: it is not given up before that ends.
    committing: bool = False
    # With max_lag: what spares the timestamp search before a read (vdl.net.ydb.max_lag).
    lag: LagWitness = field(default_factory=LagWitness)


def batches_of(messages: list[YdbMessage]) -> list[list[YdbMessage]]:
    """Consecutive messages sharing the batch-level fields (producer, session metadata,
    write time, codec) travel in one ReadResponse.Batch."""
    groups: list[list[YdbMessage]] = []
    key: tuple[Any, ...] | None = None
    for message in messages:
        this = (
            message.producer_id,
            tuple(sorted(message.write_session_meta.items())),
            message.written_at_ms,
            message.codec,
        )
        if groups and this == key:
            groups[-1].append(message)
        else:
            groups.append([message])
            key = this
    return groups


def fill_partition_data(partition_data: Any, messages: list[YdbMessage]) -> None:
    for group in batches_of(messages):
        first = group[0]
        batch = partition_data.batches.add(producer_id=first.producer_id, codec=first.codec)
        batch.write_session_meta.update(first.write_session_meta)
        batch.written_at.FromMilliseconds(first.written_at_ms)
        for message in group:
            data = batch.message_data.add(
                offset=message.offset,
                seq_no=message.seq_no,
                data=message.data,
                uncompressed_size=message.size,
                message_group_id=message.message_group_id,
            )
            data.created_at.FromMilliseconds(message.created_at_ms)
            for key, value in message.metadata_items:
                data.metadata_items.add(key=key, value=value)


class ClusterChannel(ReadChannel, Replicas, Protocol):
    def serve_records(self, source: RecordSource) -> None:
        """Answer other nodes' record reads from `source`."""
        ...


class ReadService:
    """What read sessions share: the coordinator, and who to tell about topic changes."""

    def __init__(
        self,
        broker: Broker,
        admin: TopicAdmin,
        auth: Authenticator,
        offsets: ConsumerOffsets,
        stopping: trio.Event,
    ) -> None:
        self.broker = broker
        self.admin = admin
        self.auth = auth
        self.offsets = offsets
        self.stopping = stopping
        self.coordinator: ReadCoordinator | ClusterReads = ReadCoordinator()
        self.sessions: set[ReadSession] = set()
        # On a cluster: the other nodes' replicas, for partitions this node holds none of.
        self.replicas: Replicas | None = None

    def balance_cluster_wide(self, channel: ClusterChannel) -> None:
        """On a cluster: before any session starts, balance across the nodes (`run`), and
        read the partitions this node holds no replica of from nodes that do."""
        self.coordinator = ClusterReads(channel)
        self.replicas = channel
        channel.serve_records(BrokerRecords(self.broker))

    async def run(self) -> None:
        """The cluster-wide balancer's messages, until the node stops (nothing to do on
        one node)."""
        if isinstance(self.coordinator, ClusterReads):
            await self.coordinator.run(self.stopping)

    def topic_changed(self, name: str) -> None:
        for session in self.sessions:
            session.wake()

    async def handle(self, stream: ServerStream, context: ServerContext) -> None:
        session = ReadSession(self, stream, context)
        self.sessions.add(session)
        try:
            await session.run()
        finally:
            self.sessions.discard(session)


class ReadSession:
    def __init__(self, service: ReadService, stream: ServerStream, context: ServerContext):
        self._service = service
        self._broker = service.broker
        self._coordinator = service.coordinator
        self._offsets = service.offsets
        self._stream = stream
        self._context = context
        self.id = uuid.uuid4().hex
        self._consumer = ""
        # Without a consumer: the partitions named are read as they are, nothing committed.
        self._consumerless = False
        self._topics: list[_TopicRead] = []
        self._joined: list[str] = []
        self._partitions: dict[int, _Partition] = {}
        self._ids = itertools.count(1)
        self._credit = 0
        self._event = trio.Event()
        self._send_lock = trio.Lock()
        self._turn = 0
        self._who: StreamAuth
        self._nursery: trio.Nursery | None = None  # the remote partitions' read-ahead

    def wake(self) -> None:
        self._event.set()

    async def run(self) -> None:
        try:
            self._who = StreamAuth(self._service.auth, self._context)
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
            reply = FromServer(status=wire(error.status))
            reply.issues.add(message=error.message, severity=1)
            await self._stream.send(reply.SerializeToString())
        finally:
            for name in self._joined:
                self._coordinator.leave(self._consumer, name, self.id)

    async def _send(self, reply: Any) -> None:
        async with self._send_lock:
            await self._stream.send(reply.SerializeToString())

    async def _init(self) -> None:
        data = await self._stream.receive()
        if data is None:
            raise YdbError(StatusIds.BAD_REQUEST, "stream closed before init_request")
        first = decode(FromClient, data)
        if first.WhichOneof("client_message") != "init_request":
            raise YdbError(StatusIds.BAD_REQUEST, "the first message must be init_request")
        init = first.init_request
        if not init.topics_read_settings:
            raise YdbError(StatusIds.BAD_REQUEST, "no topics to read")
        self._consumer = init.consumer
        self._consumerless = not init.consumer
        auth = self._service.auth
        if not self._consumerless:
            auth.require(self._who.identity, Operation.READ, ResourceType.GROUP, init.consumer)
        for settings in init.topics_read_settings:
            name = self._service.admin.name_of(settings.path)
            auth.require(self._who.identity, Operation.READ, ResourceType.TOPIC, name)
            topic = self._service.admin.topic(settings.path)
            if not self._consumerless and topic.consumer(init.consumer) is None:
                raise YdbError(
                    StatusIds.SCHEME_ERROR,
                    f"consumer {init.consumer!r} is not registered with topic {settings.path!r}",
                )
            wanted: Wanted = None
            if settings.partition_ids:
                wanted = frozenset(int(p) for p in settings.partition_ids)
                bad = sorted(p for p in wanted if not 0 <= p < topic.partitions)
                if bad:
                    raise YdbError(
                        StatusIds.BAD_REQUEST, f"no partitions {bad} in {settings.path!r}"
                    )
            elif self._consumerless:
                if not init.auto_partitioning_support:
                    raise YdbError(
                        StatusIds.BAD_REQUEST,
                        "explicitly specify the partitions when reading without a consumer",
                    )
                wanted = frozenset(range(topic.partitions))
            read_from = None
            if settings.HasField("read_from"):
                read_from = settings.read_from.ToMilliseconds()
            max_lag_ms = 0
            if settings.HasField("max_lag"):
                max_lag_ms = max(0, settings.max_lag.ToMilliseconds())
            if any(t.name == topic.name for t in self._topics):
                raise YdbError(StatusIds.BAD_REQUEST, f"topic {settings.path!r} listed twice")
            self._topics.append(
                _TopicRead(
                    settings.path,
                    topic.name,
                    topic.topic_id,
                    topic.partitions,
                    wanted,
                    read_from,
                    max_lag_ms,
                )
            )
        reply = FromServer(status=wire(StatusIds.SUCCESS))
        reply.init_response.session_id = self.id
        await self._send(reply)
        if self._consumerless:
            return  # nothing to balance: every session reads what it named
        for topic_read in self._topics:
            self._joined.append(topic_read.name)
            self._coordinator.join(
                self._consumer,
                topic_read.name,
                topic_read.partitions,
                self.id,
                topic_read.wanted,
                self.wake,
            )

    async def _serve(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._send_loop)
            nursery.start_soon(self._fail_on_stop)
            nursery.start_soon(self._who.watch_expiry)
            while True:
                data = await self._stream.receive()
                if data is None:
                    # The SDK cancels rather than half-closes; either way nobody listens.
                    nursery.cancel_scope.cancel()
                    return
                await self._handle(decode(FromClient, data))

    async def _fail_on_stop(self) -> None:
        await self._service.stopping.wait()
        raise YdbError(StatusIds.UNAVAILABLE, "the node is shutting down")

    # -- from the client ------------------------------------------------------------------

    async def _handle(self, message: Any) -> None:
        kind = message.WhichOneof("client_message")
        if kind == "read_request":
            self._credit += max(0, int(message.read_request.bytes_size))
            self.wake()
        elif kind == "start_partition_session_response":
            response = message.start_partition_session_response
            if self._consumerless and response.HasField("commit_offset"):
                raise YdbError(StatusIds.BAD_REQUEST, _NO_CONSUMER_COMMIT)
            part = self._partitions.get(response.partition_session_id)
            if part is not None and not part.started:
                part.started = True
                if response.HasField("read_offset"):
                    stream = part.stream
                    part.read_offset = min(
                        max(int(response.read_offset), stream.log_start_offset),
                        stream.high_watermark,
                    )
                self.wake()
        elif kind == "commit_offset_request":
            await self._commit(message.commit_offset_request)
        elif kind == "update_token_request":
            self._who.update(message.update_token_request.token)
            reply = FromServer(status=wire(StatusIds.SUCCESS))
            reply.update_token_response.SetInParent()
            await self._send(reply)
        elif kind == "partition_session_status_request":
            await self._status(message.partition_session_status_request.partition_session_id)
        elif kind == "stop_partition_session_response":
            # Every commit the client made on it came before (and is durable): let it go.
            response = message.stop_partition_session_response
            part = self._partitions.get(response.partition_session_id)
            if part is not None and part.stop_deadline is not None:
                self._let_go(part)
        else:
            raise YdbError(StatusIds.BAD_REQUEST, f"unexpected {kind} in a read session")

    async def _commit(self, request: Any) -> None:
        if self._consumerless:
            raise YdbError(StatusIds.BAD_REQUEST, _NO_CONSUMER_COMMIT)
        reply = FromServer(status=wire(StatusIds.SUCCESS))
        answered = reply.commit_offset_response
        for commit in request.commit_offsets:
            part = self._partitions.get(commit.partition_session_id)
            if part is None:
                # Stopped or unknown: the SDK refuses such commits itself; nothing to ack.
                continue
            before = part.tracker.committed
            hw = part.stream.high_watermark
            for offsets in commit.offsets:
                part.tracker.add(int(offsets.start), min(int(offsets.end), hw))
            if part.tracker.committed > before:
                part.committing = True
                try:
                    await self._offsets.commit(
                        self._consumer, part.topic.name, part.partition, part.tracker.committed
                    )
                finally:
                    part.committing = False
                    if part.stop_deadline is not None:
                        self.wake()  # a stop that timed out meanwhile may go ahead now
            answered.partitions_committed_offsets.add(
                partition_session_id=part.id, committed_offset=part.tracker.committed
            )
        if answered.partitions_committed_offsets:
            await self._send(reply)

    async def _status(self, partition_session_id: int) -> None:
        part = self._partitions.get(partition_session_id)
        if part is None:
            return
        reply = FromServer(status=wire(StatusIds.SUCCESS))
        status = reply.partition_session_status_response
        status.partition_session_id = part.id
        status.partition_offsets.start = part.stream.log_start_offset
        status.partition_offsets.end = part.stream.high_watermark
        status.committed_offset = part.tracker.committed
        status.read_offset = part.read_offset
        await self._send(reply)

    # -- to the client --------------------------------------------------------------------

    async def _stop_now(self, part: _Partition) -> None:
        """Stop a partition session at once (not graceful): the client is told before the
        partition is let go, so no commit of it reaches this session after another reader
        may have started it."""
        reply = FromServer(status=wire(StatusIds.SUCCESS))
        stop = reply.stop_partition_session_request
        stop.partition_session_id = part.id
        stop.committed_offset = part.tracker.committed
        await self._send(reply)
        if self._partitions.get(part.id) is part:
            self._let_go(part)

    def _let_go(self, part: _Partition) -> None:
        del self._partitions[part.id]
        if isinstance(part.stream, RemotePartition):
            part.stream.close()
        self._coordinator.release(self._consumer, part.topic.name, self.id, part.partition)
        self.wake()

    async def _send_loop(self) -> None:
        while True:
            event = trio.Event()
            self._event = event
            watched = [p.stream for p in self._partitions.values() if p.started]
            for stream in watched:
                stream.watch(event)
            try:
                await self._reconcile()
                if not await self._send_data():
                    deadlines = [
                        p.stop_deadline
                        for p in self._partitions.values()
                        if p.stop_deadline is not None
                    ]
                    with trio.move_on_at(min(deadlines, default=math.inf)):
                        await event.wait()
            finally:
                for stream in watched:
                    stream.unwatch(event)

    async def _reconcile(self) -> None:
        """Give up partitions no longer ours, start the ones newly ours and free."""
        for topic_read in self._topics:
            current = self._broker.catalog.get(topic_read.name)
            if current is None or current.topic_id != topic_read.topic_id:
                raise YdbError(StatusIds.SCHEME_ERROR, f"topic {topic_read.path!r} was dropped")
            if self._consumerless:
                reading = {p.partition for p in self._partitions.values() if p.topic is topic_read}
                for partition in sorted((topic_read.wanted or frozenset()) - reading):
                    await self._start(topic_read, partition)
                continue
            if current.consumer(self._consumer) is None:
                raise YdbError(
                    StatusIds.SCHEME_ERROR,
                    f"consumer {self._consumer!r} was removed from {topic_read.path!r}",
                )
            # Partitions added since (AlterTopic, Kafka's CreatePartitions) are read too.
            self._coordinator.grown(self._consumer, topic_read.name, current.partitions)
            targets = self._coordinator.targets(self._consumer, topic_read.name, self.id)
            held = {p.partition: p for p in self._partitions.values() if p.topic is topic_read}
            now = trio.current_time()
            for partition, part in sorted(held.items()):
                if part.stop_deadline is not None:
                    if now >= part.stop_deadline and not part.committing:
                        log.info(
                            "a YDB reader did not answer stop_partition_session_request for "
                            "%s partition %d in time: it is given up",
                            topic_read.path,
                            partition,
                        )
                        # Not graceful now (ydb_topic.proto): the client drops the session
                        # and its commits there; only then does another reader start it.
                        await self._stop_now(part)
                    continue
                if partition in targets:
                    continue
                if not part.started:
                    # The client never started it: nothing read, nothing to wait for.
                    await self._stop_now(part)
                    continue
                part.stop_deadline = now + STOP_TIMEOUT_S
                reply = FromServer(status=wire(StatusIds.SUCCESS))
                stop = reply.stop_partition_session_request
                stop.partition_session_id = part.id
                stop.graceful = True
                stop.committed_offset = part.tracker.committed
                await self._send(reply)
            for partition in sorted(targets - held.keys()):
                if self._coordinator.try_acquire(
                    self._consumer, topic_read.name, self.id, partition
                ) and not await self._start(topic_read, partition):
                    self._coordinator.release(self._consumer, topic_read.name, self.id, partition)

    async def _reader(self, topic: str, partition: int) -> PartitionReader | None:
        """This node's replica of the partition, else (on a cluster) another node's; None
        while no replica can be reached (logged)."""
        try:
            return LocalPartition(self._broker.stream(topic, partition))
        except TopicError:
            if self._service.replicas is None or self._nursery is None:
                raise
        try:
            remote = await RemotePartition.open(self._service.replicas, topic, partition)
        except RecordReadError as exc:
            log.warning("cannot read %s partition %d from another node: %s", topic, partition, exc)
            return None
        self._nursery.start_soon(remote.run)
        return remote

    def _consumer_read_from(self, topic_read: _TopicRead) -> int | None:
        if self._consumerless:
            return None
        topic = self._broker.catalog.get(topic_read.name)
        consumer = None if topic is None else topic.consumer(self._consumer)
        return consumer.read_from_ms if consumer is not None and consumer.read_from_ms else None

    async def _start(self, topic_read: _TopicRead, partition: int) -> bool:
        """Start reading the partition (False: not now, no replica answered)."""
        stream = await self._reader(topic_read.name, partition)
        if stream is None:
            return False
        stored = None
        if not self._consumerless:
            stored = self._offsets.committed(self._consumer, topic_read.name, partition)
        if stored is not None and stored > stream.high_watermark:
            # The replica read may not have learnt yet of records the previous reader read
            # (a follower hears of a commit after its leader): its end would send this
            # reader back over them. Give it a moment to catch up; an offset past the end
            # (committed by a Kafka client, say) then counts as the end, as before.
            with trio.move_on_after(CATCH_UP_S):
                await stream.reach(stored)
        start, end = stream.log_start_offset, stream.high_watermark
        committed = min(max(stored or 0, start), end)
        read_offset = committed
        for read_from_ms in (topic_read.read_from_ms, self._consumer_read_from(topic_read)):
            # The session's and the consumer's `read_from` (ydb_topic.proto: messages
            # written before it are skipped): the later of the two wins.
            if read_from_ms is not None:
                from_time = await stream.offset_for_timestamp(read_from_ms)
                read_offset = max(read_offset, from_time if from_time is not None else end)
        part = _Partition(
            next(self._ids), topic_read, partition, stream, CommitTracker(committed), read_offset
        )
        self._partitions[part.id] = part
        reply = FromServer(status=wire(StatusIds.SUCCESS))
        request = reply.start_partition_session_request
        request.partition_session.partition_session_id = part.id
        request.partition_session.path = topic_read.path
        request.partition_session.partition_id = partition
        request.committed_offset = committed
        request.partition_offsets.start = start
        request.partition_offsets.end = end
        await self._send(reply)
        return True

    async def _send_data(self) -> bool:
        """Send one ReadResponse if there is credit and data; True if one went out."""
        if self._credit <= 0:
            return False
        started = [p for p in self._partitions.values() if p.started and p.stop_deadline is None]
        if not started:
            return False
        self._turn = (self._turn + 1) % len(started)
        order = started[self._turn :] + started[: self._turn]
        budget = min(self._credit, MAX_RESPONSE_BYTES)
        reply = FromServer(status=wire(StatusIds.SUCCESS))
        response = reply.read_response
        total = 0
        for part in order:
            if total >= budget:
                break
            messages, size, next_offset = await self._read(part, budget - total)
            part.read_offset = max(part.read_offset, next_offset)
            if messages:
                fill_partition_data(
                    response.partition_data.add(partition_session_id=part.id), messages
                )
                total += size
        if total == 0:
            return False
        response.bytes_size = total
        self._credit -= total
        await self._send(reply)
        return True

    async def _read(self, part: _Partition, budget: int) -> tuple[list[YdbMessage], int, int]:
        """Messages from the partition's read offset on, their cost, and where the next read
        starts: past batches that hold no message for a reader (control batches, and
        batches a compacted topic's cleaning emptied) too, which are read past until a
        message comes or the high watermark is reached."""
        while True:
            messages, size, next_offset = await self._read_once(part, budget)
            if messages or next_offset <= part.read_offset:
                return messages, size, next_offset
            part.read_offset = next_offset

    async def _read_once(self, part: _Partition, budget: int) -> tuple[list[YdbMessage], int, int]:
        stream = part.stream
        if part.read_offset < stream.log_start_offset:
            part.read_offset = stream.log_start_offset  # retention removed the rest
        max_lag_ms = part.topic.max_lag_ms
        if max_lag_ms:
            oldest = time.time_ns() // 1_000_000 - max_lag_ms
            if not part.lag.covers(oldest, part.read_offset, stream.log_start_offset):
                recent = await stream.offset_for_timestamp(oldest)
                part.read_offset = max(
                    part.read_offset, recent if recent is not None else stream.high_watermark
                )
        # Committed transactions only (KIP-98's read_committed): up to the last stable
        # offset, and never a record of an aborted transaction.
        batches, aborted = stream.read(part.read_offset, budget)
        if not batches:
            return [], 0, part.read_offset
        # The store is read here, on the event loop (it is single-threaded); only decoding
        # may move to a worker thread, on copies of the batches it reads.
        compressed = sum(len(b) for b in batches if parse_batch_header(b).compression)
        read_offset = part.read_offset
        try:
            if compressed > _THREAD_DECODE_BYTES:
                copies = [bytes(b) for b in batches]
                decoded = await trio.to_thread.run_sync(
                    decode_messages, copies, read_offset, budget, aborted
                )
            else:
                decoded = decode_messages(batches, read_offset, budget, aborted)
        except UnsupportedCodec as exc:
            raise YdbError(
                StatusIds.UNSUPPORTED,
                f"{part.topic.path} partition {part.partition} holds records this server "
                f"cannot decode for YDB readers: {exc}",
            ) from None
        except InvalidBatch as exc:
            if exc.error_code == ErrorCode.MESSAGE_TOO_LARGE:
                raise YdbError(
                    StatusIds.PRECONDITION_FAILED,
                    f"{part.topic.path} partition {part.partition}: a stored batch at or "
                    f"after offset {read_offset} cannot be read: {exc}",
                ) from None
            raise YdbError(StatusIds.INTERNAL_ERROR, f"corrupt stored batch: {exc}") from None
        if max_lag_ms:
            part.lag.passed(batches, decoded[2])
        return decoded


def decode_messages(
    batches: Sequence[Buffer],
    read_offset: int,
    budget: int,
    aborted: Sequence[AbortedTxn] = (),
) -> tuple[list[YdbMessage], int, int]:
    """The messages of ``batches`` from ``read_offset`` on, as many as ``budget`` bytes
    allow (at least one), what they cost in credit, and the offset to read from next (past
    every batch read to its end, control and emptied ones too, and the batches of the
    ``aborted`` transactions, which are never delivered). Pure: it may run in a thread.

    A batch that cannot be decoded ends the read with the messages before it; only when
    it comes first does its error reach the reader."""
    messages: list[YdbMessage] = []
    size = 0
    next_offset = read_offset
    for batch in batches:
        header = parse_batch_header(batch)
        if header.is_control or aborted_batch(header, aborted):
            next_offset = max(next_offset, header.next_offset)
            continue
        try:
            records = list(iter_records(batch))
        except (InvalidBatch, UnsupportedCodec):
            if messages:
                return messages, size, next_offset
            raise
        for record in records:
            if record.offset < read_offset:
                continue
            message = from_record(record)
            cost = len(message.data) + _MESSAGE_OVERHEAD
            if messages and size + cost > budget:
                return messages, size, next_offset
            messages.append(message)
            size += cost
            next_offset = record.offset + 1
        next_offset = max(next_offset, header.next_offset)
    return messages, size, next_offset
