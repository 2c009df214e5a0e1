"""User changes replicated through the metadata group (group 0), as ACLs are.

`vdl user add|passwd|remove --endpoint` reaches one node; that node runs the change as a
command (`forwarding.py`) and every node applies it into its own `UserTable`, so a user
added through any node can log in on every node (nodes that were down apply it when they
catch up with group 0's log).

    {"op": "user_put", "user": "<users-file line: name, pbkdf2 hash, SCRAM keys>"}
    {"op": "user_remove", "name": "<name>"}

The command carries only what the client derived from the password, never the password.

Replay: group 0's log is replayed from the start at every restart while the table keeps
what it had, so the table remembers the raft index of the last user command it applied
and skips commands at or below it. Without this a removed user (or an old password) would
be valid again for the duration of the replay.
"""

from __future__ import annotations

from vdl.backends.api import MetaStore
from vdl.cluster.commands import Command
from vdl.cluster.metadata import MetadataState, Outcome
from vdl.log.error_codes import ErrorCode
from vdl.security.user_table import UserTable, decode_user
from vdl.security.users import User, UsersFileError, check_user_name

USER_PUT = "user_put"
USER_REMOVE = "user_remove"
USER_OPS = (USER_PUT, USER_REMOVE)
APPLIED_INDEX_KEY = b"cluster/user-applied-index"


def user_put_command(user: User) -> Command:
    return {"op": USER_PUT, "user": user.line()}


def user_remove_command(name: str) -> Command:
    return {"op": USER_REMOVE, "name": name}


class ReplicatedUsers:
    def __init__(self, meta: MetaStore, table: UserTable) -> None:
        self._meta = meta
        self.table = table
        raw = meta.get(APPLIED_INDEX_KEY)
        self._applied_index = int(raw) if raw is not None else 0
        self._state: MetadataState | None = None

    def register(self, state: MetadataState) -> None:
        """Before group 0 starts applying its log: its commands must find their handler."""
        self._state = state
        for op in USER_OPS:
            state.handlers[op] = self._apply

    def _apply(self, command: Command) -> Outcome:
        assert self._state is not None
        try:
            if command["op"] == USER_PUT:
                user: User | None = decode_user(str(command["user"]))
                name = ""
            else:
                user, name = None, str(command["name"])
                check_user_name(name)
        except (UsersFileError, KeyError) as exc:
            return Outcome(ErrorCode.INVALID_REQUEST, str(exc))
        index = self._state.applying_index
        if index <= self._applied_index:
            return Outcome()  # replayed: the table already reflects it
        if user is not None:
            self.table.put(user)
        else:
            self.table.remove(name)
        # After the change: a crash in between re-applies it, which is harmless.
        self._meta.put(APPLIED_INDEX_KEY, str(index).encode())
        self._applied_index = index
        return Outcome()
