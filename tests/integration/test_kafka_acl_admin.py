"""Kafka's ACL and SCRAM admin APIs (DescribeAcls, CreateAcls, DeleteAcls,
DescribeUserScramCredentials, AlterUserScramCredentials) on a three-node cluster with SASL
SCRAM and ACLs on: changes made through any node are metadata-group commands, enforced and
listed by every node and by `vdl acl` / `vdl user`; refusals carry Kafka's errors; with
security off the answer is SECURITY_DISABLED."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.admin import KafkaAdminClient
from kafka.admin._acls import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin._acls import ResourceType as KpResourceType
from kafka.errors import ClusterAuthorizationFailedError, SecurityDisabledError

from tests.integration.cluster_support import Cluster
from tests.integration.node_process import NodeProcess
from tests.integration.security_support import PASSWORDS, Pki, add_users
from tests.integration.waiting import wait_until

TIMEOUT = 60
TOPIC = "acl-admin-t"
NEW_USER, NEW_PASSWORD = "erin", "erin-Pw-5v1z"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("acl-admin")
    users = root / "users"
    add_users(users)
    with Cluster(
        root,
        "--users",
        str(users),
        "--superusers",
        "admin",
        "--kafka-sasl-mechanisms",
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "--login-max-failures",
        "1000",
        node_args=Pki(root / "pki").node_args,
    ) as c:
        admin = _admin(c, 1)
        wait_until(lambda: _create_topic(admin), "the topic created", timeout=TIMEOUT, every=0.5)
        yield c


def _config(bootstrap: str, user: str, password: str, mechanism: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "error_cb": lambda err: None,  # authentication failures are expected in places
    }


def _admin(cluster: Cluster, node: int, user: str = "admin") -> AdminClient:
    """An AdminClient that talks to `node` only."""
    return AdminClient(
        _config(cluster.nodes[node].bootstrap, user, PASSWORDS[user], "SCRAM-SHA-256")
    )


def _create_topic(admin: AdminClient) -> bool:
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(timeout=10)
    except KafkaException as exc:
        return bool(exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS)
    return True


def _kafka_python(cluster: Cluster, node: int, user: str = "admin") -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=cluster.nodes[node].bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username=user,
        sasl_plain_password=PASSWORDS[user],
        request_timeout_ms=30000,
    )


def _error(future: Any) -> int:
    """The Kafka error code a future failed with (0 if it did not)."""
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return 0


def _bob_may_describe(cluster: Cluster, node: int) -> bool:
    md = _admin(cluster, node, "bob").list_topics(TOPIC, timeout=10)
    return md.topics[TOPIC].error is None


def _vdl(cluster: Cluster, node: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "vdl.cli",
            *args,
            "--endpoint",
            f"grpc://{cluster.nodes[node].grpc_address}",
            "--user",
            "admin",
        ],
        env={**os.environ, "VDL_PASSWORD": PASSWORDS["admin"]},
        capture_output=True,
        text=True,
        timeout=60,
    )


_KP_ALL = ACLFilter(
    None,
    None,
    ACLOperation.ANY,
    ACLPermissionType.ANY,
    ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY),
)


def _acl_filter(*fields: Any) -> Any:
    """An AclBindingFilter (its stubs do not allow the None that means "any")."""
    make: Any = AclBindingFilter
    return make(*fields)


def _user_futures(futures: Any) -> dict[str, Any]:
    return dict(futures)


_ALL = _acl_filter(
    ResourceType.ANY,
    None,
    ResourcePatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)


BOB_DESCRIBE = AclBinding(
    ResourceType.TOPIC,
    TOPIC,
    ResourcePatternType.LITERAL,
    "User:bob",
    "*",
    AclOperation.DESCRIBE,
    AclPermissionType.ALLOW,
)


def test_confluent_acls_through_a_follower_apply_on_every_node(cluster: Cluster) -> None:
    leader = wait_until(
        lambda: _admin(cluster, 1).list_topics(timeout=10).controller_id, "a controller"
    )
    follower = next(n for n in cluster.nodes if n != leader)
    other = next(n for n in cluster.nodes if n not in (leader, follower))
    assert not _bob_may_describe(cluster, other)

    admin = _admin(cluster, follower)
    assert _error(admin.create_acls([BOB_DESCRIBE])[BOB_DESCRIBE]) == 0
    wait_until(lambda: _bob_may_describe(cluster, other), "bob allowed on another node")

    flt = _acl_filter(
        ResourceType.TOPIC,
        TOPIC,
        ResourcePatternType.MATCH,
        "User:bob",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    for node in cluster.nodes:
        on_node = _admin(cluster, node)  # kept: a future dies with its client

        def described(a: AdminClient = on_node) -> bool:
            return bool(a.describe_acls(flt).result(timeout=30) == [BOB_DESCRIBE])

        wait_until(
            described,
            f"the ACL described by node {node}",
        )
    listed = _vdl(cluster, other, "acl", "list")
    assert listed.returncode == 0, listed.stderr
    assert any(
        line.split() == ["User:bob", "allow", "describe", "topic", TOPIC]
        for line in listed.stdout.splitlines()
    ), listed.stdout

    # What VDL cannot express is refused, never widened: a host, an operation it never checks.
    host = AclBinding(
        ResourceType.TOPIC,
        TOPIC,
        ResourcePatternType.LITERAL,
        "User:bob",
        "10.0.0.1",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    txn = AclBinding(
        ResourceType.TOPIC,
        TOPIC,
        ResourcePatternType.LITERAL,
        "User:bob",
        "*",
        AclOperation.CLUSTER_ACTION,
        AclPermissionType.ALLOW,
    )
    results = admin.create_acls([host, txn])
    assert _error(results[host]) == KafkaError.INVALID_REQUEST
    assert _error(results[txn]) == KafkaError.INVALID_REQUEST
    assert admin.describe_acls(flt).result(timeout=30) == [BOB_DESCRIBE]

    deleted = admin.delete_acls([flt])[flt].result(timeout=30)
    assert deleted == [BOB_DESCRIBE]
    wait_until(
        lambda: _bob_may_describe(cluster, other),
        "bob denied again on another node",
        done=lambda ok: not ok,
    )
    listed = _vdl(cluster, leader, "acl", "list")
    assert "User:bob" not in listed.stdout, listed.stdout


def test_kafka_python_create_describe_delete(cluster: Cluster) -> None:
    client = _kafka_python(cluster, 2)
    try:
        acl = ACL(
            "User:alice",
            "*",
            ACLOperation.READ,
            ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.GROUP, "kp-", ACLResourcePatternType.PREFIXED),
        )
        bad = ACL(
            "User:alice",
            "*",
            ACLOperation.CLUSTER_ACTION,
            ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.CLUSTER, "kafka-cluster"),
        )
        created = client.create_acls([acl, bad])
        assert created["succeeded"] == [acl]
        assert [e.__name__ for e in created["failed"]] == ["InvalidRequestError"]

        flt = ACLFilter(
            None,
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(KpResourceType.GROUP, "kp-group", ACLResourcePatternType.MATCH),
        )
        acls, _ = client.describe_acls(flt)
        assert acls == [acl]
        # A host filter other than '*' matches nothing: no VDL entry has a host.
        on_host = ACLFilter(
            None,
            "10.0.0.1",
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        assert client.describe_acls(on_host)[0] == []

        [(_, matched, error)] = client.delete_acls([flt])
        assert matched == [acl] and error.errno == 0
        assert client.describe_acls(flt)[0] == []
    finally:
        client.close()


def _scram_login(cluster: Cluster, node: int, mechanism: str) -> bool:
    """Does the new user get in? Answered on the first success or authentication error,
    rather than at the end of a metadata timeout."""
    refused: list[KafkaError] = []
    config = _config(cluster.nodes[node].bootstrap, NEW_USER, NEW_PASSWORD, mechanism)
    config["error_cb"] = lambda err: refused.append(err)
    client = AdminClient(config)
    for _ in range(40):
        try:
            client.list_topics(timeout=0.5)
        except KafkaException:
            client.poll(0)  # serves error_cb
            if any(e.code() == KafkaError._AUTHENTICATION for e in refused):
                return False
            continue
        return True
    raise AssertionError(f"no answer to {NEW_USER}'s login: {refused}")


def test_scram_credentials_made_through_kafka(cluster: Cluster) -> None:
    admin = _admin(cluster, 2)
    upsert = UserScramCredentialUpsertion(
        NEW_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), NEW_PASSWORD.encode()
    )
    assert _error(admin.alter_user_scram_credentials([upsert])[NEW_USER]) == 0
    wait_until(lambda: _scram_login(cluster, 3, "SCRAM-SHA-256"), "the new user's SCRAM on node 3")
    # Only the SCRAM-SHA-256 credential was given: no other mechanism lets the user in.
    assert not _scram_login(cluster, 3, "SCRAM-SHA-512")
    assert not _scram_login(cluster, 3, "PLAIN")

    described = _user_futures(admin.describe_user_scram_credentials([NEW_USER]))[NEW_USER].result(
        timeout=30
    )
    [info] = described.scram_credential_infos
    assert (info.mechanism, info.iterations) == (ScramMechanism.SCRAM_SHA_256, 8192)
    listed = _vdl(cluster, 1, "user", "list")
    assert NEW_USER in listed.stdout.split(), listed.stderr

    # Kafka's refusals, then a legitimate request is still served.
    weak = UserScramCredentialUpsertion(
        "frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 1000), b"frank-Pw"
    )
    assert (
        _error(admin.alter_user_scram_credentials([weak])["frank"])
        == KafkaError.UNACCEPTABLE_CREDENTIAL
    )
    missing = _user_futures(admin.describe_user_scram_credentials(["nobody"]))["nobody"]
    assert _error(missing) == KafkaError.RESOURCE_NOT_FOUND
    gone = UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)
    assert (
        _error(admin.alter_user_scram_credentials([gone])["nobody"])
        == KafkaError.RESOURCE_NOT_FOUND
    )
    client = _kafka_python(cluster, 1)
    try:
        twice = client.alter_user_scram_credentials(
            [_kp_upsertion(NEW_USER, 8192), _kp_upsertion(NEW_USER, 4096)]
        )
        assert "twice" in (twice[NEW_USER] or ""), twice
        everyone = client.describe_user_scram_credentials()
        assert {"admin", "alice", "bob", NEW_USER} <= set(everyone)
    finally:
        client.close()

    delete = UserScramCredentialDeletion(NEW_USER, ScramMechanism.SCRAM_SHA_256)
    assert _error(admin.alter_user_scram_credentials([delete])[NEW_USER]) == 0
    wait_until(
        lambda: _scram_login(cluster, 1, "SCRAM-SHA-256"),
        "the removed user refused on node 1",
        done=lambda ok: not ok,
    )


def _kp_upsertion(user: str, iterations: int) -> Any:
    from kafka.admin._users import ScramMechanism as KpMechanism
    from kafka.admin._users import UserScramCredentialUpsertion as KpUpsertion

    return KpUpsertion(user, KpMechanism.SCRAM_SHA_256, NEW_PASSWORD, iterations=iterations)


def _every_admin_request_refused(
    admin: AdminClient, client: KafkaAdminClient, code: int, error: type[Exception]
) -> None:
    """DescribeAcls, CreateAcls, DeleteAcls and AlterUserScramCredentials are each answered
    with `code`: through kafka-python's `client` (closed here) for DescribeAcls, whose
    top-level error librdkafka drops (an empty list), through `admin` for the others."""
    try:
        with pytest.raises(error):
            client.describe_acls(_KP_ALL)
    finally:
        client.close()
    assert _error(admin.create_acls([BOB_DESCRIBE])[BOB_DESCRIBE]) == code
    assert _error(admin.delete_acls([_ALL])[_ALL]) == code
    upsert = UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"new-bob-Pw"
    )
    assert _error(admin.alter_user_scram_credentials([upsert])["bob"]) == code


def test_a_user_without_alter_on_the_cluster_is_refused(cluster: Cluster) -> None:
    bob = _admin(cluster, 1, "bob")
    denied = KafkaError.CLUSTER_AUTHORIZATION_FAILED
    _every_admin_request_refused(
        bob, _kafka_python(cluster, 1, "bob"), denied, ClusterAuthorizationFailedError
    )
    assert _error(_user_futures(bob.describe_user_scram_credentials(["bob"]))["bob"]) == denied
    # Nothing changed: bob still logs in with his password, and is still not allowed.
    assert not _bob_may_describe(cluster, 1)


def test_with_security_off_the_answer_is_security_disabled(tmp_path: Path) -> None:
    with NodeProcess(tmp_path / "data") as node:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        _every_admin_request_refused(
            admin,
            KafkaAdminClient(bootstrap_servers=node.bootstrap),
            KafkaError.SECURITY_DISABLED,
            SecurityDisabledError,
        )
        # The node still serves: its metadata is there.
        assert admin.list_topics(timeout=10).brokers
