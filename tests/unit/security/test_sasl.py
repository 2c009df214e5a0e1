"""The per-connection SASL state machine and PLAIN parsing."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from vdl.log.error_codes import ErrorCode
from vdl.security.sasl import (
    Authenticated,
    Challenge,
    PasswordCheck,
    SaslError,
    SaslServer,
    State,
    parse_plain,
)
from vdl.security.users import UserStore

MECHS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@pytest.fixture(scope="module")
def users() -> UserStore:
    return UserStore.from_passwords({"alice": "wonderland"})


@pytest.mark.parametrize(
    ("token", "expected"),
    [(b"\0alice\0pw", ("alice", "pw")), (b"alice\0alice\0pw", ("alice", "pw"))],
)
def test_parse_plain(token: bytes, expected: tuple[str, str]) -> None:
    assert parse_plain(token) == expected


@pytest.mark.parametrize(
    "token",
    [b"alice\0pw", b"\0\0pw", b"\0alice\0", b"bob\0alice\0pw", b"\0al\xffice\0pw", b"a\0b\0c\0d"],
)
def test_parse_plain_refuses(token: bytes) -> None:
    with pytest.raises(SaslError) as failure:
        parse_plain(token)
    assert failure.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_plain_flow(users: UserStore) -> None:
    sasl = SaslServer(MECHS, users)
    sasl.handshake("PLAIN", 1)
    step = sasl.authenticate(b"\0alice\0wonderland")
    assert step == PasswordCheck("alice", "wonderland")
    assert users.verify_password(step.user, step.password)
    done = sasl.password_checked(True)
    assert done == Authenticated("User:alice", b"") and sasl.authenticated


def test_plain_wrong_password(users: UserStore) -> None:
    sasl = SaslServer(MECHS, users)
    sasl.handshake("PLAIN", 1)
    step = sasl.authenticate(b"\0alice\0nope")
    assert isinstance(step, PasswordCheck)
    assert not users.verify_password(step.user, step.password)
    with pytest.raises(SaslError) as failure:
        sasl.password_checked(False)
    assert failure.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert sasl.state is State.FAILED and "nope" not in failure.value.message


def _scram_client_final(mechanism: str, password: str, first_bare: str, server_first: str) -> bytes:
    digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        digest, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored = hashlib.new(digest, client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored, auth, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize(("password", "ok"), [("wonderland", True), ("wrong", False)])
def test_scram_flow(users: UserStore, mechanism: str, password: str, ok: bool) -> None:
    sasl = SaslServer(MECHS, users)
    sasl.handshake(mechanism, 1)
    challenge = sasl.authenticate(b"n,,n=alice,r=clientnonce")
    assert isinstance(challenge, Challenge)
    final = _scram_client_final(
        mechanism, password, "n=alice,r=clientnonce", challenge.data.decode()
    )
    if ok:
        done = sasl.authenticate(final)
        assert isinstance(done, Authenticated) and done.principal == "User:alice"
        assert done.data.startswith(b"v=")
    else:
        with pytest.raises(SaslError) as failure:
            sasl.authenticate(final)
        assert failure.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_unsupported_mechanism_lists_enabled(users: UserStore) -> None:
    sasl = SaslServer(("SCRAM-SHA-256",), users)
    with pytest.raises(SaslError) as failure:
        sasl.handshake("PLAIN", 1)
    assert failure.value.code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert "SCRAM-SHA-256" in failure.value.message
    sasl.handshake("SCRAM-SHA-256", 1)  # a retry with an enabled one works


def test_illegal_states(users: UserStore) -> None:
    sasl = SaslServer(MECHS, users)
    with pytest.raises(SaslError) as failure:
        sasl.authenticate(b"\0alice\0wonderland")  # before the handshake
    assert failure.value.code == ErrorCode.ILLEGAL_SASL_STATE
    sasl = SaslServer(MECHS, users)
    sasl.handshake("PLAIN", 1)
    with pytest.raises(SaslError) as failure:
        sasl.handshake("PLAIN", 1)  # twice
    assert failure.value.code == ErrorCode.ILLEGAL_SASL_STATE
    sasl = SaslServer(MECHS, users)
    with pytest.raises(SaslError) as failure:
        sasl.password_checked(True)
    assert failure.value.code == ErrorCode.ILLEGAL_SASL_STATE


def test_v0_handshake_switches_to_raw_tokens(users: UserStore) -> None:
    sasl = SaslServer(MECHS, users)
    sasl.handshake("PLAIN", 0)
    assert sasl.state is State.RAW_TOKENS
