"""Connection limits of one listener: Kafka's ``max.connections`` and
``max.connections.per.ip``, applied to every client listener (Kafka and gRPC).

A connection over a limit is closed as soon as it is accepted, before any byte is read,
with a log line; under a flood of such connections the lines are rate-limited (the first
at once, then one per ``log_every_s`` saying how many more were refused).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 10_000
MAX_CONNECTIONS_PER_IP = 1_000


class ConnectionLimits:
    def __init__(
        self,
        listener: str,
        max_connections: int = MAX_CONNECTIONS,
        max_connections_per_ip: int = MAX_CONNECTIONS_PER_IP,
        *,
        clock: Callable[[], float] = time.monotonic,
        log_every_s: float = 10.0,
    ) -> None:
        self.listener = listener
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self._clock = clock
        self._log_every_s = log_every_s
        self._open = 0
        self._per_ip: dict[str, int] = {}
        # Per limit: when its last line was logged, and how many refusals went unlogged.
        self._logged_at: dict[str, float] = {}
        self._unlogged: dict[str, int] = {}

    @property
    def open(self) -> int:
        return self._open

    def admit(self, host: str) -> bool:
        """Count a new connection from ``host``; False (and a log line) if it is over a limit."""
        from_host = self._per_ip.get(host, 0)
        if self._open >= self.max_connections:
            self._refused(
                "total", host, f"{self._open} open (max-connections {self.max_connections})"
            )
            return False
        if from_host >= self.max_connections_per_ip:
            self._refused(
                "per-ip",
                host,
                f"{from_host} open from {host} "
                f"(max-connections-per-ip {self.max_connections_per_ip})",
            )
            return False
        self._open += 1
        self._per_ip[host] = from_host + 1
        return True

    def release(self, host: str) -> None:
        self._open -= 1
        left = self._per_ip.get(host, 0) - 1
        if left > 0:
            self._per_ip[host] = left
        else:
            self._per_ip.pop(host, None)

    def _refused(self, limit: str, host: str, why: str) -> None:
        now = self._clock()
        last = self._logged_at.get(limit)
        if last is not None and now - last < self._log_every_s:
            self._unlogged[limit] = self._unlogged.get(limit, 0) + 1
            return
        unlogged = self._unlogged.pop(limit, 0)
        more = f"; {unlogged} more refused since the last such line" if unlogged else ""
        log.warning("%s listener: closing connection from %s: %s%s", self.listener, host, why, more)
        self._logged_at[limit] = now


def peer_host(stream: trio.SocketStream) -> str:
    try:
        return str(stream.socket.getpeername()[0])
    except OSError:
        return "unknown"


async def refuse(stream: trio.SocketStream) -> None:
    """Close an accepted connection at once (no TLS handshake, nothing read)."""
    await trio.aclose_forcefully(stream)
