"""The authorizer: matching, implication, deny precedence, superusers, default deny."""

from __future__ import annotations

import pytest

from vdl.security.acl import (
    CLUSTER_NAME,
    AclEntry,
    AclError,
    Authorizer,
    Operation,
    Pattern,
    Permission,
    ResourceType,
    normalize_principal,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALICE, BOB = "User:alice", "User:bob"


def _auth(*entries: AclEntry, superusers: tuple[str, ...] = ("admin",)) -> Authorizer:
    return Authorizer(entries, superusers)


def test_default_deny_and_superuser() -> None:
    auth = _auth()
    assert not auth.topic(ALICE, Operation.READ, "a")
    assert not auth.topic(None, Operation.READ, "a")  # anonymous
    assert auth.topic("User:admin", Operation.DELETE, "anything")
    assert Authorizer((), enabled=False).topic(None, Operation.DELETE, "a")


def test_literal_prefixed_and_wildcard() -> None:
    auth = _auth(
        AclEntry(ALICE, T, "orders", Operation.READ),
        AclEntry(ALICE, T, "logs-", Operation.WRITE, pattern=Pattern.PREFIXED),
        AclEntry("User:*", T, "*", Operation.DESCRIBE),
        AclEntry(BOB, G, "g1", Operation.READ),
    )
    assert auth.topic(ALICE, Operation.READ, "orders")
    assert not auth.topic(ALICE, Operation.READ, "orders2")
    assert auth.topic(ALICE, Operation.WRITE, "logs-app")
    assert not auth.topic(ALICE, Operation.WRITE, "log")
    assert auth.topic(BOB, Operation.DESCRIBE, "whatever")
    assert not auth.topic(BOB, Operation.READ, "orders")
    assert auth.group(BOB, Operation.READ, "g1") and not auth.group(ALICE, Operation.READ, "g1")


def test_implications_and_all() -> None:
    auth = _auth(
        AclEntry(ALICE, T, "a", Operation.WRITE),
        AclEntry(BOB, T, "a", Operation.ALL),
    )
    assert auth.topic(ALICE, Operation.DESCRIBE, "a")  # write implies describe
    assert not auth.topic(ALICE, Operation.READ, "a")
    assert not auth.topic(ALICE, Operation.DELETE, "a")
    for op in Operation:
        assert auth.topic(BOB, op, "a")


def test_deny_wins() -> None:
    auth = _auth(
        AclEntry(ALICE, T, "*", Operation.ALL),
        AclEntry(ALICE, T, "secret", Operation.READ, Permission.DENY),
        AclEntry(BOB, T, "*", Operation.READ),
        AclEntry("User:*", T, "x", Operation.ALL, Permission.DENY),
    )
    assert not auth.topic(ALICE, Operation.READ, "secret")
    assert auth.topic(ALICE, Operation.WRITE, "secret")  # only read was denied
    assert not auth.topic(BOB, Operation.READ, "x") and not auth.topic(
        ALICE, Operation.DESCRIBE, "x"
    )


def test_create_via_cluster_or_topic() -> None:
    auth = _auth(
        AclEntry(ALICE, C, CLUSTER_NAME, Operation.CREATE),
        AclEntry(BOB, T, "bob-", Operation.CREATE, pattern=Pattern.PREFIXED),
    )
    assert auth.may_create_topic(ALICE, "any")
    assert auth.may_create_topic(BOB, "bob-1") and not auth.may_create_topic(BOB, "x")


def test_entries_round_trip_and_validate() -> None:
    entry = AclEntry(ALICE, G, "g", Operation.READ, Permission.DENY, Pattern.PREFIXED)
    assert AclEntry.from_json(entry.to_json()) == entry
    with pytest.raises(AclError):
        AclEntry(ALICE, C, "other", Operation.ALTER)
    with pytest.raises(AclError):
        AclEntry.from_json('{"principal": "alice"}')
    assert normalize_principal("alice") == ALICE and normalize_principal("*") == "User:*"
    with pytest.raises(AclError):
        normalize_principal("Group:x")


def test_write_on_some_topic_by_resource_type() -> None:
    W, D = Operation.WRITE, Permission.DENY
    assert not _auth().may_write_some_topic(ALICE)
    assert _auth().may_write_some_topic("User:admin")
    assert not _auth(AclEntry(ALICE, T, "a", Operation.READ)).may_write_some_topic(ALICE)
    assert _auth(AclEntry(ALICE, T, "a", W)).may_write_some_topic(ALICE)
    assert _auth(AclEntry("User:*", T, "a", Operation.ALL)).may_write_some_topic(ALICE)
    assert not _auth(
        AclEntry(ALICE, T, "a", W), AclEntry(ALICE, T, "a", W, D)
    ).may_write_some_topic(ALICE)
    # A prefixed deny covers the literal and narrower prefixes under it, not wider ones.
    deny_p = AclEntry(ALICE, T, "p-", W, D, Pattern.PREFIXED)
    assert not _auth(AclEntry(ALICE, T, "p-x", W), deny_p).may_write_some_topic(ALICE)
    assert not _auth(
        AclEntry(ALICE, T, "p-x", W, pattern=Pattern.PREFIXED), deny_p
    ).may_write_some_topic(ALICE)
    assert _auth(AclEntry(ALICE, T, "p", W, pattern=Pattern.PREFIXED), deny_p).may_write_some_topic(
        ALICE
    )
    # A deny on every topic covers all; an allow on every topic survives a literal deny.
    assert not _auth(
        AclEntry(ALICE, T, "a", W), AclEntry(ALICE, T, "*", W, D)
    ).may_write_some_topic(ALICE)
    assert _auth(AclEntry(ALICE, T, "*", W), AclEntry(ALICE, T, "a", W, D)).may_write_some_topic(
        ALICE
    )
    # IdempotentWrite is a cluster operation of its own; ALL on the cluster covers it.
    assert _auth(AclEntry(ALICE, C, CLUSTER_NAME, Operation.IDEMPOTENT_WRITE)).cluster(
        ALICE, Operation.IDEMPOTENT_WRITE
    )
    assert not _auth(AclEntry(ALICE, C, CLUSTER_NAME, W)).cluster(ALICE, Operation.IDEMPOTENT_WRITE)


def test_idempotent_write_is_a_cluster_operation() -> None:
    with pytest.raises(AclError, match="cluster only"):
        AclEntry(ALICE, T, "a", Operation.IDEMPOTENT_WRITE)
