"""TCP between Raft nodes: one connection per peer pair carries every group (multi-raft).

`RaftTransport` is the node's `Outbox` (frames go to the peer's link, never blocking a
driver) and runs the raft listener; inbound frames go to the `GroupRouter`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import trio

from vdl.consensus.frames import (
    HELLO,
    FrameError,
    decode_hello,
    encode_forward,
    encode_frame,
)
from vdl.consensus.messages import Message
from vdl.consensus.peer_link import PeerLink
from vdl.consensus.router import GroupRouter

log = logging.getLogger(__name__)

_HELLO_TIMEOUT_S = 5.0


class RaftTransport:
    def __init__(
        self,
        node_id: int,
        listen: tuple[str, int],
        peers: Mapping[int, tuple[str, int]],
        router: GroupRouter,
        *,
        queue_limit: int = 4096,
    ) -> None:
        self.node_id = node_id
        self._listen = listen
        self._router = router
        self.links = {
            peer: PeerLink(node_id, peer, address, router.deliver, queue_limit=queue_limit)
            for peer, address in peers.items()
            if peer != node_id
        }
        self.port: int | None = None

    def send(self, group_id: int, message: Message) -> None:
        link = self.links.get(message.dst)
        if link is None:
            return
        if not link.connected:
            link.dropped += 1  # without encoding: a dead peer costs nothing per message
            return
        link.send(encode_frame(group_id, message))

    def forward(self, node_id: int, command: bytes) -> None:
        """Ask `node_id` (the metadata leader) to propose `command`; best effort."""
        link = self.links.get(node_id)
        if link is not None:
            link.send(encode_forward(command))

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        host, port = self._listen
        listeners = await trio.open_tcp_listeners(port, host=host)
        self.port = int(listeners[0].socket.getsockname()[1])
        async with trio.open_nursery() as nursery:
            for link in self.links.values():
                nursery.start_soon(link.run)
            for listener in listeners:
                nursery.start_soon(trio.serve_listeners, self._accept, [listener])
            log.info("raft listener on %s:%d", host, self.port)
            task_status.started(self.port)

    async def _accept(self, stream: trio.SocketStream) -> None:
        try:
            with trio.fail_after(_HELLO_TIMEOUT_S):
                hello = await _receive_exactly(stream, HELLO.size)
            peer = decode_hello(hello)
        except (trio.TooSlowError, FrameError, trio.BrokenResourceError, OSError, EOFError):
            await stream.aclose()
            return
        link = self.links.get(peer)
        if link is None or link.dials:
            log.warning("refusing raft connection from unknown or dialed node %d", peer)
            await stream.aclose()
            return
        await link.serve_connection(stream)


async def _receive_exactly(stream: trio.SocketStream, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.receive_some(n - len(buf))
        if not chunk:
            raise EOFError("connection closed during hello")
        buf += chunk
    return bytes(buf)
