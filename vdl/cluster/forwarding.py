"""Run a client-facing metadata command from any node and learn how it ended.

YDB clients (and `vdl acl`) talk to whichever node Discovery gave them, and Kafka admin
clients send CreateTopics and DeleteTopics to any broker (KIP-590: brokers forward them to
the controller), so that node must get the command into group 0 for them. The leader of
group 0 proposes it directly. Another node forwards it to the leader over the raft
connection (fire and forget, as registrations are) and then waits to *apply* the entry
itself: every member applies every command, so the outcome arrives locally, matched by a
request id carried in the command. No reply channel is needed, and a forwarder that sees
the outcome knows the command is committed.

While group 0 has no leader the command waits for one (until the deadline) instead of
failing. A forward may be lost (leader changing, connection dropped): it is resent with the
same request id until the deadline. A resent command can therefore be applied twice, so
only commands that are harmless to repeat go through here (the first outcome is the one
reported).
"""

from __future__ import annotations

import json
import uuid

import trio

from vdl.cluster.commands import Command
from vdl.cluster.metadata import Outcome
from vdl.cluster.metadata_group import MetadataGroup, ProposalLost
from vdl.consensus.errors import ConsensusError
from vdl.consensus.transport import RaftTransport

REQUEST_ID = "request_id"
# How long one forward is given before it is sent again (to whoever leads by then).
_RESEND_S = 1.0


class CommandTimeout(ProposalLost):
    """No outcome within the deadline: the command may or may not have been applied."""


class CommandForwarder:
    def __init__(self, metadata: MetadataGroup, transport: RaftTransport) -> None:
        self._metadata = metadata
        self._transport = transport
        self._waiting: dict[str, tuple[trio.Event, list[Outcome]]] = {}
        metadata.state.on_applied.append(self._on_applied)

    def _on_applied(self, command: Command, outcome: Outcome) -> None:
        request_id = command.get(REQUEST_ID)
        if not isinstance(request_id, str):
            return
        waiting = self._waiting.get(request_id)
        if waiting is not None and not waiting[1]:
            waiting[1].append(outcome)
            waiting[0].set()

    async def execute(self, command: Command, timeout_s: float = 10.0) -> Outcome:
        """Apply `command` through group 0 from this node; raises CommandTimeout."""
        request_id = uuid.uuid4().hex
        command = {**command, REQUEST_ID: request_id}
        done = trio.Event()
        outcomes: list[Outcome] = []
        self._waiting[request_id] = (done, outcomes)
        try:
            with trio.move_on_after(timeout_s):
                while not outcomes:
                    await self._attempt(command, done)
            if not outcomes:
                raise CommandTimeout(f"metadata command {command['op']} got no outcome in time")
            return outcomes[0]
        finally:
            del self._waiting[request_id]

    async def _attempt(self, command: Command, done: trio.Event) -> None:
        driver = self._metadata.driver
        if driver is not None and driver.is_leader:
            try:
                await self._metadata.propose(command, _RESEND_S * 5)
            except ConsensusError:
                # Lost or not leading any more: the outcome may still arrive below.
                pass
        elif driver is not None and driver.leader_id:
            self._transport.forward(driver.leader_id, json.dumps(command).encode())
        elif driver is not None:
            # No leader known: try again as soon as one is (an election just ended).
            with trio.move_on_after(_RESEND_S):
                await self._metadata.wait_applied(lambda: done.is_set() or driver.leader_id)
            return
        # Also when proposed here: the listener has the outcome by now, or it comes later.
        with trio.move_on_after(_RESEND_S):
            await done.wait()
