"""What the port fuzzers share: one connection's bytes, a run of connections until enough
inputs were made, and sending one connection to a node on loopback."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Connection:
    data: bytes
    inputs: int  # what stands for the opening, and each frame, count as one input each


def connections(make: Callable[[], Connection], inputs: int) -> Iterator[Connection]:
    """Connections from `make` until at least `inputs` inputs have been generated."""
    made = 0
    while made < inputs:
        connection = make()
        made += connection.inputs
        yield connection


def send_connection(port: int, data: bytes, timeout: float = 10.0) -> bool:
    """Send one connection's bytes to a port on loopback, then read whatever comes back
    until the node hangs up; False if it did not within `timeout` after our end."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(256 * 1024):
                pass
        except TimeoutError:
            return False
        except OSError:
            pass  # reset by the node: it hung up
    return True
