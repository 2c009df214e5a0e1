"""The Kafka listener: accepts connections into one nursery and drains them on shutdown."""

from __future__ import annotations

import logging
import ssl

import trio

from vdl.broker.broker import Broker
from vdl.config import HostPort
from vdl.net.kafka.apis.context import FETCH_MAX_BYTES, NodeInfo
from vdl.net.kafka.connection import KafkaConnection
from vdl.net.kafka.keepalive import DEFAULT_KEEPALIVE, KeepaliveTiming, enable_keepalive
from vdl.net.kafka.quotas import KafkaQuotas
from vdl.net.kafka.request_metrics import CONNECTIONS_ACCEPTED, CONNECTIONS_REFUSED
from vdl.net.limits import ConnectionLimits, peer_host, refuse
from vdl.net.listen import open_listeners
from vdl.security.service import NO_SECURITY, Security
from vdl.security.tls import common_name

log = logging.getLogger(__name__)

_HANDSHAKE_TIMEOUT_S = 10.0


class KafkaServer:
    def __init__(
        self,
        broker: Broker,
        node_id: int,
        cluster_id: str,
        listen: HostPort,
        advertised: HostPort | None,
        max_request_bytes: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        security: Security = NO_SECURITY,
        quotas: KafkaQuotas | None = None,
        connections_max_idle_ms: int | None = None,
        keepalive: KeepaliveTiming = DEFAULT_KEEPALIVE,
        max_pre_auth_bytes: int | None = None,
        fetch_max_bytes: int = FETCH_MAX_BYTES,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self._limits = limits or ConnectionLimits("Kafka")
        self._fetch_max_bytes = fetch_max_bytes
        self._keepalive = keepalive
        self._max_pre_auth_bytes = max_pre_auth_bytes
        # One quota state for the whole listener: a client id is throttled across all
        # of its connections, as in Kafka.
        self._quotas = quotas
        self._idle_timeout_s = (
            connections_max_idle_ms / 1000 if connections_max_idle_ms is not None else None
        )
        self._ssl_context = ssl_context
        self._security = security
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
        listeners = await open_listeners(self._listen.host, self._listen.port, "Kafka")
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
            host = peer_host(stream)
            if not self._limits.admit(host):
                CONNECTIONS_REFUSED.inc()
                await refuse(stream)
                continue
            CONNECTIONS_ACCEPTED.inc()
            nursery.start_soon(self._serve_counted, stream, host)

    async def _serve_counted(self, stream: trio.SocketStream, host: str) -> None:
        try:
            await self._serve_connection(stream)
        finally:
            self._limits.release(host)

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        try:
            enable_keepalive(stream, self._keepalive)
        except OSError as exc:
            log.debug("keepalive not set: %s", exc)
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "unknown"
        if self._stopping:
            await stream.aclose()
            return
        client: trio.abc.Stream = stream
        tls_principal = None
        if self._ssl_context is not None:
            tls = trio.SSLStream(stream, self._ssl_context, server_side=True)
            try:
                # Bounded: a client that never speaks TLS must not hold a task forever.
                # A connection idle this long is closed anyway (connections.max.idle.ms,
                # which in Kafka also ends an unfinished handshake).
                timeout = min(_HANDSHAKE_TIMEOUT_S, self._idle_timeout_s or _HANDSHAKE_TIMEOUT_S)
                with trio.fail_after(timeout):
                    await tls.do_handshake()
            except (trio.BrokenResourceError, trio.TooSlowError) as exc:
                why: object = exc.__cause__ or exc
                if isinstance(exc, trio.TooSlowError):
                    why = f"not finished within {timeout:g} s"
                log.info("TLS handshake with %s failed: %s", peer, why)
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    await stream.aclose()
                return
            cn = common_name(tls.getpeercert())
            tls_principal = f"User:{cn}" if cn else None
            client = tls
        connection = KafkaConnection(
            client,
            peer,
            self._broker,
            self._node,
            self._max_request_bytes,
            self._security,
            tls_principal,
            quotas=self._quotas,
            idle_timeout_s=self._idle_timeout_s,
            max_pre_auth_bytes=self._max_pre_auth_bytes,
            fetch_max_bytes=self._fetch_max_bytes,
        )
        self._connections.add(connection)
        try:
            await connection.serve()
        except Exception:
            # A bug reached by one client's input must cost that client its connection,
            # never the listener (and with it the node).
            log.exception("connection from %s failed", peer)
        finally:
            self._connections.discard(connection)

    def shutdown(self) -> None:
        """Stop accepting and reading; serve() returns once in-flight requests are answered."""
        self._stopping = True
        self._accepting.cancel()
        for connection in self._connections:
            connection.stop_reading()
