"""The one user store of a node, for Kafka SASL (PLAIN, SCRAM) and YDB Login.

A users file holds one user a line; ``#`` starts a comment::

    alice:pbkdf2_sha256$<i>$<salt hex>$<hash hex> SCRAM-SHA-256=<scram> SCRAM-SHA-512=<scram>

where ``<scram>`` is ``<iterations>$<salt>$<stored key>$<server key>`` (base64).

PLAIN and YDB Login check the pbkdf2 hash; SCRAM needs its own salted keys per hash, so a
user carries both forms. No password is ever stored: ``vdl user add|passwd`` write these
lines. A line ``name:password`` (no hash) is still read, for files written before hashing
existed; the node warns about it at start-up and derives the salted forms in memory.

A user given only SCRAM credentials by a Kafka client (AlterUserScramCredentials, KIP-554:
the client sends the salted password, never the password) has no pbkdf2 hash: its line
has ``!`` in the hash's place, and PLAIN and YDB Login refuse it::

    carol:! SCRAM-SHA-256=<scram>

The file is re-read when it changes (checked at most once a second), so ``vdl user`` edits
take effect on a running node without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vdl.security.scram import HASHES, ScramCredential, make_credential

if TYPE_CHECKING:
    from vdl.security.user_table import UserTable

PBKDF2 = "pbkdf2_sha256"
PBKDF2_ITERATIONS = 100_000
# In the hash's place: the user has SCRAM credentials only, so no password matches.
NO_PASSWORD = "!"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_RELOAD_EVERY_S = 1.0


class UsersFileError(Exception):
    """The users file cannot be read or parsed; the message names the file and line."""


def hash_password(
    password: str, *, iterations: int = PBKDF2_ITERATIONS, salt: bytes | None = None
) -> str:
    salt = salt if salt is not None else os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"{PBKDF2}${iterations}${salt.hex()}${digest.hex()}"


def password_matches(stored: str, given: str) -> bool:
    """Constant-time check of ``given`` against a pbkdf2 hash (or a legacy plain entry)."""
    if stored == NO_PASSWORD:
        return False
    if stored.startswith(PBKDF2 + "$"):
        try:
            _, iterations, salt, expected = stored.split("$")
            digest = hashlib.pbkdf2_hmac(
                "sha256", given.encode(), bytes.fromhex(salt), int(iterations)
            )
        except ValueError:
            return False
        return hmac.compare_digest(digest.hex(), expected)
    return hmac.compare_digest(stored.encode(), given.encode())


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password_hash: str  # pbkdf2 form; NO_PASSWORD for SCRAM only; plain text for legacy lines
    scram: Mapping[str, ScramCredential] = field(default_factory=dict)

    @property
    def legacy_plaintext(self) -> bool:
        return self.password_hash != NO_PASSWORD and not self.password_hash.startswith(PBKDF2 + "$")

    def line(self) -> str:
        parts = [self.password_hash]
        parts += [f"{mech}={cred.encode()}" for mech, cred in sorted(self.scram.items())]
        return f"{self.name}:{' '.join(parts)}"


def new_user(name: str, password: str) -> User:
    check_user_name(name)
    return User(
        name,
        hash_password(password),
        {mech: make_credential(mech, password) for mech in SCRAM_MECHANISMS},
    )


def check_user_name(name: str) -> None:
    if not name or ":" in name or any(c.isspace() for c in name) or name.startswith("#"):
        raise UsersFileError(f"invalid user name {name!r} (no ':', spaces or leading '#')")


def parse_line(number: int, line: str) -> User:
    name, sep, rest = line.partition(":")
    if not sep or not name:
        raise UsersFileError(f"line {number}: expected user:password-hash")
    if not rest.startswith(PBKDF2 + "$") and not _scram_only(rest):
        # Legacy plain-text line: the whole rest is the password.
        return User(name, rest, {m: make_credential(m, rest) for m in SCRAM_MECHANISMS})
    fields = rest.split()
    scram: dict[str, ScramCredential] = {}
    for item in fields[1:]:
        mech, eq, encoded = item.partition("=")
        if not eq or mech not in HASHES:
            raise UsersFileError(f"line {number}: unknown credential {mech!r}")
        try:
            scram[mech] = ScramCredential.decode(encoded)
        except ValueError:
            raise UsersFileError(f"line {number}: malformed {mech} credential") from None
    return User(name, fields[0], scram)


def _scram_only(rest: str) -> bool:
    return rest == NO_PASSWORD or rest.startswith(NO_PASSWORD + " SCRAM-")


def parse_users(text: str) -> dict[str, User]:
    users: dict[str, User] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line and not line.startswith("#"):
            user = parse_line(number, line)
            users[user.name] = user
    return users


def format_users(users: Iterable[User]) -> str:
    header = "# VDL users: managed with `vdl user add|remove|passwd`; no passwords are stored\n"
    return header + "".join(user.line() + "\n" for user in sorted(users, key=lambda u: u.name))


def read_users_file(path: Path) -> dict[str, User]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsersFileError(f"cannot read users file {path}: {exc.strerror or exc}") from None
    try:
        return parse_users(text)
    except UsersFileError as exc:
        raise UsersFileError(f"users file {path}: {exc}") from None


def write_users_file(path: Path, users: Iterable[User]) -> None:
    """Replace the file atomically, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".users-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(format_users(users))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class UserStore:
    """The users of a node: from a file (re-read on change) or a fixed mapping (tests),
    overridden by the replicated table (`vdl user ... --endpoint`) when ``table`` is set."""

    def __init__(
        self,
        users: Mapping[str, User],
        path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._users = dict(users)
        self.table: UserTable | None = None
        self._path = path
        self._clock = clock
        self._checked = clock()
        self._stamp = self._file_stamp()
        # Decoys for unknown SCRAM users are derived from this, so they are stable per node.
        self._decoy_key = secrets.token_bytes(32)

    @classmethod
    def from_file(cls, path: Path) -> UserStore:
        return cls(read_users_file(path), path)

    @classmethod
    def from_passwords(cls, passwords: Mapping[str, str]) -> UserStore:
        """Plain passwords (legacy callers and tests): hashed on the way in."""
        return cls({name: parse_line(0, f"{name}:{pw}") for name, pw in passwords.items()})

    def _file_stamp(self) -> tuple[int, int] | None:
        if self._path is None:
            return None
        try:
            st = self._path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _refresh(self) -> None:
        if self._path is None or self._clock() - self._checked < _RELOAD_EVERY_S:
            return
        self._checked = self._clock()
        stamp = self._file_stamp()
        if stamp is None or stamp == self._stamp:
            return
        try:
            self._users = read_users_file(self._path)
        except UsersFileError:
            return  # a half-edited file: keep serving the last good set
        self._stamp = stamp

    def names(self) -> list[str]:
        self._refresh()
        if self.table is None:
            return sorted(self._users)
        return sorted((set(self._users) - self.table.removed()) | self.table.names())

    def get(self, name: str) -> User | None:
        self._refresh()
        if self.table is not None:
            known, user = self.table.lookup(name)
            if known:
                return user
        return self._users.get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def legacy_users(self) -> list[str]:
        return sorted(u.name for u in self._users.values() if u.legacy_plaintext)

    def verify_password(self, name: str, password: str) -> bool:
        user = self.get(name)
        # An unknown user costs the same as a known one, so timing does not reveal names.
        stored = user.password_hash if user is not None else _DUMMY_HASH
        return password_matches(stored, password) and user is not None

    def scram_credential(self, name: str, mechanism: str) -> ScramCredential | None:
        user = self.get(name)
        return None if user is None else user.scram.get(mechanism)

    def decoy_credential(self, name: str, mechanism: str) -> ScramCredential:
        salt = hmac.new(self._decoy_key, f"{mechanism}:{name}".encode(), "sha256").digest()
        return ScramCredential(salt[:24], 8192, salt, salt)


_DUMMY_HASH = hash_password("\0", iterations=PBKDF2_ITERATIONS, salt=b"\0" * 16)
