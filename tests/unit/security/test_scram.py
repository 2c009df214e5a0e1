"""SCRAM against the RFC test vectors, and the server's refusals."""

from __future__ import annotations

import base64

import pytest

from vdl.security.scram import ScramCredential, ScramError, ScramServer, make_credential


def _server(mechanism: str, salt_b64: str, nonce: str, known: bool = True) -> ScramServer:
    credential = make_credential(
        mechanism, "pencil", salt=base64.b64decode(salt_b64), iterations=4096
    )
    return ScramServer(
        mechanism,
        lambda user: credential if known and user == "user" else None,
        lambda user: credential,
        nonce=nonce,
    )


def test_rfc5802_sha1_vector() -> None:
    server = _server("SCRAM-SHA-1", "QSXCR+Q6sek8bf92", "3rfcNHYJY1ZVvWVs7j")
    first = server.first(b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL")
    assert first == b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
    final = server.final(
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    )
    assert final == b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="


def test_rfc7677_sha256_vector() -> None:
    server = _server("SCRAM-SHA-256", "W22ZaJ0SNY7soEsUEjb6gQ==", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    first = server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.final(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.user == "user"


def test_wrong_proof_and_unknown_user_fail_alike() -> None:
    client_final = (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    wrong = client_final[:-8] + b"AAAAAAA="
    server = _server("SCRAM-SHA-256", "W22ZaJ0SNY7soEsUEjb6gQ==", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(ScramError, match="invalid credentials"):
        server.final(wrong)
    # An unknown user gets a normal-looking challenge, then the same refusal.
    unknown = _server(
        "SCRAM-SHA-256", "W22ZaJ0SNY7soEsUEjb6gQ==", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", known=False
    )
    assert unknown.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").startswith(b"r=")
    with pytest.raises(ScramError, match="invalid credentials"):
        unknown.final(client_final)


@pytest.mark.parametrize(
    ("first", "message"),
    [
        (b"p=tls-unique,,n=user,r=abc", "channel binding"),
        (b"n,,r=abc,n=user", "malformed"),
        (b"n,,n=user", "malformed"),
        (b"n,,m=ext,n=user,r=abc", "malformed"),
        (b"n,a=other,n=user,r=abc", "authorization id"),
        (b"n,,n=bad=name,r=abc", "user name"),
        (b"\xff", "UTF-8"),
    ],
)
def test_bad_client_first(first: bytes, message: str) -> None:
    server = _server("SCRAM-SHA-256", "W22ZaJ0SNY7soEsUEjb6gQ==", "n")
    with pytest.raises(ScramError, match=message):
        server.first(first)


def test_nonce_and_binding_must_match() -> None:
    server = _server("SCRAM-SHA-256", "W22ZaJ0SNY7soEsUEjb6gQ==", "srv")
    server.first(b"n,,n=user,r=cli")
    with pytest.raises(ScramError, match="nonce"):
        server.final(b"c=biws,r=other,p=AAAA")
    with pytest.raises(ScramError, match="channel binding"):
        server.final(b"c=eSws,r=clisrv,p=AAAA")


def test_saslname_escapes() -> None:
    server = _server("SCRAM-SHA-256", "W22ZaJ0SNY7soEsUEjb6gQ==", "n")
    server.first(b"n,,n=a=2Cb=3Dc,r=x")
    assert server.user == "a,b=c"


def test_credential_round_trip() -> None:
    credential = make_credential("SCRAM-SHA-512", "pw", iterations=4096)
    assert ScramCredential.decode(credential.encode()) == credential
    assert len(credential.stored_key) == 64
