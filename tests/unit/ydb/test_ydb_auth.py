"""Users file, signed expiring tokens, and topic paths."""

from __future__ import annotations

import pytest

from vdl.net.ydb.auth import (
    Authenticator,
    TokenSigner,
    UsersFileError,
    hash_password,
    parse_users,
)
from vdl.net.ydb.operation import StatusIds, YdbError
from vdl.net.ydb.paths import topic_name


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _auth(clock: _Clock) -> Authenticator:
    users = parse_users(f"# comment\n\nalice:secret\nbob:{hash_password('pw', iterations=1000)}\n")
    return Authenticator(users, TokenSigner(b"k" * 32), clock)


def test_login_and_token_check() -> None:
    clock = _Clock()
    auth = _auth(clock)
    assert auth.check_token(auth.login("alice", "secret")) == "alice"
    assert auth.check_token(auth.login("bob", "pw")) == "bob"
    for user, password in [("alice", "nope"), ("carol", "secret"), ("bob", "")]:
        with pytest.raises(YdbError) as failure:
            auth.login(user, password)
        assert failure.value.status == StatusIds.UNAUTHORIZED


def test_tokens_expire_and_cannot_be_forged() -> None:
    clock = _Clock()
    auth = _auth(clock)
    token = auth.login("alice", "secret")
    other = Authenticator(auth.users, TokenSigner(b"x" * 32), clock)
    for bad in [
        None,
        "",
        "garbage",
        token + "x",
        token.replace("v1.", "v2."),
        other.login("alice", "secret"),
    ]:
        with pytest.raises(YdbError):
            auth.check_token(bad)
    clock.now += 13 * 3600 * 1000
    with pytest.raises(YdbError, match="expired"):
        auth.check_token(token)


def test_auth_off_lets_everyone_in() -> None:
    auth = Authenticator(None, TokenSigner(b"k" * 32), _Clock())
    assert not auth.enabled
    assert auth.check_token(None) == ""


def test_users_file_errors() -> None:
    with pytest.raises(UsersFileError, match="line 2"):
        parse_users("a:b\nno-colon\n")


@pytest.mark.parametrize(
    ("path", "name"), [("/local/orders", "orders"), ("orders", "orders"), ("/local/a.b-c", "a.b-c")]
)
def test_topic_paths(path: str, name: str) -> None:
    assert topic_name(path, "/local") == name


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/other/orders", StatusIds.SCHEME_ERROR),
        ("/local/dir/orders", StatusIds.SCHEME_ERROR),
        ("/local/bad name", StatusIds.BAD_REQUEST),
        ("", StatusIds.BAD_REQUEST),
    ],
)
def test_bad_topic_paths(path: str, status: StatusIds) -> None:
    with pytest.raises(YdbError) as failure:
        topic_name(path, "/local")
    assert failure.value.status == status
