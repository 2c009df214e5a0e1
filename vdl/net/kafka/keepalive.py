"""TCP keepalive on accepted client sockets: a peer that vanished without a FIN or RST
(power loss, a cable pulled, a NAT that forgot the flow) is detected by the kernel's
probes, and the connection's pending read fails, instead of holding a task, its buffers
and any held requests forever.

The timing is the node's --tcp-keepalive-idle-s / --tcp-keepalive-interval-s /
--tcp-keepalive-count. With the defaults, an unanswered peer is dropped after
IDLE + INTERVAL * COUNT = 60 s + 6 x 10 s = 2 minutes, well before Kafka's
connections.max.idle.ms would close it.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class KeepaliveTiming:
    idle_s: int = 60
    interval_s: int = 10
    count: int = 6


DEFAULT_KEEPALIVE = KeepaliveTiming()


class _HasSockOpt(Protocol):
    def setsockopt(self, level: int, option: int, value: int) -> None: ...


def enable_keepalive(sock: _HasSockOpt, timing: KeepaliveTiming = DEFAULT_KEEPALIVE) -> None:
    """Turn keepalive on with the given timing. `sock` is anything with setsockopt (a
    socket, or trio's socket and SocketStream). Options the platform lacks are skipped:
    keepalive with the system's timing is still better than none."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", timing.idle_s),
        ("TCP_KEEPINTVL", timing.interval_s),
        ("TCP_KEEPCNT", timing.count),
    ):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
