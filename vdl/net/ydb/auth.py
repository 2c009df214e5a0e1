"""Static credentials: a users file, ``Ydb.Auth.V1/Login``, and the token every call carries.

The users file has one ``user:password`` per line (``#`` starts a comment, blank lines are
ignored). The password may be stored hashed as ``pbkdf2_sha256$<iterations>$<salt hex>$<hash
hex>`` (see :func:`hash_password`); anything else is compared as plain text.

Tokens are ``v1.<user b64>.<expiry ms>.<HMAC-SHA256 b64>``, signed with a per-node secret
kept in the MetaStore, so they survive a restart and cannot be forged without it. The SDK
refreshes its token every few minutes and treats it as valid for 30 minutes; our lifetime is
longer (12 h) so long-lived streams, which re-authenticate only hourly through
UpdateTokenRequest, are not cut off.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vdl.backends.api import MetaStore
from vdl.net.grpc import ServerContext
from vdl.net.ydb.operation import StatusIds, YdbError
from vdl.net.ydb.protos import ydb_auth_pb2

AUTH_TICKET_HEADER = "x-ydb-auth-ticket"
TOKEN_LIFETIME_MS = 12 * 3600 * 1000
_SECRET_KEY = b"ydb/auth/token-secret"
_PBKDF2 = "pbkdf2_sha256"


class UsersFileError(Exception):
    pass


def hash_password(password: str, *, iterations: int = 200_000, salt: bytes | None = None) -> str:
    """The hashed form of ``password`` for a users file."""
    salt = salt if salt is not None else os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"{_PBKDF2}${iterations}${salt.hex()}${digest.hex()}"


def _password_matches(stored: str, given: str) -> bool:
    if stored.startswith(_PBKDF2 + "$"):
        try:
            _, iterations, salt, expected = stored.split("$")
            digest = hashlib.pbkdf2_hmac(
                "sha256", given.encode(), bytes.fromhex(salt), int(iterations)
            )
        except ValueError:
            return False
        return hmac.compare_digest(digest.hex(), expected)
    return hmac.compare_digest(stored.encode(), given.encode())


def parse_users(text: str) -> dict[str, str]:
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user:
            raise UsersFileError(f"line {number}: expected user:password")
        users[user] = password
    return users


def load_users(path: Path) -> dict[str, str]:
    try:
        return parse_users(path.read_text())
    except OSError as exc:
        raise UsersFileError(f"cannot read users file {path}: {exc}") from None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class TokenSigner:
    secret: bytes

    @classmethod
    def from_meta(cls, meta: MetaStore) -> TokenSigner:
        secret = meta.get(_SECRET_KEY)
        if secret is None:
            secret = secrets.token_bytes(32)
            meta.put(_SECRET_KEY, secret)
        return cls(secret)

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self.secret, body.encode(), hashlib.sha256).digest())

    def issue(self, user: str, now_ms: int, lifetime_ms: int = TOKEN_LIFETIME_MS) -> str:
        body = f"v1.{_b64(user.encode())}.{now_ms + lifetime_ms}"
        return f"{body}.{self._mac(body)}"

    def verify(self, token: str, now_ms: int) -> str:
        """The token's user; raises YdbError UNAUTHORIZED if forged, malformed or expired."""
        body, _, mac = token.rpartition(".")
        parts = body.split(".")
        if len(parts) != 3 or parts[0] != "v1" or not hmac.compare_digest(mac, self._mac(body)):
            raise YdbError(StatusIds.UNAUTHORIZED, "invalid auth token")
        try:
            user = _unb64(parts[1]).decode()
            expires = int(parts[2])
        except ValueError:
            raise YdbError(StatusIds.UNAUTHORIZED, "invalid auth token") from None
        if now_ms >= expires:
            raise YdbError(StatusIds.UNAUTHORIZED, "auth token expired; log in again")
        return user


class Authenticator:
    """Checks ``x-ydb-auth-ticket``; with no users configured, everyone is anonymous."""

    def __init__(
        self, users: Mapping[str, str] | None, signer: TokenSigner, clock_ms: Callable[[], int]
    ) -> None:
        self.users = dict(users) if users is not None else None
        self.signer = signer
        self._clock_ms = clock_ms

    @property
    def enabled(self) -> bool:
        return self.users is not None

    def check_token(self, token: str | None) -> str:
        """The authenticated user ("" when auth is off); raises YdbError UNAUTHORIZED."""
        if self.users is None:
            return ""
        if not token:
            raise YdbError(
                StatusIds.UNAUTHORIZED, f"authentication required ({AUTH_TICKET_HEADER})"
            )
        user = self.signer.verify(token, self._clock_ms())
        if user not in self.users:
            raise YdbError(StatusIds.UNAUTHORIZED, f"user {user!r} no longer exists")
        return user

    def authorize(self, context: ServerContext) -> str:
        return self.check_token(ticket(context))

    def login(self, user: str, password: str) -> str:
        stored = None if self.users is None else self.users.get(user)
        # Compare even for unknown users, so timing does not reveal which names exist.
        if not _password_matches(stored if stored is not None else "\0", password):
            raise YdbError(StatusIds.UNAUTHORIZED, "invalid user or password")
        if stored is None:
            raise YdbError(StatusIds.UNAUTHORIZED, "invalid user or password")
        return self.signer.issue(user, self._clock_ms())

    async def handle_login(self, request: Any, context: ServerContext) -> Any:
        if self.users is None:
            # Without a users file there is nothing to check; hand out a token anyway so
            # clients configured with static credentials still work.
            return ydb_auth_pb2.LoginResult(token=self.signer.issue(request.user, self._clock_ms()))
        return ydb_auth_pb2.LoginResult(token=self.login(request.user, request.password))


def ticket(context: ServerContext) -> str | None:
    for key, value in context.metadata:
        if key == AUTH_TICKET_HEADER:
            return value.decode() if isinstance(value, bytes) else value
    return None
