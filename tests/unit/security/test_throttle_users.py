"""Login throttling, the users file, and TLS configuration errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trustme

from vdl.security.commands import user_add, user_passwd, user_remove
from vdl.security.throttle import LoginThrottle, host_of
from vdl.security.tls import TlsConfigError, server_context
from vdl.security.users import UsersFileError, UserStore, parse_users, read_users_file


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_throttle_denies_after_n_failures_per_window() -> None:
    clock = _Clock()
    throttle = LoginThrottle(3, 60.0, clock)
    for _ in range(3):
        assert throttle.retry_after("10.0.0.1") == 0
        throttle.failed("10.0.0.1")
        clock.now += 1
    assert throttle.retry_after("10.0.0.1") == pytest.approx(57.0)
    assert throttle.retry_after("10.0.0.2") == 0  # per address
    clock.now += 58
    assert throttle.retry_after("10.0.0.1") == 0  # the oldest failure aged out


def test_throttle_memory_is_bounded() -> None:
    throttle = LoginThrottle(1, 60.0, _Clock(), max_tracked=10)
    for i in range(100):
        throttle.failed(f"10.0.0.{i}")
    assert len(throttle._failures) == 10


@pytest.mark.parametrize(
    ("peer", "host"),
    [("1.2.3.4:5", "1.2.3.4"), ("[::1]:5", "::1"), ("ipv4:1.2.3.4:5", "1.2.3.4"), ("x", "x")],
)
def test_host_of(peer: str, host: str) -> None:
    assert host_of(peer) == host


def test_users_file_commands_store_no_passwords(tmp_path: Path) -> None:
    path = tmp_path / "users"
    user_add(path, "alice", "s3cret-pw")
    user_add(path, "bob", "other-pw")
    assert b"s3cret-pw" not in path.read_bytes()
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    with pytest.raises(UsersFileError, match="already exists"):
        user_add(path, "alice", "x")
    store = UserStore.from_file(path)
    assert store.verify_password("alice", "s3cret-pw") and not store.verify_password("alice", "x")
    assert store.scram_credential("alice", "SCRAM-SHA-512") is not None
    user_passwd(path, "alice", "new-pw")
    user_remove(path, "bob")
    users = read_users_file(path)
    assert sorted(users) == ["alice"]
    assert UserStore(users).verify_password("alice", "new-pw")
    with pytest.raises(UsersFileError):
        user_remove(path, "bob")
    with pytest.raises(UsersFileError, match="invalid user name"):
        user_add(path, "a:b", "x")


def test_store_reloads_changed_file(tmp_path: Path) -> None:
    path = tmp_path / "users"
    user_add(path, "alice", "pw1")
    clock = _Clock()
    store = UserStore(read_users_file(path), path, clock)
    user_add(path, "carol", "pw2")
    assert store.get("carol") is None  # checked at most once a second
    clock.now += 2
    assert store.get("carol") is not None


def test_legacy_plain_lines_still_work() -> None:
    users = parse_users("# c\nalice:plain pw\n")
    store = UserStore(users)
    assert store.legacy_users() == ["alice"]
    assert store.verify_password("alice", "plain pw")
    assert store.scram_credential("alice", "SCRAM-SHA-256") is not None
    with pytest.raises(UsersFileError, match="line 1"):
        parse_users("no-colon")


def test_tls_errors_are_one_line(tmp_path: Path) -> None:
    ca = trustme.CA()
    one, two = ca.issue_cert("localhost"), ca.issue_cert("localhost")
    cert, key, other_key = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "k2.pem"
    one.cert_chain_pems[0].write_to_path(str(cert))
    one.private_key_pem.write_to_path(str(key))
    two.private_key_pem.write_to_path(str(other_key))
    server_context(cert, key)
    cases = [
        (cert, other_key, "does not match"),
        (tmp_path / "missing.pem", key, "does not exist"),
        (key, key, "cannot use TLS certificate"),
    ]
    for cert_file, key_file, message in cases:
        with pytest.raises(TlsConfigError, match=message) as failure:
            server_context(cert_file, key_file)
        assert "\n" not in str(failure.value)
    with pytest.raises(TlsConfigError, match="client CA"):
        server_context(cert, key, client_ca=tmp_path / "nope.pem")
