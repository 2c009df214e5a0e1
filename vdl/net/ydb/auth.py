"""Static credentials for YDB: ``Ydb.Auth.V1/Login``, the token every call carries, and the
per-call authorization against the node's ACLs.

Users live in the node's one user store (:mod:`vdl.security.users`, shared with Kafka SASL).
Tokens are ``v1.<user b64>.<expiry ms>.<HMAC-SHA256 b64>``, signed with a per-node secret
kept in the MetaStore, so they survive a restart and cannot be forged without it. Their
lifetime is configurable (``token-lifetime-ms``, 12 h by default: the SDK refreshes its token
every few minutes, but open streams only renew through UpdateTokenRequest, hourly). A stream
whose token expires without renewal ends with UNAUTHORIZED (:class:`StreamAuth`).

Refusals count in ``ydb_authentication_failures{reason}``: ``login`` for a Login with a
wrong user or password, ``token`` for a call or stream whose token is missing, forged,
expired (a stream's too) or of a user that no longer exists. ACL denials are not
authentication failures and are not counted there.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from vdl.backends.api import MetaStore
from vdl.metrics.stages import STAGES
from vdl.net.grpc import ServerContext
from vdl.net.ydb.operation import StatusIds, YdbError
from vdl.net.ydb.protos import ydb_auth_pb2
from vdl.security.acl import Operation, ResourceType
from vdl.security.sasl import principal_of
from vdl.security.service import Security
from vdl.security.throttle import host_of
from vdl.security.users import (
    User,
    UsersFileError,
    UserStore,
    hash_password,
    parse_users,
    read_users_file,
)

__all__ = [
    "AUTH_TICKET_HEADER",
    "Authenticator",
    "StreamAuth",
    "TokenSigner",
    "UsersFileError",
    "hash_password",
    "load_users",
    "parse_users",
    "ticket",
]

log = logging.getLogger(__name__)

AUTH_TICKET_HEADER = "x-ydb-auth-ticket"
TOKEN_LIFETIME_MS = 12 * 3600 * 1000
_SECRET_KEY = b"ydb/auth/token-secret"
# An expiring stream re-checks at least this often, in case its token was replaced.
_EXPIRY_POLL_S = 60.0

_LOGIN_FAILURES = STAGES.counter("ydb_authentication_failures", reason="login")
_TOKEN_FAILURES = STAGES.counter("ydb_authentication_failures", reason="token")


def load_users(path: Any) -> dict[str, User]:
    return read_users_file(path)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class Identity:
    user: str
    expires_ms: int

    @property
    def principal(self) -> str:
        return principal_of(self.user)


class TokenSigner:
    """Issues and checks login tokens (HMAC-SHA256 over user and expiry).

    Each node starts with a secret of its own; on a cluster, the metadata group hands every
    node one shared secret (`adopt`, from `vdl.cluster.token_key_commands`), so a token from
    one node's Login works on every node, as the SDK expects after discovery. Tokens made
    with the node's own secret before that stay valid until they expire.
    """

    __slots__ = ("_accepted", "secret")

    def __init__(self, secret: bytes, *older: bytes) -> None:
        self.secret = secret
        self._accepted = (secret, *older)

    @classmethod
    def from_meta(cls, meta: MetaStore) -> TokenSigner:
        secret = meta.get(_SECRET_KEY)
        if secret is None:
            secret = secrets.token_bytes(32)
            meta.put(_SECRET_KEY, secret)
        return cls(secret)

    def adopt(self, shared: bytes) -> None:
        """Issue with the cluster's shared secret from now on; keep accepting the old."""
        if shared != self.secret:
            self._accepted = (shared, *self._accepted)
            self.secret = shared

    @staticmethod
    def _mac(secret: bytes, body: str) -> str:
        return _b64(hmac.new(secret, body.encode(), hashlib.sha256).digest())

    def issue(self, user: str, now_ms: int, lifetime_ms: int = TOKEN_LIFETIME_MS) -> str:
        body = f"v1.{_b64(user.encode())}.{now_ms + lifetime_ms}"
        return f"{body}.{self._mac(self.secret, body)}"

    def identify(self, token: str, now_ms: int) -> Identity:
        """Raises YdbError UNAUTHORIZED if the token is forged, malformed or expired."""
        body, _, mac = token.rpartition(".")
        parts = body.split(".")
        signed = any(hmac.compare_digest(mac, self._mac(key, body)) for key in self._accepted)
        if len(parts) != 3 or parts[0] != "v1" or not signed:
            raise YdbError(StatusIds.UNAUTHORIZED, "invalid auth token")
        try:
            identity = Identity(_unb64(parts[1]).decode(), int(parts[2]))
        except ValueError:
            raise YdbError(StatusIds.UNAUTHORIZED, "invalid auth token") from None
        if now_ms >= identity.expires_ms:
            raise YdbError(StatusIds.UNAUTHORIZED, "auth token expired; log in again")
        return identity

    def verify(self, token: str, now_ms: int) -> str:
        return self.identify(token, now_ms).user


UsersArg = UserStore | Mapping[str, User] | Mapping[str, str] | None


def _store(users: UsersArg) -> UserStore | None:
    if users is None or isinstance(users, UserStore):
        return users
    if all(isinstance(v, User) for v in users.values()):
        return UserStore({k: v for k, v in users.items() if isinstance(v, User)})
    return UserStore.from_passwords({k: str(v) for k, v in users.items()})


