"""The SASL exchange of one Kafka connection, as a sans-I/O state machine (KIP-43, KIP-152).

The connection feeds it SaslHandshake and SaslAuthenticate payloads (or, after a v0
handshake, the raw tokens that follow it) and sends back what it returns. PLAIN's password
check is slow on purpose (pbkdf2), so it is handed back to the caller as a
:class:`PasswordCheck` to run off the event loop, then reported with ``password_checked``.

States: HANDSHAKE -> AUTHENTICATE (v1) or RAW_TOKENS (v0) -> DONE; any failure -> FAILED,
after which the connection is closed (Kafka does the same).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from vdl.log.error_codes import ErrorCode
from vdl.security.scram import HASHES, ScramError, ScramServer
from vdl.security.users import UserStore

PLAIN = "PLAIN"
MECHANISMS = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslError(Exception):
    """Refuse the step with ``code``; ``message`` is safe to send to the client."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW_TOKENS = "raw-tokens"
    CHECKING = "checking"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Challenge:
    """Send ``data`` and wait for the client's next token."""

    data: bytes


@dataclass(frozen=True, slots=True)
class PasswordCheck:
    """Check ``password`` for ``user`` (slowly, off the loop), then call password_checked."""

    user: str
    password: str


@dataclass(frozen=True, slots=True)
class Authenticated:
    """Done: send ``data`` (may be empty); the connection now acts as ``principal``."""

    principal: str
    data: bytes


Step = Challenge | PasswordCheck | Authenticated


def parse_plain(token: bytes) -> tuple[str, str]:
    """RFC 4616: ``[authzid] NUL authcid NUL passwd`` -> (user, password)."""
    parts = token.split(b"\0")
    if len(parts) != 3:
        raise SaslError(ErrorCode.SASL_AUTHENTICATION_FAILED, "malformed PLAIN token")
    try:
        authzid, user, password = (p.decode() for p in parts)
    except UnicodeDecodeError:
        raise SaslError(ErrorCode.SASL_AUTHENTICATION_FAILED, "PLAIN token is not UTF-8") from None
    if not user or not password:
        raise SaslError(ErrorCode.SASL_AUTHENTICATION_FAILED, "empty user or password")
    if authzid and authzid != user:
        raise SaslError(
            ErrorCode.SASL_AUTHENTICATION_FAILED, "authorization id must match the user name"
        )
    return user, password


def principal_of(user: str) -> str:
    return f"User:{user}"


class SaslServer:
    def __init__(self, mechanisms: Sequence[str], users: UserStore) -> None:
        self.mechanisms = tuple(mechanisms)
        self._users = users
        self.state = State.HANDSHAKE
        self.mechanism = ""
        self.principal: str | None = None
        self._scram: ScramServer | None = None
        self._scram_round = 0
        self.user = ""  # the name being tried, for logs (never the password)

    @property
    def authenticated(self) -> bool:
        return self.state is State.DONE

    def _fail(self, code: ErrorCode, message: str) -> SaslError:
        self.state = State.FAILED
        return SaslError(code, message)

    def handshake(self, mechanism: str, version: int) -> None:
        """Accept the mechanism or raise SaslError (UNSUPPORTED_SASL_MECHANISM names ours)."""
        if self.state is not State.HANDSHAKE:
            raise self._fail(ErrorCode.ILLEGAL_SASL_STATE, "unexpected SaslHandshake")
        if mechanism not in self.mechanisms:
            # The state stays HANDSHAKE: a client may retry with one of ours.
            raise SaslError(
                ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                f"unsupported mechanism {mechanism!r}; enabled: {', '.join(self.mechanisms)}",
            )
        self.mechanism = mechanism
        if mechanism in HASHES:
            self._scram = ScramServer(
                mechanism,
                lambda user: self._users.scram_credential(user, mechanism),
                lambda user: self._users.decoy_credential(user, mechanism),
            )
        self.state = State.AUTHENTICATE if version >= 1 else State.RAW_TOKENS

    def authenticate(self, token: bytes) -> Step:
        if self.state not in (State.AUTHENTICATE, State.RAW_TOKENS):
            raise self._fail(
                ErrorCode.ILLEGAL_SASL_STATE, f"unexpected SASL token in state {self.state.value}"
            )
        if self.mechanism == PLAIN:
            try:
                user, password = parse_plain(token)
            except SaslError as exc:
                raise self._fail(exc.code, exc.message) from None
            self.user = user
            self.state = State.CHECKING
            return PasswordCheck(user, password)
        assert self._scram is not None
        try:
            if self._scram_round == 0:
                self._scram_round = 1
                challenge = self._scram.first(token)
                self.user = self._scram.user
                return Challenge(challenge)
            final = self._scram.final(token)
        except ScramError as exc:
            raise self._fail(
                ErrorCode.SASL_AUTHENTICATION_FAILED, f"authentication failed: {exc}"
            ) from None
        return self._done(self._scram.user, final)

    def password_checked(self, ok: bool) -> Authenticated:
        if self.state is not State.CHECKING:
            raise self._fail(ErrorCode.ILLEGAL_SASL_STATE, "no password check in progress")
        if not ok:
            raise self._fail(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                "authentication failed: invalid user name or password",
            )
        return self._done(self.user, b"")

    def _done(self, user: str, data: bytes) -> Authenticated:
        self.state = State.DONE
        self.principal = principal_of(user)
        return Authenticated(self.principal, data)

    def refuse(self, message: str) -> SaslError:
        """Fail the exchange for a reason outside SASL (e.g. login throttling)."""
        return self._fail(ErrorCode.SASL_AUTHENTICATION_FAILED, message)
