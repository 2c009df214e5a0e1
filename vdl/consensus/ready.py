"""The bundle of work the core hands its driver, and the order the driver must do it in.

For each `Ready` (from `RaftNode.ready()`), the driver:

1. sends `messages` right away: they are safe before anything of this Ready is durable
   (this is how the leader replicates while its own disk write is still in flight,
   VDL 5.2.5.1);
2. installs `snapshot` if set (the log now ends at snapshot.index, data moved beforehand),
   deletes stored entries from `truncate_from` on if set, appends `entries`, and stores
   `hard_state` if set, all of which may be buffered (group commit);
3. applies the committed entries up to `apply_to` (makes them visible to readers; they
   are always already durable locally): `committed_entries` are those entries, unless the
   node was built with `apply_payloads=False` (a machine that needs only the index, which
   spares reading every committed payload back from storage);
4. calls `advance(ready)` before asking for the next Ready;
5. once everything written for this Ready *and all earlier ones* is durable: sends
   `messages_after_persist`, then calls `on_persisted(index, term)` with the last entry
   made durable (or the snapshot's index and term if no entry followed it).

Steps 5 of several Readys may be merged (one fdatasync covering many appends); their
`messages_after_persist` must then all wait for that sync.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdl.backends.api import Entry
from vdl.consensus.messages import Message
from vdl.consensus.state import HardState, SnapshotMeta


@dataclass(frozen=True, slots=True)
class Ready:
    hard_state: HardState | None
    snapshot: SnapshotMeta | None
    truncate_from: int | None
    entries: tuple[Entry, ...]
    messages: tuple[Message, ...]
    messages_after_persist: tuple[Message, ...]
    committed_entries: tuple[Entry, ...]
    apply_to: int  # apply committed entries up to here (0: nothing to apply)
    commit_index: int

    @property
    def needs_persist(self) -> bool:
        """Does this Ready carry anything to write (hence a sync to wait for)?"""
        return (
            self.hard_state is not None
            or self.snapshot is not None
            or self.truncate_from is not None
            or bool(self.entries)
            or bool(self.messages_after_persist)
        )
