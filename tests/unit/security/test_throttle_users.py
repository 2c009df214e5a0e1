"""Login throttling, the users file, and TLS configuration errors."""

from __future__ import annotations

import os
import threading
from functools import partial
from pathlib import Path

import pytest
import trio
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


def test_throttle_slows_failures_per_address_and_user() -> None:
    clock = _Clock()
    throttle = LoginThrottle(3, 60.0, clock, max_delay_s=4.0)
    assert [throttle.failed("10.0.0.1", "alice") for _ in range(3)] == [0, 0, 0]
    # Beyond max_failures, each further failure waits longer, up to max_delay_s.
    assert [throttle.failed("10.0.0.1", "alice") for _ in range(5)] == [0.5, 1, 2, 4, 4]
    # Another user on the same address, and the same user elsewhere, are not slowed.
    assert throttle.failed("10.0.0.1", "bob") == 0
    assert throttle.failed("10.0.0.2", "alice") == 0
    clock.now += 61
    assert throttle.failed("10.0.0.1", "alice") == 0  # the old failures aged out


def test_throttle_slows_an_address_spraying_names() -> None:
    throttle = LoginThrottle(2, 60.0, _Clock())
    delays = [throttle.failed("10.0.0.1", f"user-{i}") for i in range(21)]
    assert delays[:20] == [0] * 20 and delays[20] > 0
    assert LoginThrottle(0, 60.0, _Clock()).failed("h", "u") == 0  # 0 turns delays off


def test_throttle_memory_is_bounded() -> None:
    throttle = LoginThrottle(1, 60.0, _Clock(), max_tracked=10)
    for i in range(100):
        throttle.failed(f"10.0.0.{i}", "x" * 10_000)
    assert len(throttle._failures) <= 10
    assert all(len(user or "") <= 256 for _, user in throttle._failures)


async def test_password_checks_are_capped_per_address() -> None:
    throttle = LoginThrottle(checks_per_host=2, check_threads=4)
    release = threading.Event()
    running: list[str] = []

    def check(host: str) -> bool:
        running.append(host)
        release.wait(10)
        return True

    async with trio.open_nursery() as nursery:
        for host in ("a", "a", "a", "b"):
            nursery.start_soon(throttle.check_password, host, partial(check, host))
        while len(running) < 3:
            await trio.sleep(0.01)
        await trio.sleep(0.1)
        # Two of a's three checks run, the third waits; b is not behind a.
        assert sorted(running) == ["a", "a", "b"]
        assert throttle.checks_in_progress("a") == 3
        release.set()
    assert throttle.checks_in_progress("a") == 0 and not throttle._checking


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
