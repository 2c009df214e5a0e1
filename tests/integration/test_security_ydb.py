"""The YDB half of the security matrix: the official SDK over grpcs with static credentials."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ydb

import vdl.client
from tests.integration.node_process import NodeProcess
from tests.integration.security_support import (
    GROUP_A,
    PASSWORDS,
    TOPIC_A,
    TOPIC_B,
    SecureNode,
    add_users,
    assert_no_passwords,
    start_secure_node,
)
from vdl.client.errors import YdbStatusError

DATABASE = "/local"
PATH_A, PATH_B = f"{DATABASE}/{TOPIC_A}", f"{DATABASE}/{TOPIC_B}"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureNode]:
    node = start_secure_node(tmp_path_factory.mktemp("ydb-sec"), "--login-max-failures", "1000")
    try:
        yield node
    finally:
        node.node.stop(30)


def _driver(secure: SecureNode, user: str | None, password: str | None = None) -> ydb.Driver:
    credentials = None
    if user is not None:
        pw = PASSWORDS[user] if password is None else password
        credentials = ydb.StaticCredentials.from_user_password(user, pw)
    config = ydb.DriverConfig(
        endpoint=secure.grpcs,
        database=DATABASE,
        root_certificates=secure.ca_file.read_bytes(),
        credentials=credentials,
        disable_discovery=True,
    )
    driver = ydb.Driver(driver_config=config)
    driver.wait(timeout=10, fail_fast=True)
    return driver


def _unauthorized(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ydb.Unauthorized | ydb.issues.Unauthenticated):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _write(driver: ydb.Driver, path: str, data: bytes) -> None:
    with driver.topic_client.writer(path, producer_id=f"p-{time.monotonic_ns()}") as writer:
        writer.write_with_ack(ydb.TopicWriterMessage(data), timeout=10)


def _read_until(driver: ydb.Driver, path: str, data: bytes) -> None:
    with driver.topic_client.reader(path, consumer=GROUP_A) as reader:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            batch = reader.receive_batch(timeout=10)
            reader.commit_with_ack(batch)
            if any(m.data == data for m in batch.messages):
                reader.close(timeout=10)
                return
        pytest.fail(f"{data!r} was not read")


def test_user_with_acl_writes_and_reads(secure: SecureNode) -> None:
    driver = _driver(secure, "alice")
    try:
        _write(driver, PATH_A, b"from-ydb")
        _read_until(driver, PATH_A, b"from-ydb")
        described = driver.topic_client.describe_topic(PATH_A)
        assert [c.name for c in described.consumers] == [GROUP_A]
        scheme: Any = driver.scheme_client
        listed = [e.name for e in scheme.list_directory(DATABASE).children]
        assert TOPIC_A in listed and TOPIC_B not in listed
    finally:
        driver.stop(timeout=10)


def test_no_credentials_unauthorized(secure: SecureNode) -> None:
    config = ydb.DriverConfig(
        endpoint=secure.grpcs,
        database=DATABASE,
        root_certificates=secure.ca_file.read_bytes(),
        disable_discovery=True,
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=10)
        with pytest.raises(ydb.Error) as failure:
            driver.topic_client.describe_topic(PATH_A)
        assert _unauthorized(failure.value), failure.value
    finally:
        driver.stop(timeout=10)


def test_wrong_password_unauthorized(secure: SecureNode) -> None:
    credentials = ydb.StaticCredentials.from_user_password("alice", "wrong-password")
    config = ydb.DriverConfig(
        endpoint=secure.grpcs,
        database=DATABASE,
        root_certificates=secure.ca_file.read_bytes(),
        credentials=credentials,
        disable_discovery=True,
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=10)
        with pytest.raises(ydb.Error) as failure:
            driver.topic_client.describe_topic(PATH_A)
        assert _unauthorized(failure.value), failure.value
    finally:
        driver.stop(timeout=10)


def test_valid_user_without_acl_is_unauthorized(secure: SecureNode) -> None:
    driver = _driver(secure, "bob")
    try:
        with pytest.raises(ydb.Error) as failure:
            driver.topic_client.describe_topic(PATH_A)
        assert _unauthorized(failure.value), failure.value
        with pytest.raises(ydb.Error) as failure:
            _write(driver, PATH_A, b"bob")
        assert _unauthorized(failure.value), failure.value
    finally:
        driver.stop(timeout=10)


def test_alice_cannot_touch_topic_b(secure: SecureNode) -> None:
    driver = _driver(secure, "alice")
    try:
        for attempt in (
            lambda: driver.topic_client.describe_topic(PATH_B),
            lambda: _write(driver, PATH_B, b"nope"),
            lambda: _read_until(driver, PATH_B, b"nope"),
            lambda: driver.topic_client.drop_topic(PATH_A),  # delete was never granted
        ):
            with pytest.raises(ydb.Error) as failure:
                attempt()
            assert _unauthorized(failure.value), failure.value
    finally:
        driver.stop(timeout=10)


def test_acl_cli_lists_and_requires_a_privileged_user(secure: SecureNode) -> None:
    listed = secure.vdl("acl", "list")
    assert listed.returncode == 0, listed.stderr
    assert "User:alice" in listed.stdout and TOPIC_A in listed.stdout
    refused = secure.vdl(
        "acl",
        "add",
        "--principal",
        "alice",
        "--topic",
        TOPIC_B,
        "--operation",
        "read",
        user="alice",
    )
    assert refused.returncode == 1 and "UNAUTHORIZED" in refused.stderr


def test_passwords_never_stored_or_logged(secure: SecureNode) -> None:
    assert_no_passwords(secure.node.data_dir, secure.node.log_path, secure.users_file)


# -- token expiry and login throttling, on a node with short limits -------------------------


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    base = tmp_path_factory.mktemp("ydb-expiry")
    users = base / "users"
    add_users(users)
    with NodeProcess(
        base / "data",
        "--users",
        str(users),
        "--superusers",
        "admin",
        "--token-lifetime-ms",
        "2500",
        "--login-max-failures",
        "3",
    ) as node:
        yield node


def test_expired_token_ends_streams_and_calls(short_lived: NodeProcess) -> None:
    credentials = ydb.StaticCredentials.from_user_password("admin", PASSWORDS["admin"])
    config = ydb.DriverConfig(
        endpoint=f"grpc://{short_lived.grpc_address}",
        database=DATABASE,
        credentials=credentials,
        disable_discovery=True,
    )
    driver = ydb.Driver(driver_config=config)
    try:
        driver.wait(timeout=10)
        driver.topic_client.create_topic(f"{DATABASE}/expiry", consumers=["c"])
        writer: Any = driver.topic_client.writer(f"{DATABASE}/expiry", producer_id="p")
        writer.write_with_ack(ydb.TopicWriterMessage(b"before"), timeout=10)
        time.sleep(3)  # the SDK keeps its token for minutes; ours lived 2.5 s
        with pytest.raises(ydb.Error) as failure:
            writer.write_with_ack(ydb.TopicWriterMessage(b"after"), timeout=10)
        assert _unauthorized(failure.value), failure.value
        with pytest.raises(ydb.Error) as failure:
            driver.topic_client.describe_topic(f"{DATABASE}/expiry")
        assert _unauthorized(failure.value), failure.value
        with pytest.raises(ydb.Error) as failure:
            writer.close(flush=False)  # it reports the error that ended its stream
        assert "auth token expired" in str(failure.value)
    finally:
        driver.stop(timeout=10)


async def test_login_failures_are_slowed_not_locked_out(short_lived: NodeProcess) -> None:
    endpoint = f"grpc://{short_lived.grpc_address}"
    for _ in range(5):
        async with vdl.client.connect(endpoint, user="bob", password="bad") as client:
            with pytest.raises(YdbStatusError, match="invalid user or password"):
                await client.admin.list_topics()
    # Past --login-max-failures bob's failures are answered late; his right password, and
    # other users on the same address, still get in.
    assert "answered after" in short_lived.log()
    for user in ("bob", "admin"):
        async with vdl.client.connect(endpoint, user=user, password=PASSWORDS[user]) as client:
            await client.admin.list_topics()


def test_no_passwords_in_short_lived_node(short_lived: NodeProcess, tmp_path: Path) -> None:
    assert_no_passwords(short_lived.data_dir, short_lived.log_path)
