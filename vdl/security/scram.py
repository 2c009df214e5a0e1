"""SCRAM (RFC 5802, RFC 7677): credentials and the server side of one exchange.

Written here rather than taken from a library: the server side is ~100 lines of
``hashlib``/``hmac``, and owning it lets the store keep only the salted keys (never a
password) and lets an unknown user get a plausible challenge (so names cannot be probed).
SASLprep is not applied: names and passwords are compared as UTF-8 bytes, which agrees with
every client for ASCII credentials.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

# Kafka's minimum (ScramMechanism.minIterations); clients refuse fewer.
MIN_ITERATIONS = 4096
# Kafka's maximum (ScramMechanism.maxIterations), enforced on AlterUserScramCredentials.
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 8192

HASHES: dict[str, str] = {
    "SCRAM-SHA-1": "sha1",  # RFC 5802's test vector only; never offered to clients
    "SCRAM-SHA-256": "sha256",
    "SCRAM-SHA-512": "sha512",
}


class ScramError(Exception):
    """The exchange failed; the message is safe to show a client (no secrets in it)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server stores for one user and one mechanism (RFC 5802 §3)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def encode(self) -> str:
        return "$".join(
            [
                str(self.iterations),
                *(_b64(x) for x in (self.salt, self.stored_key, self.server_key)),
            ]
        )

    @classmethod
    def decode(cls, text: str) -> ScramCredential:
        iterations, salt, stored, server = text.split("$")
        return cls(_unb64(salt), int(iterations), _unb64(stored), _unb64(server))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode(), validate=True)


def _hmac(digest: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, digest).digest()


def make_credential(
    mechanism: str,
    password: str,
    *,
    salt: bytes | None = None,
    iterations: int = DEFAULT_ITERATIONS,
) -> ScramCredential:
    digest = HASHES[mechanism]
    salt = salt if salt is not None else secrets.token_bytes(24)
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    return credential_from_salted(mechanism, salt, iterations, salted)


def credential_from_salted(
    mechanism: str, salt: bytes, iterations: int, salted_password: bytes
) -> ScramCredential:
    """The stored form of an already salted password (RFC 5802 §3's SaltedPassword), as a
    Kafka client sends it in AlterUserScramCredentials (KIP-554)."""
    digest = HASHES[mechanism]
    salted = salted_password
    client_key = _hmac(digest, salted, b"Client Key")
    return ScramCredential(
        salt,
        iterations,
        hashlib.new(digest, client_key).digest(),
        _hmac(digest, salted, b"Server Key"),
    )


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError("malformed SCRAM message")
        out.append((part[0], part[2:]))
    return out


def _saslname(text: str) -> str:
    # RFC 5802 §5.1: ',' and '=' arrive as =2C and =3D; any other '=' is an error.
    out = text.replace("=2C", ",").replace("=3D", "=")
    if "=" in text.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed user name")
    return out


CredentialLookup = Callable[[str], ScramCredential | None]


class ScramServer:
    """One server-side exchange: ``first()`` then ``final()``; each raises ScramError.

    ``lookup`` gives a user's credential (None if unknown); ``decoy`` gives a stable fake
    one for unknown users, so the challenge does not reveal whether a name exists.
    """

    def __init__(
        self,
        mechanism: str,
        lookup: CredentialLookup,
        decoy: Callable[[str], ScramCredential],
        *,
        nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._digest = HASHES[mechanism]
        self._lookup = lookup
        self._decoy = decoy
        self._server_nonce = nonce if nonce is not None else secrets.token_urlsafe(18)
        self.user = ""
        self._known = False
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""
        self._gs2_header = ""

    def first(self, message: bytes) -> bytes:
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise ScramError("SCRAM messages are UTF-8") from None
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or flag not in ("n", "y"):
            # 'p' asks for channel binding, which a Kafka listener cannot offer.
            raise ScramError("unsupported GS2 header (channel binding is not supported)")
        self._gs2_header = f"{flag},{authzid},"
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("malformed client-first message")
        if any(key == "m" for key, _ in attrs):
            raise ScramError("mandatory extensions are not supported")
        self.user = _saslname(attrs[0][1])
        if authzid and _saslname(authzid.removeprefix("a=")) != self.user:
            raise ScramError("authorization id must match the user name")
        credential = self._lookup(self.user)
        self._known = credential is not None
        self._credential = credential if credential is not None else self._decoy(self.user)
        self._nonce = attrs[1][1] + self._server_nonce
        self._first_bare = bare
        cred = self._credential
        self._server_first = f"r={self._nonce},s={_b64(cred.salt)},i={cred.iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        cred = self._credential
        if cred is None:
            raise ScramError("client-final before client-first")
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise ScramError("SCRAM messages are UTF-8") from None
        without_proof, sep, proof_attr = text.rpartition(",")
        if not sep or not proof_attr.startswith("p="):
            raise ScramError("malformed client-final message")
        attrs = dict(_attributes(without_proof))
        if attrs.get("r") != self._nonce:
            raise ScramError("nonce mismatch")
        if attrs.get("c") != _b64(self._gs2_header.encode()):
            raise ScramError("channel binding mismatch")
        try:
            proof = _unb64(proof_attr[2:])
        except ValueError:
            raise ScramError("malformed proof") from None
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self._digest, cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        computed = hashlib.new(self._digest, client_key).digest()
        if not hmac.compare_digest(computed, cred.stored_key) or not self._known:
            raise ScramError("invalid credentials")
        server_signature = _hmac(self._digest, cred.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode()
