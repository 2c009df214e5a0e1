"""How a group driver hands messages to the network without ever waiting for it."""

from __future__ import annotations

from typing import Protocol

from vdl.consensus.messages import Message


class Outbox(Protocol):
    def send(self, group_id: int, message: Message) -> None:
        """Queue `message` for its destination node, or drop it if that node's queue is
        full or unreachable: Raft resends what matters (heartbeats, probes, retries), and
        a group driver must never block on one slow peer."""
        ...
