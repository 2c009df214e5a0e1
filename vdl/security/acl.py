"""Who may do what: ACL entries and the one authorizer both front ends consult.

The model is Kafka's (KIP-11), trimmed to what VDL serves: an entry allows or denies a
principal (``User:alice``, or ``User:*`` for everyone) one operation on a resource (a topic,
a consumer group, a transactional id, or the cluster), named literally, by prefix, or ``*``
for all. A transactional id takes WRITE (InitProducerId, the transaction's requests and
its Produce) and DESCRIBE (DescribeTransactions, ListTransactions), as in Kafka (KIP-98). A DENY
wins over any ALLOW; READ, WRITE, DELETE and ALTER imply DESCRIBE; ALL covers every
operation. Superusers pass every check; when authorization is on and nothing matches, the
answer is no.

YDB maps onto it directly: a YDB consumer is a consumer group of the same name.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import dataclass

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
ANONYMOUS = "User:ANONYMOUS"


class Operation(enum.StrEnum):
    ALL = "all"
    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"
    DESCRIBE = "describe"
    # On the cluster only: lets a producer without Write on any topic get a producer id
    # (Kafka's IdempotentWrite, KIP-679).
    IDEMPOTENT_WRITE = "idempotent_write"
    # Changing a topic's settings, or the brokers' (on the cluster): IncrementalAlterConfigs
    # and AlterConfigs (Kafka's AlterConfigs operation; ALTER does not imply it, KIP-11).
    ALTER_CONFIGS = "alter_configs"


class ResourceType(enum.StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"
    TRANSACTIONAL_ID = "transactional_id"


class Pattern(enum.StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class Permission(enum.StrEnum):
    ALLOW = "allow"
    DENY = "deny"


# Kafka's AclAuthorizer: describe is granted by any of these.
_IMPLIES_DESCRIBE = frozenset(
    {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER, Operation.DESCRIBE}
)


class AclError(ValueError):
    pass


def normalize_principal(text: str) -> str:
    """``alice`` -> ``User:alice``; ``*`` -> ``User:*``; ``User:x`` unchanged."""
    text = text.strip()
    if not text:
        raise AclError("empty principal")
    if ":" in text:
        kind, _, name = text.partition(":")
        if kind != "User" or not name:
            raise AclError(f"principal {text!r} must look like User:NAME")
        return text
    return f"User:{text}"


@dataclass(frozen=True, slots=True, order=True)
class AclEntry:
    principal: str
    resource_type: ResourceType
    resource_name: str
    operation: Operation
    permission: Permission = Permission.ALLOW
    pattern: Pattern = Pattern.LITERAL

    def __post_init__(self) -> None:
        if not self.resource_name:
            raise AclError("empty resource name")
        if self.resource_type is ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")
        if (
            self.operation is Operation.IDEMPOTENT_WRITE
            and self.resource_type is not ResourceType.CLUSTER
        ):
            raise AclError("idempotent_write applies to the cluster only")

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type is not resource_type:
            return False
        if self.resource_name == WILDCARD and self.pattern is Pattern.LITERAL:
            return True
        if self.pattern is Pattern.PREFIXED:
            return name.startswith(self.resource_name)
        return name == self.resource_name

    def matches_principal(self, principal: str) -> bool:
        return self.principal in (principal, "User:*")

    def grants(self, operation: Operation) -> bool:
        """Does this entry (as an ALLOW) cover ``operation``?"""
        if self.operation is Operation.ALL or self.operation is operation:
            return True
        return operation is Operation.DESCRIBE and self.operation in _IMPLIES_DESCRIBE

    def to_json(self) -> str:
        return json.dumps(
            {
                "principal": self.principal,
                "resource_type": str(self.resource_type),
                "resource_name": self.resource_name,
                "operation": str(self.operation),
                "permission": str(self.permission),
                "pattern": str(self.pattern),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> AclEntry:
        raw = json.loads(text)
        try:
            return cls(
                normalize_principal(raw["principal"]),
                ResourceType(raw["resource_type"]),
                str(raw["resource_name"]),
                Operation(raw["operation"]),
                Permission(raw.get("permission", "allow")),
                Pattern(raw.get("pattern", "literal")),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise AclError(f"malformed ACL entry: {exc}") from None

    def describe(self) -> str:
        name = self.resource_name + ("*" if self.pattern is Pattern.PREFIXED else "")
        return f"{self.permission} {self.principal} {self.operation} {self.resource_type}:{name}"


class Authorizer:
    """A snapshot of the rules; build a new one when they change (it is cheap)."""

    def __init__(
        self, entries: Iterable[AclEntry], superusers: Iterable[str] = (), *, enabled: bool = True
    ) -> None:
        self.enabled = enabled
        self.entries = tuple(sorted(set(entries)))
        self.superusers = frozenset(normalize_principal(s) for s in superusers)

    def allowed(
        self, principal: str | None, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        if not self.enabled:
            return True
        who = principal or ANONYMOUS
        if who in self.superusers:
            return True
        granted = False
        for entry in self.entries:
            if not (entry.matches_principal(who) and entry.matches_resource(resource_type, name)):
                continue
            if entry.permission is Permission.DENY:
                # A deny of DESCRIBE does not deny READ, but a deny of ALL denies everything.
                if entry.operation in (Operation.ALL, operation):
                    return False
            elif entry.grants(operation):
                granted = True
        return granted

    def topic(self, principal: str | None, operation: Operation, name: str) -> bool:
        return self.allowed(principal, operation, ResourceType.TOPIC, name)

    def group(self, principal: str | None, operation: Operation, name: str) -> bool:
        return self.allowed(principal, operation, ResourceType.GROUP, name)

    def transactional_id(self, principal: str | None, operation: Operation, name: str) -> bool:
        return self.allowed(principal, operation, ResourceType.TRANSACTIONAL_ID, name)

    def cluster(self, principal: str | None, operation: Operation) -> bool:
        return self.allowed(principal, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def may_write_some_topic(self, principal: str | None) -> bool:
        """Is ``principal`` allowed WRITE on at least one topic name? Kafka's
        authorizeByResourceType (KIP-679): some ALLOW entry grants WRITE on a topic name or
        pattern, and no DENY entry covers every name that entry matches."""
        if not self.enabled:
            return True
        who = principal or ANONYMOUS
        if who in self.superusers:
            return True
        denials = [
            e
            for e in self.entries
            if e.permission is Permission.DENY
            and e.resource_type is ResourceType.TOPIC
            and e.matches_principal(who)
            and e.operation in (Operation.ALL, Operation.WRITE)
        ]
        for entry in self.entries:
            if (
                entry.permission is not Permission.ALLOW
                or entry.resource_type is not ResourceType.TOPIC
                or not entry.matches_principal(who)
                or not entry.grants(Operation.WRITE)
            ):
                continue
            if not any(_covers(deny, entry) for deny in denials):
                return True
        return False

    def may_create_topic(self, principal: str | None, name: str) -> bool:
        # Kafka: CREATE on the cluster, or on the topic (literal or prefixed) itself.
        return self.cluster(principal, Operation.CREATE) or self.topic(
            principal, Operation.CREATE, name
        )


def _covers(deny: AclEntry, allow: AclEntry) -> bool:
    """Does ``deny`` match every topic name that ``allow`` matches?"""
    if deny.resource_name == WILDCARD and deny.pattern is Pattern.LITERAL:
        return True
    if allow.resource_name == WILDCARD and allow.pattern is Pattern.LITERAL:
        return False
    if deny.pattern is Pattern.PREFIXED:
        return allow.resource_name.startswith(deny.resource_name)
    return allow.pattern is Pattern.LITERAL and allow.resource_name == deny.resource_name


ALLOW_ALL = Authorizer((), enabled=False)
