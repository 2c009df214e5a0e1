"""How Kafka's ACL bindings and filters map onto VDL's entries, and SCRAM-only users."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.admin import CreateAclsRequest

from vdl.net.kafka.apis.acls_admin import _entry_of, _Filter
from vdl.net.kafka.apis.security_admin import Refused
from vdl.security.acl import AclEntry, Operation, Pattern, Permission, ResourceType
from vdl.security.scram import credential_from_salted, make_credential
from vdl.security.user_table import decode_user
from vdl.security.users import NO_PASSWORD, User, UserStore, parse_line, password_matches

TOPIC, GROUP, CLUSTER = 2, 3, 4
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
READ, DESCRIBE, CLUSTER_ACTION = 3, 8, 9
DENY, ALLOW = 2, 3


def creation(**fields: Any) -> Any:
    base: dict[str, Any] = {
        "resource_type": TOPIC,
        "resource_name": "t",
        "resource_pattern_type": LITERAL,
        "principal": "User:bob",
        "host": "*",
        "operation": READ,
        "permission_type": ALLOW,
    }
    return CreateAclsRequest.AclCreation(**{**base, **fields})


def test_a_binding_maps_exactly() -> None:
    entry = _entry_of(creation(resource_pattern_type=PREFIXED, permission_type=DENY))
    assert entry == AclEntry(
        "User:bob", ResourceType.TOPIC, "t", Operation.READ, Permission.DENY, Pattern.PREFIXED
    )


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"host": "10.0.0.1"}, "hosts"),
        ({"resource_type": 6}, "DELEGATION_TOKEN"),
        ({"operation": CLUSTER_ACTION}, "CLUSTER_ACTION"),
        ({"resource_pattern_type": MATCH}, "pattern"),
        ({"principal": "Group:x"}, "User:NAME"),
        ({"principal": "bob"}, "User:NAME"),
        ({"resource_type": CLUSTER, "resource_name": "other"}, "kafka-cluster"),
        ({"operation": ANY}, "operation"),
    ],
)
def test_what_vdl_cannot_express_is_refused(fields: dict[str, Any], why: str) -> None:
    with pytest.raises(Refused) as refused:
        _entry_of(creation(**fields))
    assert refused.value.code == 42 and why in refused.value.message


def test_a_transactional_id_binding_maps_exactly() -> None:
    entry = _entry_of(creation(resource_type=5, resource_name="tx", operation=4))
    assert entry == AclEntry("User:bob", ResourceType.TRANSACTIONAL_ID, "tx", Operation.WRITE)


def entry(name: str, pattern: Pattern = Pattern.LITERAL) -> AclEntry:
    return AclEntry("User:bob", ResourceType.TOPIC, name, Operation.READ, pattern=pattern)


def test_match_filters_find_the_entries_that_apply() -> None:
    entries = [entry("orders"), entry("*"), entry("ord", Pattern.PREFIXED), entry("other")]
    match = _Filter(TOPIC, "orders", MATCH, None, None, ANY, ANY)
    assert [e for e in entries if match.matches(e)] == entries[:3]
    literal = _Filter(TOPIC, "orders", LITERAL, None, None, ANY, ANY)
    assert [e for e in entries if literal.matches(e)] == entries[:1]
    by_host = _Filter(ANY, None, ANY, None, "10.0.0.1", ANY, ANY)
    assert not any(by_host.matches(e) for e in entries)
    on_group = _Filter(GROUP, None, ANY, None, None, ANY, ANY)
    assert not any(on_group.matches(e) for e in entries)
    unmodelled_operation = _Filter(ANY, None, ANY, None, None, CLUSTER_ACTION, ANY)
    unmodelled_operation.check()
    assert not any(unmodelled_operation.matches(e) for e in entries)
    with pytest.raises(Refused):
        _Filter(0, None, ANY, None, None, ANY, ANY).check()


def test_a_scram_only_user_has_no_password() -> None:
    salted = b"\x01" * 32
    cred = credential_from_salted("SCRAM-SHA-256", b"salt", 4096, salted)
    user = User("carol", NO_PASSWORD, {"SCRAM-SHA-256": cred})
    line = user.line()
    assert line.startswith("carol:! SCRAM-SHA-256=")
    assert parse_line(1, line) == user == decode_user(line)
    assert not user.legacy_plaintext
    # "!" is not a password: PLAIN and YDB Login refuse every attempt, "!" included.
    store = UserStore({"carol": user})
    assert not store.verify_password("carol", "!") and not password_matches(NO_PASSWORD, "!")
    assert store.legacy_users() == []


def test_a_salted_password_gives_the_same_credential_as_the_password() -> None:
    import hashlib

    salted = hashlib.pbkdf2_hmac("sha512", b"pw", b"salt", 4096)
    assert credential_from_salted("SCRAM-SHA-512", b"salt", 4096, salted) == make_credential(
        "SCRAM-SHA-512", "pw", salt=b"salt", iterations=4096
    )
