"""Users kept in a node's MetaStore: the replicated half of the one user store.

`vdl user add|passwd|remove --endpoint` changes this table (on a cluster through the
metadata group, so every node holds the same table); `UserStore` consults it before the
node's users file, so an online change overrides the file on every node at once.

One key per user under ``security/user/``. The value is the user's line in the users-file
format (pbkdf2 hash and SCRAM salted keys, never a password), or empty for a removed
user: the tombstone is what makes `vdl user remove` lock out a user that some node still
has in its local file.
"""

from __future__ import annotations

from vdl.backends.api import MetaStore
from vdl.security.users import (
    NO_PASSWORD,
    PBKDF2,
    SCRAM_MECHANISMS,
    User,
    UsersFileError,
    parse_line,
)

_PREFIX = b"security/user/"


def decode_user(line: str) -> User:
    """A user line as sent by a client or carried by a command; UsersFileError if it is
    not a complete hashed entry (a legacy ``name:password`` line would smuggle a plain
    password into the table). A SCRAM-only user (``NO_PASSWORD``, set by Kafka's
    AlterUserScramCredentials) is accepted too. Either needs a SCRAM credential (AlterUser-
    ScramCredentials may delete all but one)."""
    user = parse_line(0, line)
    if user.password_hash != NO_PASSWORD and not user.password_hash.startswith(PBKDF2 + "$"):
        raise UsersFileError("expected a pbkdf2 hash, not a password")
    if not user.scram:
        # `vdl user` sends every mechanism; Kafka may delete all but one.
        raise UsersFileError(f"missing credentials: {', '.join(SCRAM_MECHANISMS)}")
    return user


class UserTable:
    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta
        # name -> user, or None for a tombstone; read on every authentication, so cached.
        self._entries: dict[str, User | None] = {}
        for key, value in meta.scan(_PREFIX):
            name = key[len(_PREFIX) :].decode()
            self._entries[name] = decode_user(value.decode()) if value else None

    def lookup(self, name: str) -> tuple[bool, User | None]:
        """(known here, user): known with None means removed, overriding the file."""
        if name in self._entries:
            return True, self._entries[name]
        return False, None

    def names(self) -> set[str]:
        return {n for n, u in self._entries.items() if u is not None}

    def removed(self) -> set[str]:
        return {n for n, u in self._entries.items() if u is None}

    def put(self, user: User) -> None:
        self._meta.put(_PREFIX + user.name.encode(), user.line().encode())
        self._entries[user.name] = user

    def remove(self, name: str) -> None:
        self._meta.put(_PREFIX + name.encode(), b"")
        self._entries[name] = None
