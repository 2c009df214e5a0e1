"""Multi-raft routing: inbound messages go to the driver of their group on this node."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from vdl.consensus.frames import GOSSIP_GROUP, Inbound
from vdl.consensus.messages import Message
from vdl.consensus.snapshot_transfer import SnapshotSource

log = logging.getLogger(__name__)


class Inbox(Protocol):
    def deliver(self, message: Message) -> None: ...


class GroupRouter:
    def __init__(self) -> None:
        self._groups: dict[int, Inbox] = {}
        self.unrouted = 0
        # Takes commands other nodes forward to the metadata group's leader.
        self.on_forward: Callable[[bytes], None] | None = None
        # Takes commands from admin clients (not nodes) for the metadata group, with who
        # may send what: None for any admin command (an operator's certificate, or no
        # raft TLS), else the node ids a node's certificate names (it may ask to add one
        # of them, itself, and nothing else).
        self.on_admin: Callable[[bytes, frozenset[int] | None], None] | None = None
        # Takes other nodes' gossip (the groups they lead).
        self.on_gossip: Callable[[bytes], None] | None = None

    def add(self, group_id: int, inbox: Inbox) -> None:
        if group_id in self._groups:
            raise ValueError(f"group {group_id} is already running here")
        self._groups[group_id] = inbox

    def snapshot_source(self, group_id: int) -> SnapshotSource | None:
        inbox = self._groups.get(group_id)
        return inbox if isinstance(inbox, SnapshotSource) else None

    def remove(self, group_id: int) -> None:
        self._groups.pop(group_id, None)

    def deliver(self, group_id: int, message: Inbound) -> None:
        if isinstance(message, bytes):
            handler = self.on_gossip if group_id == GOSSIP_GROUP else self.on_forward
            if handler is not None:
                handler(message)
            return
        inbox = self._groups.get(group_id)
        if inbox is None:
            # A group not started here yet (its creation is still being applied) or
            # already deleted: the sender retries, so dropping is enough.
            self.unrouted += 1
            return
        inbox.deliver(message)
