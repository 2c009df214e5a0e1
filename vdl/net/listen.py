"""Opening a node's listening sockets, and the error a node cannot start with.

A port that is taken or an address this host does not have is a mistake in how the node
was started, not a failure of the node: it ends the start with one line naming the
listener and exit code 2 (`vdl.node.main`), never a traceback.
"""

from __future__ import annotations

import trio


class StartupError(Exception):
    """The node cannot start as configured; the message is the one line to print."""


async def open_listeners(host: str, port: int, what: str) -> list[trio.SocketListener]:
    """Trio's TCP listeners on host:port, or StartupError naming `what` listens there."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StartupError(f"cannot listen for {what} on {host}:{port}: {reason}") from None
