"""The link to one peer node: a bounded send queue and the current connection.

Sending never waits: a full queue (a slow or dead peer) drops the message, and Raft's
retries (heartbeats, probes, re-sent appends) make up for it. The node with the lower id
dials and redials with backoff; the other side takes whatever its listener last accepted
from that peer, so a pair shares one connection in both directions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from vdl.consensus.frames import FrameError, FrameReader, Inbound, encode_hello

log = logging.getLogger(__name__)

Deliver = Callable[[int, Inbound], None]
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
    ) -> None:
        self.node_id = node_id
        self.peer_id = peer_id
        self.address = address
        self._deliver = deliver
        self._send, self._queue = trio.open_memory_channel[bytes](queue_limit)
        self._stream: trio.abc.Stream | None = None
        self._backoff = backoff_s
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
        if self._stream is None:
            # Nobody to talk to: queueing would only deliver stale messages later.
            self.dropped += 1
            return
        try:
            self._send.send_nowait(frame)
        except trio.WouldBlock:
            self.dropped += 1

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer)
            if self.dials:
                nursery.start_soon(self._dial_loop)

    async def _writer(self) -> None:
        while True:
            frame = await self._queue.receive()
            chunks = [frame]
            size = len(frame)
            while size < _BATCH_BYTES:
                try:
                    frame = self._queue.receive_nowait()
                except trio.WouldBlock:
                    break
                chunks.append(frame)
                size += len(frame)
            stream = self._stream
            if stream is None:
                self.dropped += len(chunks)
                continue
            try:
                await stream.send_all(b"".join(chunks))
            except _NET_ERRORS:
                self.dropped += len(chunks)
                await self._detach(stream)

    async def _dial_loop(self) -> None:
        delay = self._backoff[0]
        host, port = self.address
        while True:
            try:
                stream = await trio.open_tcp_stream(host, port)
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
                    self._deliver(group_id, message)
        except FrameError as exc:
            log.warning("dropping connection with node %d: %s", self.peer_id, exc)
        except _NET_ERRORS:
            pass
        finally:
            await self._detach(stream)

    async def _detach(self, stream: trio.abc.Stream) -> None:
        if self._stream is stream:
            self._stream = None
        with trio.CancelScope(shield=True):
            await stream.aclose()

    async def wait_connected(self) -> None:
        while self._stream is None:
            await self._attached.wait()
