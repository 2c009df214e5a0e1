"""One logical connection to a VDL cluster: a pool of endpoints, TLS, login, and an HTTP/2
channel to one of them that is replaced whenever it dies.

A background task (:meth:`Connection.run`) owns the channel: it connects with back-off,
logs in when a user is configured, asks the node for the cluster's nodes (Discovery
ListEndpoints, as the YDB SDK does) to grow the pool, hands the channel out through
:meth:`Connection.channel`, and PINGs it. A channel whose PING goes unanswered, whose peer
said GOAWAY, or that a caller reported broken is closed (cancelling its calls, which their
owners then retry) and a new one is opened to the next endpoint of the pool, so the death of
a node moves every stream to another one. Writers and readers never hold a channel across a
failure: they ask again.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import trio
from google.protobuf.message import Message

from vdl.client import backoff
from vdl.client.errors import (
    ClientError,
    ClosedError,
    ConnectError,
    breaks_connection,
    check_status,
    is_retriable,
)
from vdl.net.grpc import DEFAULT_MAX_MESSAGE_SIZE, GrpcChannel, GrpcError, GrpcSettings
from vdl.net.grpc.driver import Signal, unwrap_single_exception
from vdl.net.grpc.tls import client_ssl_context
from vdl.net.ydb.protos import ydb_auth_pb2, ydb_discovery_pb2

ResultT = TypeVar("ResultT", bound=Message)
ChannelFactory = Callable[[], AbstractAsyncContextManager[GrpcChannel]]

DEFAULT_ENDPOINT = "grpc://127.0.0.1:2135"
DEFAULT_DATABASE = "/local"
LOGIN_METHOD = "/Ydb.Auth.V1.AuthService/Login"
LIST_ENDPOINTS_METHOD = "/Ydb.Discovery.V1.DiscoveryService/ListEndpoints"
_BUILD_INFO = "vdl-client/0.1"
# How often the keeper looks at its channel (GOAWAY flag, ping due); cheap flag checks.
_TICK_S = 0.1
# After GOAWAY, how long calls still open on the old channel may finish before it closes.
_DRAIN_S = 5.0


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    tls: bool

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """``grpc://HOST:PORT`` (plaintext), ``grpcs://HOST:PORT`` (TLS), or bare
        ``HOST:PORT`` (plaintext). IPv6 hosts go in brackets."""
        raw = text.strip()
        if "://" not in raw:
            raw = "grpc://" + raw
        parts = urlsplit(raw)
        if parts.scheme not in ("grpc", "grpcs"):
            raise ValueError(f"endpoint {text!r}: scheme must be grpc:// or grpcs://")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"endpoint {text!r}: expected grpc[s]://HOST:PORT and nothing more")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"endpoint {text!r}: the port must be a number 1-65535") from None
        if not parts.hostname or port is None or port == 0:
            raise ValueError(f"endpoint {text!r}: expected grpc[s]://HOST:PORT")
        return cls(parts.hostname, port, parts.scheme == "grpcs")

    @classmethod
    def parse_list(cls, text: str | Sequence[str]) -> tuple[Endpoint, ...]:
        """Endpoints given as ``a,b,c`` or as a sequence of such strings; duplicates are
        dropped, the order is kept."""
        items = [text] if isinstance(text, str) else list(text)
        parsed = [cls.parse(part) for item in items for part in item.split(",") if part.strip()]
        if not parsed:
            raise ValueError("no endpoint given")
        return tuple(dict.fromkeys(parsed))

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'grpcs' if self.tls else 'grpc'}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ClientConfig:
    endpoint: Endpoint = field(default_factory=lambda: Endpoint.parse(DEFAULT_ENDPOINT))
    database: str = DEFAULT_DATABASE
    #: More seed endpoints after ``endpoint`` (nodes of the same cluster).
    more_endpoints: tuple[Endpoint, ...] = ()
    #: Add the nodes the cluster lists (Discovery ListEndpoints) to the pool.
    discovery: bool = True
    #: PEM file of the CA to trust under grpcs:// (system roots when None).
    ca_file: str | None = None
    user: str | None = None
    password: str | None = None
    #: A ready token (x-ydb-auth-ticket) instead of user/password.
    token: str | None = None
    #: How long a request waits for a connection before ConnectError.
    connect_timeout: float = 10.0
    #: Give up at the first failed connection attempt instead of retrying (for tools).
    fail_fast: bool = False
    ping_interval: float = 10.0
    ping_timeout: float = 10.0
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE


class Connection:
    """See the module docstring. Open it with ``async with Connection.open(config)`` or start
    :meth:`run` in your own nursery and :meth:`aclose` it when done."""

    def __init__(
        self, config: ClientConfig, *, channel_factory: ChannelFactory | None = None
    ) -> None:
        self.config = config
        self._factory = channel_factory or self._tcp_channel
        self._discovers = channel_factory is None and config.discovery
        self._seeds = tuple(dict.fromkeys((config.endpoint, *config.more_endpoints)))
        self._pool: list[Endpoint] = list(self._seeds)
        self._index = 0
        self._ssl = (
            client_ssl_context(config.ca_file)
            if any(e.tls for e in self._seeds) or config.ca_file is not None
            else None
        )
        self._current: GrpcChannel | None = None
        self._broken: trio.Event | None = None
        self._token = config.token
        self._changed = Signal()
        self._scope = trio.CancelScope()
        self._closing = False
        self._finished = trio.Event()
        self._fatal: BaseException | None = None
        self._last_error: BaseException | None = None
        #: How many channels were opened so far (tests watch reconnects through it).
        self.channels_opened = 0

    @classmethod
    @asynccontextmanager
    async def open(
        cls, config: ClientConfig, *, channel_factory: ChannelFactory | None = None
    ) -> AsyncIterator[Connection]:
        connection = cls(config, channel_factory=channel_factory)
        with unwrap_single_exception():
            async with trio.open_nursery() as nursery:
                await nursery.start(connection.run)
                try:
                    yield connection
                finally:
                    await connection.aclose()

    # -- what callers use -----------------------------------------------------------------

    @property
    def endpoint(self) -> Endpoint:
        """The endpoint the connection uses (or tries) now."""
        return self._pool[self._index]

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """The pool: the seed endpoints and the nodes discovery listed last."""
        return tuple(self._pool)

    def metadata(self) -> list[tuple[str, str | bytes]]:
        result: list[tuple[str, str | bytes]] = [
            ("x-ydb-database", self.config.database),
            ("x-ydb-sdk-build-info", _BUILD_INFO),
        ]
        if self._token:
            result.append(("x-ydb-auth-ticket", self._token))
        return result

    async def channel(self, timeout: float | None = None) -> GrpcChannel:
        """The live channel, waiting up to ``timeout`` (forever if None) for one."""
        with trio.move_on_after(math.inf if timeout is None else timeout):
            while True:
                if self._closing or self._finished.is_set():
                    raise self._fatal or ClosedError("the connection is closed")
                current = self._current
                if current is not None and not current.goaway_received:
                    return current
                await self._changed.wait()
        reason = f": {self._last_error}" if self._last_error is not None else ""
        raise ConnectError(f"cannot reach {self._describe_pool()}{reason}")

    def report_broken(self, channel: GrpcChannel) -> None:
        """A call on ``channel`` failed in a way that condemns the connection (or its node
        refused a stream that another node will take): the next channel goes to the next
        endpoint of the pool."""
        if channel is self._current and self._broken is not None:
            self._broken.set()

    async def unary(
        self,
        method: str,
        request: Message,
        response_type: type[Message],
        result_type: type[ResultT] | None = None,
        *,
        timeout: float | None = 30.0,
        idempotent: bool = False,
    ) -> ResultT | None:
        """A YDB unary call: the Operation's status is checked and its result unpacked.

        Idempotent calls are retried (a few times) on a new connection after transport
        failures; others surface the first error, since the server may have acted on them.
        """
        attempt = 0
        while True:
            channel = await self.channel(self.config.connect_timeout)
            try:
                data = await channel.unary(
                    method, request.SerializeToString(), self.metadata(), timeout=timeout
                )
            except GrpcError as exc:
                if breaks_connection(exc):
                    self.report_broken(channel)
                if idempotent and is_retriable(exc) and attempt < 3:
                    await trio.sleep(backoff.FAST.delay(attempt))
                    attempt += 1
                    continue
                raise
            response = response_type.FromString(data)
            op: Any = response.operation
            check_status(int(op.status), op.issues)
            if result_type is None:
                return None
            result: ResultT = result_type()
            if op.HasField("result"):
                op.result.Unpack(result)
            return result

    async def aclose(self) -> None:
        """Close the channel and end :meth:`run`; calls still open fail. Idempotent."""
        self._closing = True
        self._scope.cancel()
        self._changed.fire()
        await self._finished.wait()

    # -- the background task --------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            with self._scope:
                await self._keep_connected()
        finally:
            self._current = None
            self._finished.set()
            self._changed.fire()

    def _describe_pool(self) -> str:
        if len(self._pool) == 1:
            return str(self._pool[0])
        return "any of " + ", ".join(str(e) for e in self._pool)

    def _next_endpoint(self) -> None:
        self._index = (self._index + 1) % len(self._pool)

    def _tcp_channel(self) -> AbstractAsyncContextManager[GrpcChannel]:
        endpoint = self.endpoint
        size = self.config.max_message_size
        return GrpcChannel.connect(
            endpoint.host,
            endpoint.port,
            self._ssl,
            settings=GrpcSettings(max_send_message_size=size, max_receive_message_size=size),
        )

    async def _keep_connected(self) -> None:
        # Failed attempts in a row; the back-off grows once per round of the pool, so a
        # dead node is skipped at once for the next one.
        attempt = 0
        connected_once = False
        while True:
            try:
                timeout = self.config.connect_timeout
                with trio.CancelScope(deadline=trio.current_time() + timeout) as connecting:
                    async with self._factory() as channel:
                        await self._login(channel)
                        if self._discovers:
                            await self._discover(channel)
                        connecting.deadline = math.inf
                        self.channels_opened += 1
                        connected_once = True
                        attempt = 0
                        self._publish(channel)
                        try:
                            await self._supervise(channel)
                        finally:
                            self._current = None
                if connecting.cancelled_caught:
                    raise trio.TooSlowError
            except (trio.TooSlowError, OSError, GrpcError, trio.BrokenResourceError) as exc:
                self._last_error = _describe(exc, self.config.connect_timeout)
                if isinstance(exc, GrpcError) and not is_retriable(exc):
                    self._fatal = ConnectError(f"cannot use {self.endpoint}: {exc}")
                    return
            except Exception as exc:
                # Login refused (bad password) and other answers that a retry cannot fix.
                if is_retriable(exc):
                    self._last_error = exc
                else:
                    self._fatal = exc
                    return
            self._changed.fire()
            self._next_endpoint()
            if self.config.fail_fast and not connected_once and attempt + 1 >= len(self._pool):
                self._fatal = ConnectError(
                    f"cannot reach {self._describe_pool()}: {self._last_error}"
                )
                return
            await trio.sleep(backoff.CONNECT.delay(attempt // len(self._pool)))
            attempt += 1

    async def _login(self, channel: GrpcChannel) -> None:
        config = self.config
        if config.user is None:
            return
        request = ydb_auth_pb2.LoginRequest(user=config.user, password=config.password or "")
        data = await channel.unary(
            LOGIN_METHOD,
            request.SerializeToString(),
            [("x-ydb-database", config.database), ("x-ydb-sdk-build-info", _BUILD_INFO)],
            timeout=config.connect_timeout,
        )
        op = ydb_auth_pb2.LoginResponse.FromString(data).operation
        check_status(int(op.status), op.issues)
        result = ydb_auth_pb2.LoginResult()
        op.result.Unpack(result)
        self._token = result.token

    async def _discover(self, channel: GrpcChannel) -> None:
        """Make the pool the seeds plus the nodes ``channel``'s node lists, keeping the
        current endpoint current. A node that cannot answer (an older server) leaves the
        pool as it was."""
        config = self.config
        request = ydb_discovery_pb2.ListEndpointsRequest(database=config.database)
        try:
            data = await channel.unary(
                LIST_ENDPOINTS_METHOD,
                request.SerializeToString(),
                self.metadata(),
                timeout=config.connect_timeout,
            )
            op = ydb_discovery_pb2.ListEndpointsResponse.FromString(data).operation
            check_status(int(op.status), op.issues)
        except (GrpcError, ClientError):
            return
        result = ydb_discovery_pb2.ListEndpointsResult()
        op.result.Unpack(result)
        listed = [Endpoint(e.address, int(e.port), bool(e.ssl)) for e in result.endpoints]
        current = self.endpoint
        pool = list(dict.fromkeys((*self._seeds, *listed)))
        self._pool = pool
        self._index = pool.index(current) if current in pool else 0

    def _publish(self, channel: GrpcChannel) -> None:
        self._current = channel
        self._broken = trio.Event()
        self._changed.fire()

    async def _supervise(self, channel: GrpcChannel) -> None:
        """Return once ``channel`` should be replaced: reported broken, PING unanswered, or
        drained after the peer's GOAWAY (its open calls get a grace period to finish)."""
        broken = self._broken
        assert broken is not None
        config = self.config
        next_ping = trio.current_time() + config.ping_interval
        drain_until: float | None = None
        while True:
            with trio.move_on_after(_TICK_S):
                await broken.wait()
                return
            now = trio.current_time()
            if drain_until is None and channel.goaway_received:
                # channel() no longer hands it out; callers now wait for the next one.
                drain_until = now + _DRAIN_S
                next_ping = now
                self._changed.fire()
            if drain_until is not None and now >= drain_until:
                return
            if now >= next_ping:
                try:
                    await channel.ping(config.ping_timeout)
                except (TimeoutError, GrpcError) as exc:
                    self._last_error = exc
                    return
                wait = config.ping_interval if drain_until is None else _TICK_S
                next_ping = trio.current_time() + wait


def _describe(exc: BaseException, timeout: float) -> BaseException:
    """A connection failure as users should read it: trio's "all attempts failed" hides
    the reason (refused, unreachable...) in ``__cause__``."""
    if isinstance(exc, trio.TooSlowError):
        return TimeoutError(f"no connection within {timeout} s")
    cause = exc.__cause__
    if isinstance(cause, BaseExceptionGroup):
        cause = next((e for e in cause.exceptions if isinstance(e, OSError)), None)
    if isinstance(exc, OSError) and isinstance(cause, OSError) and cause.strerror:
        return OSError(cause.errno, cause.strerror)
    return exc
