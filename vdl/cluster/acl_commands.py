"""ACL changes replicated through the metadata group (group 0).

`vdl acl add|remove` reaches one node; that node runs the change as a command
(`forwarding.py`), and every node applies it into its own `AclStore`, so every node
enforces the same ACLs, including nodes that were down at the time (they apply it when
they catch up with group 0's log).

    {"op": "acl_add", "entry": "{AclEntry JSON}"}
    {"op": "acl_remove", "entry": "{AclEntry JSON}"}

Replay: group 0's log is replayed from the start at every restart while the store keeps
what it had, so the store remembers the raft index of the last ACL command it applied and
skips commands at or below it. Without this an ACL added and later removed would be
granted again for the duration of the replay.
"""

from __future__ import annotations

from vdl.backends.api import MetaStore
from vdl.cluster.commands import Command
from vdl.cluster.metadata import MetadataState, Outcome
from vdl.log.error_codes import ErrorCode
from vdl.security.acl import AclEntry, AclError
from vdl.security.acl_store import AclStore

ACL_ADD = "acl_add"
ACL_REMOVE = "acl_remove"
ACL_OPS = (ACL_ADD, ACL_REMOVE)
APPLIED_INDEX_KEY = b"cluster/acl-applied-index"


def acl_command(op: str, entry: AclEntry) -> Command:
    if op not in ACL_OPS:
        raise ValueError(f"not an ACL command: {op}")
    return {"op": op, "entry": entry.to_json()}


class ReplicatedAcls:
    def __init__(self, meta: MetaStore, store: AclStore) -> None:
        self._meta = meta
        self.store = store
        raw = meta.get(APPLIED_INDEX_KEY)
        self._applied_index = int(raw) if raw is not None else 0
        self._state: MetadataState | None = None

    def register(self, state: MetadataState) -> None:
        """Before group 0 starts applying its log: its commands must find their handler."""
        self._state = state
        for op in ACL_OPS:
            state.handlers[op] = self._apply

    def _apply(self, command: Command) -> Outcome:
        assert self._state is not None
        try:
            entry = AclEntry.from_json(str(command["entry"]))
        except AclError as exc:
            return Outcome(ErrorCode.INVALID_REQUEST, str(exc))
        index = self._state.applying_index
        if index <= self._applied_index:
            return Outcome()  # replayed: the store already reflects it
        if command["op"] == ACL_ADD:
            self.store.add(entry)
        else:
            self.store.remove(entry)
        # After the change: a crash in between re-applies it, which is harmless.
        self._meta.put(APPLIED_INDEX_KEY, str(index).encode())
        self._applied_index = index
        return Outcome()
