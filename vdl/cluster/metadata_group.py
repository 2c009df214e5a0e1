"""Group 0 as seen by the rest of the node: apply commands, propose one and await it.

The state is rebuilt on every start by replaying the group's log (the driver starts with
applied = nothing), so nothing but the raft log itself is persisted for it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import trio

from vdl.backends.api import Entry, EntryType
from vdl.cluster.commands import Command, CommandError, decode_command, encode_command
from vdl.cluster.metadata import MetadataState, Outcome
from vdl.consensus.driver import GroupDriver
from vdl.consensus.errors import ConsensusError, NotLeader

log = logging.getLogger(__name__)


class ProposalLost(ConsensusError):
    """The command was replaced by a new leader's entries (or timed out): retry."""


class MetadataGroup:
    """The StateMachine of group 0."""

    def __init__(self, state: MetadataState) -> None:
        self.state = state
        self.driver: GroupDriver | None = None
        self.applied = 0
        self._outcomes: dict[int, tuple[int, Outcome]] = {}
        self._awaited: set[int] = set()  # indexes whose outcome a proposer waits for
        self._truncated_from: int | None = None
        self._progress = trio.Event()
        self.leader_id = 0

    # ---- StateMachine ----------------------------------------------------------------

    def on_written(self, entries: Sequence[Entry]) -> None:
        pass

    def on_truncated(self, from_index: int) -> None:
        self._truncated_from = (
            from_index if self._truncated_from is None else min(from_index, self._truncated_from)
        )
        self._signal()

    def apply(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if entry.type == EntryType.DATA:
                try:
                    command = decode_command(entry.payload)
                    self.state.applying_index = entry.index
                    outcome = self.state.apply(command)
                except CommandError as exc:
                    log.error("skipping bad metadata entry %d: %s", entry.index, exc)
                    outcome = Outcome(message=str(exc))
                except (KeyError, ValueError, TypeError, AttributeError, IndexError) as exc:
                    # A command of the wrong shape (a field of another type, one missing):
                    # every node skips it alike, none stops on it. Forwarded commands come
                    # from peers, which check only that they are JSON objects with an op.
                    # (A failing disk or a bug elsewhere still stops the group, as before.)
                    log.error(
                        "skipping bad metadata entry %d: %s: %s",
                        entry.index,
                        type(exc).__name__,
                        exc,
                    )
                    outcome = Outcome(message=str(exc))
                else:
                    for listener in self.state.on_applied:
                        listener(command, outcome)
                if entry.index in self._awaited:
                    self._outcomes[entry.index] = (entry.term, outcome)
            self.applied = entry.index
        self._signal()

    def on_role_change(self, leader_id: int, term: int, is_leader: bool) -> None:
        self.leader_id = leader_id
        self._signal()

    def on_persisted(self, index: int) -> None:
        pass

    def on_restored(self, index: int) -> None:
        # Group 0's log is never cut by retention, so no leader sends it a snapshot.
        raise RuntimeError("the metadata group does not take snapshots")

    def _signal(self) -> None:
        self._progress.set()
        self._progress = trio.Event()

    # ---- proposing -------------------------------------------------------------------

    async def propose(self, command: Command, timeout_s: float = 10.0) -> Outcome:
        """Run `command` through the group (this node must lead it) and return its outcome.

        Raises NotLeader, ProposalLost (replaced or timed out: the caller may retry)."""
        driver = self.driver
        if driver is None:
            raise NotLeader(0)
        index = driver.next_index()
        first, _ = driver.propose([encode_command(command, index)])
        term = driver.term
        self._awaited.add(first)
        try:
            return await self._await_outcome(first, term, timeout_s)
        finally:
            self._awaited.discard(first)
            self._outcomes.pop(first, None)

    async def _await_outcome(self, first: int, term: int, timeout_s: float) -> Outcome:
        with trio.move_on_after(timeout_s):
            while True:
                done = self._outcomes.pop(first, None)
                if done is not None:
                    if done[0] != term:
                        raise ProposalLost("a new leader replaced the command")
                    return done[1]
                cut = self._truncated_from
                if cut is not None and cut <= first:
                    self._truncated_from = None
                    raise ProposalLost("a new leader replaced the command")
                await self._progress.wait()
        raise ProposalLost("the command did not commit in time")

    async def wait_applied(self, predicate: object) -> None:
        assert callable(predicate)
        while not predicate():
            await self._progress.wait()
