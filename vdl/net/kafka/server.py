"""The Kafka listener: accepts connections into one nursery and drains them on shutdown."""

from __future__ import annotations

import logging

import trio

from vdl.broker.broker import Broker
from vdl.config import HostPort
from vdl.net.kafka.apis.context import NodeInfo
from vdl.net.kafka.connection import KafkaConnection

log = logging.getLogger(__name__)


class KafkaServer:
    def __init__(
        self,
        broker: Broker,
        node_id: int,
        cluster_id: str,
        listen: HostPort,
        advertised: HostPort | None,
        max_request_bytes: int,
    ) -> None:
        self._broker = broker
        self._node_id = node_id
        self._cluster_id = cluster_id
        self._listen = listen
        self._advertised = advertised
        self._node: NodeInfo
        self._max_request_bytes = max_request_bytes
        self._connections: set[KafkaConnection] = set()
        self._accepting = trio.CancelScope()
        self._stopping = False
        self.port: int | None = None

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until shutdown() has stopped accepting and every connection ended."""
        listeners = await trio.open_tcp_listeners(self._listen.port, host=self._listen.host)
        self.port = listeners[0].socket.getsockname()[1]
        # With port 0 (tests) clients must be told the port actually bound.
        advertised = self._advertised or HostPort(self._listen.host, self.port)
        self._node = NodeInfo(self._node_id, advertised.host, advertised.port, self._cluster_id)
        log.info("Kafka listener on %s:%d", self._listen.host, self.port)
        async with trio.open_nursery() as connections:
            with self._accepting:
                task_status.started(self.port)
                async with trio.open_nursery() as acceptors:
                    for listener in listeners:
                        acceptors.start_soon(self._accept_loop, listener, connections)
            for listener in listeners:
                await listener.aclose()

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                # Out of file descriptors and the like: keep serving those connected.
                log.warning("accept failed: %s", exc)
                await trio.sleep(0.1)
                continue
            nursery.start_soon(self._serve_connection, stream)

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "unknown"
        connection = KafkaConnection(
            stream, peer, self._broker, self._node, self._max_request_bytes
        )
        if self._stopping:
            await stream.aclose()
            return
        self._connections.add(connection)
        try:
            await connection.serve()
        finally:
            self._connections.discard(connection)

    def shutdown(self) -> None:
        """Stop accepting and reading; serve() returns once in-flight requests are answered."""
        self._stopping = True
        self._accepting.cancel()
        for connection in self._connections:
            connection.stop_reading()
