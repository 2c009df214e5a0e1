"""The link to one peer node: a bounded send queue and the current connection.

Sending never waits: a full queue (a slow or dead peer) drops the message, and Raft's
retries (heartbeats, probes, re-sent appends) make up for it.

A frame is written to the socket from the sender's own call when nothing is queued ahead of
it and the kernel takes it whole, which is the common case on an idle or lightly loaded
link. Going through the queue costs a wake-up of the writer task, which on a busy event loop
(or a loaded machine) waits behind every other runnable task: the measured price was
0.3-0.7 ms per hop at p50 and several ms at p90, paid twice per commit (the leader's append,
the follower's ack). Only when the kernel's buffer is full, or frames are already queued, do
frames wait for the writer, which then batches them into one send. The node with the lower id
dials and redials with backoff; the other side takes whatever its listener last accepted
from that peer, so a pair shares one connection in both directions.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import trio

from vdl.consensus.frames import (
    BEAT_GROUP,
    FrameError,
    FrameReader,
    Inbound,
    decode_beat,
    encode_hello,
)
from vdl.consensus.peer_tls import PeerTls, open_raft_stream

log = logging.getLogger(__name__)

Deliver = Callable[[int, Inbound], None]
OnBeat = Callable[[int, int], None]  # (peer, its incarnation)
_Queued = tuple[trio.abc.Stream | None, bytes | memoryview]
_BATCH_BYTES = 1024 * 1024
_NET_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class PeerLink:
    def __init__(
        self,
        node_id: int,
        peer_id: int,
        address: tuple[str, int],
        deliver: Deliver,
        *,
        queue_limit: int = 4096,
        backoff_s: tuple[float, float] = (0.05, 2.0),
        tls: PeerTls | None = None,
        on_beat: OnBeat | None = None,
    ) -> None:
        self.node_id = node_id
        self.peer_id = peer_id
        self.address = address
        self._deliver = deliver
        self._on_beat = on_beat
        # A frame, or the tail of one partly written directly, which only makes sense on
        # the connection its head went to (then that connection is named).
        self._send, self._queue = trio.open_memory_channel[_Queued](queue_limit)
        # Frames handed to the queue and not yet fully written by the writer: while any
        # are, a frame written directly would overtake them.
        self._backlog = 0
        self._stream: trio.abc.Stream | None = None
        self._backoff = backoff_s
        self._tls = tls
        self._attached = trio.Event()
        self.dropped = 0
        self.connects = 0

    @property
    def dials(self) -> bool:
        return self.node_id < self.peer_id

    @property
    def connected(self) -> bool:
        return self._stream is not None

    def send(self, frame: bytes) -> None:
        stream = self._stream
        if stream is None:
            # Nobody to talk to: queueing would only deliver stale messages later.
            self.dropped += 1
            return
        item: _Queued = (None, frame)
        if self._backlog == 0 and isinstance(stream, trio.SocketStream):
            written = _write_now(stream, frame)
            if written == len(frame):
                return
            # The kernel took part of it (or none, or the write failed): the writer sends
            # the rest in order, and a broken connection shows up there and is detached.
            if written:
                item = (stream, memoryview(frame)[written:])
        try:
            self._send.send_nowait(item)
        except trio.WouldBlock:
            self.dropped += 1
            return
        self._backlog += 1

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer)
            if self.dials:
                nursery.start_soon(self._dial_loop)

    async def _writer(self) -> None:
        while True:
            items = [await self._queue.receive()]
            size = len(items[0][1])
            while size < _BATCH_BYTES:
                try:
                    item = self._queue.receive_nowait()
                except trio.WouldBlock:
                    break
                items.append(item)
                size += len(item[1])
            try:
                stream = self._stream
                chunks = [data for bound, data in items if bound is None or bound is stream]
                self.dropped += len(items) - len(chunks)
                if not chunks:
                    continue
                if stream is None:
                    self.dropped += len(chunks)
                    continue
                try:
                    await stream.send_all(chunks[0] if len(chunks) == 1 else b"".join(chunks))
                except _NET_ERRORS:
                    self.dropped += len(chunks)
                    await self._detach(stream)
            finally:
                self._backlog -= len(items)

    async def _dial_loop(self) -> None:
        delay = self._backoff[0]
        host, port = self.address
        while True:
            try:
                stream = await open_raft_stream((host, port), self._tls, self.peer_id)
            except OSError:
                await trio.sleep(delay)
                delay = min(delay * 2, self._backoff[1])
                continue
            delay = self._backoff[0]
            try:
                await stream.send_all(encode_hello(self.node_id))
            except _NET_ERRORS:
                await stream.aclose()
                continue
            await self.serve_connection(stream)
            await trio.sleep(self._backoff[0])

    async def serve_connection(self, stream: trio.abc.Stream) -> None:
        """Make `stream` the link's connection and read frames from it until it breaks."""
        old = self._stream
        self._stream = stream
        self.connects += 1
        self._attached.set()
        self._attached = trio.Event()
        if old is not None:
            await old.aclose()
        reader = FrameReader()
        try:
            while True:
                data = await stream.receive_some(256 * 1024)
                if not data:
                    break
                for group_id, message in reader.feed(data):
                    if group_id == BEAT_GROUP and isinstance(message, bytes):
                        self._beat(message)
                        continue
                    if not isinstance(message, bytes) and (
                        message.src != self.peer_id or message.dst != self.node_id
                    ):
                        # A link carries its two nodes' messages only: anything else is
                        # not from the peer this connection was admitted as.
                        raise FrameError(f"a message from node {message.src} to node {message.dst}")
                    self._deliver(group_id, message)
        except FrameError as exc:
            log.warning("dropping connection with node %d: %s", self.peer_id, exc)
        except _NET_ERRORS:
            pass
        except Exception:
            # Whatever a peer's bytes make go wrong costs that connection, never the node
            # (as on the Kafka listener); a real peer's link redials.
            log.exception("dropping connection with node %d after an error", self.peer_id)
        finally:
            await self._detach(stream)

    def _beat(self, body: bytes) -> None:
        incarnation, items = decode_beat(body, self.peer_id, self.node_id)
        if self._on_beat is not None:
            self._on_beat(self.peer_id, incarnation)
        deliver = self._deliver
        for group_id, message in items:
            deliver(group_id, message)

    async def _detach(self, stream: trio.abc.Stream) -> None:
        if self._stream is stream:
            self._stream = None
        with trio.CancelScope(shield=True):
            await stream.aclose()

    async def wait_connected(self) -> None:
        while self._stream is None:
            await self._attached.wait()


def _write_now(stream: trio.SocketStream, frame: bytes) -> int:
    """Write what the socket takes without blocking; how many bytes that was (0 on any
    error: the queued path then meets the error in `send_all` and handles it)."""
    fd = stream.socket.fileno()
    if fd < 0:
        return 0
    try:
        # Trio's sockets are non-blocking, so this never waits. Trio is not writing to
        # this socket now: only the writer task does, and only with a backlog.
        return os.write(fd, frame)
    except OSError:
        return 0
