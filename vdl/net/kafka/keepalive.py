"""TCP keepalive on accepted client sockets: a peer that vanished without a FIN or RST
(power loss, a cable pulled, a NAT that forgot the flow) is detected by the kernel's
probes, and the connection's pending read fails, instead of holding a task, its buffers
and any held requests forever.

With the defaults, an unanswered peer is dropped after IDLE + INTERVAL * COUNT = 60 s +
6 x 10 s = 2 minutes, well before Kafka's connections.max.idle.ms would close it.
"""

from __future__ import annotations

import socket
from typing import Protocol

KEEPALIVE_IDLE_S = 60
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_COUNT = 6


class _HasSockOpt(Protocol):
    def setsockopt(self, level: int, option: int, value: int) -> None: ...


def enable_keepalive(
    sock: _HasSockOpt,
    idle_s: int = KEEPALIVE_IDLE_S,
    interval_s: int = KEEPALIVE_INTERVAL_S,
    count: int = KEEPALIVE_COUNT,
) -> None:
    """Turn keepalive on with the given timing. `sock` is anything with setsockopt (a
    socket, or trio's socket and SocketStream). Options the platform lacks are skipped:
    keepalive with the system's timing is still better than none."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", idle_s),
        ("TCP_KEEPINTVL", interval_s),
        ("TCP_KEEPCNT", count),
    ):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