class Authenticator:
    """Checks ``x-ydb-auth-ticket`` and ACLs; with no users configured, everyone is let in."""

    def __init__(
        self,
        users: UsersArg,
        signer: TokenSigner,
        clock_ms: Callable[[], int],
        *,
        security: Security | None = None,
        token_lifetime_ms: int = TOKEN_LIFETIME_MS,
    ) -> None:
        self.users = _store(users)
        self.signer = signer
        self._clock_ms = clock_ms
        self.security = security if security is not None else Security(users=self.users)
        self.token_lifetime_ms = token_lifetime_ms

    @property
    def enabled(self) -> bool:
        return self.users is not None

    def now_ms(self) -> int:
        return self._clock_ms()

    def identify(self, token: str | None) -> Identity | None:
        """Who the token belongs to (None when auth is off); raises YdbError UNAUTHORIZED."""
        if self.users is None:
            return None
        try:
            if not token:
                raise YdbError(
                    StatusIds.UNAUTHORIZED, f"authentication required ({AUTH_TICKET_HEADER})"
                )
            identity = self.signer.identify(token, self._clock_ms())
            if identity.user not in self.users:
                raise YdbError(StatusIds.UNAUTHORIZED, f"user {identity.user!r} no longer exists")
        except YdbError:
            _TOKEN_FAILURES.inc()
            raise
        return identity

    def check_token(self, token: str | None) -> str:
        """The authenticated user ("" when auth is off); raises YdbError UNAUTHORIZED."""
        identity = self.identify(token)
        return "" if identity is None else identity.user

    def authorize(self, context: ServerContext) -> str:
        return self.check_token(ticket(context))

    def require(
        self,
        identity: Identity | None,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> None:
        """Raise YdbError UNAUTHORIZED unless the ACLs allow it."""
        principal = None if identity is None else identity.principal
        if not self.security.authorizer.allowed(principal, operation, resource_type, name):
            raise YdbError(
                StatusIds.UNAUTHORIZED,
                f"{principal or 'anonymous'} may not {operation} {resource_type} {name!r}",
            )

    def may_create_topic(self, identity: Identity | None, name: str) -> None:
        principal = None if identity is None else identity.principal
        if not self.security.authorizer.may_create_topic(principal, name):
            raise YdbError(StatusIds.UNAUTHORIZED, f"{principal} may not create topic {name!r}")

    def allowed(self, identity: Identity | None, operation: Operation, name: str) -> bool:
        principal = None if identity is None else identity.principal
        return self.security.authorizer.topic(principal, operation, name)

    def login(self, user: str, password: str, peer: str = "") -> str:
        """A token for valid credentials; raises YdbError UNAUTHORIZED. Synchronous (the
        slow check runs here): the Login RPC goes through ``handle_login`` instead."""
        if self.users is not None and not self.users.verify_password(user, password):
            self._refuse(user, peer)
            raise YdbError(StatusIds.UNAUTHORIZED, "invalid user or password")
        return self.signer.issue(user, self._clock_ms(), self.token_lifetime_ms)

    def _refuse(self, user: str, peer: str) -> float:
        _LOGIN_FAILURES.inc()
        delay = self.security.throttle.failed(host_of(peer), user) if peer else 0.0
        log.warning(
            "Login from %s failed for user %r%s",
            peer or "?",
            user,
            f" (answered after {delay:.1f} s)" if delay else "",
        )
        return delay

    async def handle_login(self, request: Any, context: ServerContext) -> Any:
        store = self.users
        user, password = request.user, request.password
        if store is not None:
            # The pbkdf2 check takes tens of milliseconds: on the password-check threads,
            # in this address's turn (throttle.py); a failure's answer may be held back.
            host = host_of(context.peer) if context.peer else ""
            ok = await self.security.throttle.check_password(
                host, lambda: store.verify_password(user, password)
            )
            if not ok:
                await trio.sleep(self._refuse(user, context.peer))
                raise YdbError(StatusIds.UNAUTHORIZED, "invalid user or password")
        token = self.signer.issue(user, self._clock_ms(), self.token_lifetime_ms)
        return ydb_auth_pb2.LoginResult(token=token)


class StreamAuth:
    """A topic stream's identity: renewed by UpdateTokenRequest, enforced until expiry."""

    def __init__(self, auth: Authenticator, context: ServerContext) -> None:
        self._auth = auth
        self.identity = auth.identify(ticket(context))

    def update(self, token: str) -> None:
        if not self._auth.enabled:
            return
        identity = self._auth.identify(token)
        assert identity is not None
        if self.identity is not None and identity.user != self.identity.user:
            _TOKEN_FAILURES.inc()
            raise YdbError(StatusIds.UNAUTHORIZED, "a stream cannot change its user")
        self.identity = identity

    async def watch_expiry(self) -> None:
        """Raise YdbError UNAUTHORIZED once the current token has expired."""
        while self.identity is not None:
            left_ms = self.identity.expires_ms - self._auth.now_ms()
            if left_ms <= 0:
                _TOKEN_FAILURES.inc()
                raise YdbError(
                    StatusIds.UNAUTHORIZED, "auth token expired; renew it (UpdateTokenRequest)"
                )
            await trio.sleep(min(left_ms / 1000, _EXPIRY_POLL_S))
        await trio.sleep_forever()


def ticket(context: ServerContext) -> str | None:
    for key, value in context.metadata:
        if key == AUTH_TICKET_HEADER:
            return value.decode() if isinstance(value, bytes) else value
    return None
