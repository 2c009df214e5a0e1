"""One Kafka client connection: read frames, run requests, write responses in request order.

Each request's order-sensitive part runs inline as it is read (so pipelined produce
requests append in order); the waiting parts run concurrently, and a writer task sends
their responses strictly in request order, as every Kafka client requires.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio

from vdl.broker.broker import Broker
from vdl.net.kafka.apis.context import NodeInfo, Pending, RequestContext, Response
from vdl.net.kafka.apis.dispatch import UnsupportedRequest, dispatch
from vdl.net.kafka.framing import FrameDecoder, FrameTooLarge
from vdl.net.kafka.header import MalformedRequest, parse_request_header

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 64  # requests read ahead of their responses, per connection
READ_SIZE = 256 * 1024


@dataclass(slots=True)
class _Slot:
    done: trio.Event = field(default_factory=trio.Event)
    response: Response = None


class KafkaConnection:
    def __init__(
        self,
        stream: trio.abc.Stream,
        peer: str,
        broker: Broker,
        node: NodeInfo,
        max_request_bytes: int,
    ) -> None:
        self._stream = stream
        self._peer = peer
        self._broker = broker
        self._node = node
        self._decoder = FrameDecoder(max_request_bytes)
        self._reading = trio.CancelScope()
        self._nursery: trio.Nursery

    def stop_reading(self) -> None:
        """Accept no more requests; those already read are still answered."""
        self._reading.cancel()

    async def serve(self) -> None:
        send, receive = trio.open_memory_channel[_Slot](MAX_IN_FLIGHT)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_responses, receive)
                async with send:
                    with self._reading:
                        await self._read_requests(nursery, send)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            log.debug("connection from %s broken", self._peer)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self._stream.aclose()

    async def _read_requests(
        self, nursery: trio.Nursery, send: trio.MemorySendChannel[_Slot]
    ) -> None:
        # A large frame is received straight into its own buffer (see framing.py): no
        # join of chunks, and the batches in it can be stamped in place and stored as is.
        sock = self._stream.socket if isinstance(self._stream, trio.SocketStream) else None
        decoder = self._decoder
        while True:
            direct = decoder.direct_buffer() if sock is not None else None
            if sock is not None and direct is not None:
                n = await sock.recv_into(direct)
                if not n:
                    return
                frames = decoder.direct_received(n)
            else:
                data = await self._stream.receive_some(READ_SIZE)
                if not data:
                    return
                try:
                    frames = decoder.feed(data)
                except FrameTooLarge as exc:
                    log.warning("closing connection from %s: %s", self._peer, exc)
                    return
            for frame in frames:
                pending = self._admit(frame)
                if pending is None:
                    return
                slot = _Slot()
                await send.send(slot)
                nursery.start_soon(self._run, slot, pending)

    def _admit(self, frame: memoryview) -> Pending | None:
        """Run the request's inline part; None closes the connection (after earlier replies)."""
        try:
            header = parse_request_header(frame)
        except MalformedRequest as exc:
            log.warning("closing connection from %s: malformed request header: %s", self._peer, exc)
            return None
        ctx = RequestContext(header, frame, self._broker, self._node)
        try:
            return dispatch(ctx)
        except UnsupportedRequest as exc:
            log.warning("closing connection from %s: %s", self._peer, exc)
        except MalformedRequest as exc:
            log.warning(
                "closing connection from %s: malformed request (api %d v%d): %s",
                self._peer, header.api_key, header.api_version, exc,
            )
        except Exception:
            log.exception(
                "closing connection from %s: request api %d v%d failed",
                self._peer, header.api_key, header.api_version,
            )
        return None

    async def _run(self, slot: _Slot, pending: Pending) -> None:
        try:
            slot.response = await pending()
        except Exception:
            # A bug in one request must not take the node down: drop only this connection.
            log.exception("request from %s failed; closing its connection", self._peer)
            self._nursery.cancel_scope.cancel()
        finally:
            slot.done.set()

    async def _write_responses(self, receive: trio.MemoryReceiveChannel[_Slot]) -> None:
        async with receive:
            async for slot in receive:
                await slot.done.wait()
                response = slot.response
                if response is None:
                    continue
                data = response if isinstance(response, bytes | bytearray) else b"".join(response)
                await self._stream.send_all(data)

