"""DescribeAcls, CreateAcls and DeleteAcls (KIP-11, KIP-140, KIP-290) over VDL's ACL store.

The same entries `vdl acl` manages (`vdl.security.acl`): Kafka's resource types, pattern
types, operations and permissions map one to one where VDL has them. What VDL's model
cannot express is refused per entry with INVALID_REQUEST and a message naming why, never
widened or narrowed: a host other than ``*`` (VDL does not model hosts), resource types
VDL has no use for (DELEGATION_TOKEN, USER), and operations it never
checks (CLUSTER_ACTION, DESCRIBE_CONFIGS, CREATE_TOKENS, DESCRIBE_TOKENS: those without an
`Operation` of the same name). A describe or delete filter naming one of those is valid
and matches nothing, since no VDL entry has it.

Creating and deleting need ALTER on the cluster, describing DESCRIBE on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise); with security off the answer is
SECURITY_DISABLED, as Kafka answers without an authorizer. On a cluster any node takes
them (KIP-590): each change is a metadata-group command (`vdl.cluster.acl_commands`),
answered once this node has applied it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from vdl.broker.topics import TopicError
from vdl.cluster.acl_commands import ACL_ADD, ACL_REMOVE, acl_command
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, Response
from vdl.net.kafka.apis.security_admin import Refused, authorize, who
from vdl.net.kafka.control_codec import (
    decode_request,
    encode_response,
    make_response,
    response_class,
)
from vdl.security.acl import (
    WILDCARD,
    AclEntry,
    AclError,
    Operation,
    Pattern,
    Permission,
    ResourceType,
    normalize_principal,
)
from vdl.security.acl_store import AclStore

log = logging.getLogger(__name__)

# The Kafka protocol guide's enums (org.apache.kafka.common.resource / acl).
_ANY = 1
_MATCH = 2
_RESOURCE_TYPES: dict[int, ResourceType] = {
    2: ResourceType.TOPIC,
    3: ResourceType.GROUP,
    4: ResourceType.CLUSTER,
    5: ResourceType.TRANSACTIONAL_ID,
}
_RESOURCE_TYPES_UNMODELLED = {6: "DELEGATION_TOKEN", 7: "USER"}
_PATTERNS: dict[int, Pattern] = {3: Pattern.LITERAL, 4: Pattern.PREFIXED}
_KAFKA_OPERATIONS = {
    2: "ALL",
    3: "READ",
    4: "WRITE",
    5: "CREATE",
    6: "DELETE",
    7: "ALTER",
    8: "DESCRIBE",
    9: "CLUSTER_ACTION",
    10: "DESCRIBE_CONFIGS",
    11: "ALTER_CONFIGS",
    12: "IDEMPOTENT_WRITE",
    13: "CREATE_TOKENS",
    14: "DESCRIBE_TOKENS",
}
# The operations VDL's model has (the same names); the others are refused in entries.
_OPERATIONS: dict[int, Operation] = {
    code: Operation[name]
    for code, name in _KAFKA_OPERATIONS.items()
    if name in Operation.__members__
}
_OPERATIONS_UNMODELLED = {
    code: name for code, name in _KAFKA_OPERATIONS.items() if code not in _OPERATIONS
}
_PERMISSIONS: dict[int, Permission] = {2: Permission.DENY, 3: Permission.ALLOW}


def _code(table: dict[int, Any], value: Any) -> int:
    return next(k for k, v in table.items() if v is value)


def _invalid(message: str) -> Refused:
    return Refused(ErrorCode.INVALID_REQUEST, message)


def _entry_of(creation: Any) -> AclEntry:
    """A CreateAcls creation as a VDL entry; Refused if VDL cannot hold it exactly."""
    rtype = creation.resource_type
    if rtype in _RESOURCE_TYPES_UNMODELLED:
        raise _invalid(f"VDL has no ACLs on {_RESOURCE_TYPES_UNMODELLED[rtype]} resources")
    if rtype not in _RESOURCE_TYPES:
        raise _invalid(f"invalid resource type {rtype}")
    pattern = _PATTERNS.get(creation.resource_pattern_type)
    if pattern is None:
        raise _invalid(f"invalid pattern type {creation.resource_pattern_type}")
    operation = creation.operation
    if operation in _OPERATIONS_UNMODELLED:
        raise _invalid(f"VDL does not check the {_OPERATIONS_UNMODELLED[operation]} operation")
    if operation not in _OPERATIONS:
        raise _invalid(f"invalid operation {operation}")
    permission = _PERMISSIONS.get(creation.permission_type)
    if permission is None:
        raise _invalid(f"invalid permission type {creation.permission_type}")
    if creation.host != WILDCARD:
        raise _invalid(
            f"VDL does not model hosts: only host '*' is accepted, not {creation.host!r}"
        )
    principal = creation.principal or ""
    if not principal.startswith("User:") or principal == "User:":
        raise _invalid(f"principal {principal!r} must look like User:NAME")
    if pattern is Pattern.PREFIXED and creation.resource_name == WILDCARD:
        raise _invalid("a PREFIXED pattern cannot be named '*'")
    try:
        return AclEntry(
            normalize_principal(principal),
            _RESOURCE_TYPES[rtype],
            creation.resource_name,
            _OPERATIONS[operation],
            permission,
            pattern,
        )
    except AclError as exc:
        raise _invalid(str(exc)) from None


@dataclass(frozen=True, slots=True)
class _Filter:
    """A DescribeAcls/DeleteAcls filter (Kafka's AclBindingFilter)."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def check(self) -> None:
        """INVALID_REQUEST for values outside the protocol's enums (Kafka: UNKNOWN)."""
        if self.resource_type not in (_ANY, *_RESOURCE_TYPES, *_RESOURCE_TYPES_UNMODELLED):
            raise _invalid(f"invalid resource type filter {self.resource_type}")
        if self.pattern_type not in (_ANY, _MATCH, *_PATTERNS):
            raise _invalid(f"invalid pattern type filter {self.pattern_type}")
        if self.operation not in (_ANY, *_OPERATIONS, *_OPERATIONS_UNMODELLED):
            raise _invalid(f"invalid operation filter {self.operation}")
        if self.permission not in (_ANY, *_PERMISSIONS):
            raise _invalid(f"invalid permission type filter {self.permission}")

    def matches(self, entry: AclEntry) -> bool:
        if self.resource_type != _ANY and _RESOURCE_TYPES.get(self.resource_type) is not (
            entry.resource_type
        ):
            return False
        if self.pattern_type not in (_ANY, _MATCH) and _PATTERNS[self.pattern_type] is not (
            entry.pattern
        ):
            return False
        if self.resource_name is not None and not self._name_matches(entry):
            return False
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != WILDCARD:
            return False  # every VDL entry has host '*'
        if self.operation != _ANY and _OPERATIONS.get(self.operation) is not entry.operation:
            return False
        return self.permission == _ANY or _PERMISSIONS[self.permission] is entry.permission

    def _name_matches(self, entry: AclEntry) -> bool:
        name = self.resource_name
        if self.pattern_type != _MATCH:
            return name == entry.resource_name
        # MATCH (KIP-290): the entries that apply to a resource of this name.
        if entry.pattern is Pattern.PREFIXED:
            return name is not None and name.startswith(entry.resource_name)
        return entry.resource_name in (name, WILDCARD)


def _filter_of(raw: Any) -> _Filter:
    return _Filter(
        raw.resource_type_filter,
        raw.resource_name_filter,
        raw.pattern_type_filter,
        raw.principal_filter,
        raw.host_filter,
        raw.operation,
        raw.permission_type,
    )


def _store(ctx: RequestContext) -> AclStore | None:
    security = ctx.security
    return None if security is None else security.acls


async def _change(ctx: RequestContext, store: AclStore, op: str, entry: AclEntry) -> None:
    cluster = ctx.broker.cluster
    if cluster is None:
        if op == ACL_ADD:
            store.add(entry)
        else:
            store.remove(entry)
        return
    await cluster.run_command(acl_command(op, entry))


def handle_describe_acls(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    store = _store(ctx)

    async def run() -> Response:
        def answer(code: ErrorCode, message: str | None, resources: list[Any]) -> Response:
            response = make_response(
                ctx.header,
                throttle_time_ms=0,
                error_code=int(code),
                error_message=message,
                resources=resources,
            )
            return encode_response(ctx.header, response)

        try:
            acls = authorize(ctx, store, Operation.DESCRIBE)
        except Refused as exc:
            return answer(exc.code, exc.message, [])
        flt = _filter_of(request)
        try:
            flt.check()
        except Refused as exc:
            log.warning("DescribeAcls from %s refused: %s", who(ctx), exc.message)
            return answer(exc.code, exc.message, [])
        return answer(ErrorCode.NONE, None, _describe_resources(ctx, acls.entries(), flt))

    return run


def _describe_resources(ctx: RequestContext, entries: Iterable[AclEntry], flt: _Filter) -> Any:
    cls = response_class(ctx.header.api_key, ctx.header.api_version)
    grouped: dict[tuple[ResourceType, str, Pattern], list[AclEntry]] = {}
    for entry in entries:
        if flt.matches(entry):
            key = (entry.resource_type, entry.resource_name, entry.pattern)
            grouped.setdefault(key, []).append(entry)
    return [
        cls.DescribeAclsResource(
            resource_type=_code(_RESOURCE_TYPES, rtype),
            resource_name=name,
            pattern_type=_code(_PATTERNS, pattern),
            acls=[
                cls.DescribeAclsResource.AclDescription(
                    principal=e.principal,
                    host=WILDCARD,
                    operation=_code(_OPERATIONS, e.operation),
                    permission_type=_code(_PERMISSIONS, e.permission),
                )
                for e in acls
            ],
        )
        for (rtype, name, pattern), acls in sorted(grouped.items())
    ]


def handle_create_acls(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    store = _store(ctx)

    async def run() -> Response:
        cls = response_class(ctx.header.api_key, ctx.header.api_version)
        results = []
        for creation in request.creations:
            code, message = ErrorCode.NONE, None
            try:
                acls = authorize(ctx, store, Operation.ALTER)
                entry = _entry_of(creation)
                await _change(ctx, acls, ACL_ADD, entry)
                log.info("ACL added by %s (Kafka): %s", who(ctx), entry.describe())
            except Refused as exc:
                code, message = exc.code, exc.message
                if code is not ErrorCode.SECURITY_DISABLED:
                    log.warning("CreateAcls from %s refused: %s", who(ctx), message)
            except TopicError as exc:
                code, message = exc.error, str(exc)
            results.append(cls.AclCreationResult(error_code=int(code), error_message=message))
        return encode_response(ctx.header, make_response(ctx.header, results=results))

    return run


def handle_delete_acls(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    store = _store(ctx)

    async def run() -> Response:
        cls = response_class(ctx.header.api_key, ctx.header.api_version)
        result_cls = cls.DeleteAclsFilterResult
        results = []
        # Every filter is matched against the entries as they were when the request came
        # (Kafka does the same), so an entry two filters match is reported by both.
        entries = store.entries() if store is not None else []
        for raw in request.filters:
            matched: list[Any] = []
            code, message = ErrorCode.NONE, None
            try:
                acls = authorize(ctx, store, Operation.ALTER)
                flt = _filter_of(raw)
                flt.check()
                for entry in entries:
                    if flt.matches(entry):
                        matched.append(await _delete_one(ctx, acls, entry, result_cls))
            except Refused as exc:
                code, message = exc.code, exc.message
                if code is not ErrorCode.SECURITY_DISABLED:
                    log.warning("DeleteAcls from %s refused: %s", who(ctx), message)
            results.append(
                result_cls(error_code=int(code), error_message=message, matching_acls=matched)
            )
        return encode_response(ctx.header, make_response(ctx.header, filter_results=results))

    return run


async def _delete_one(ctx: RequestContext, store: AclStore, entry: AclEntry, cls: Any) -> Any:
    code, message = ErrorCode.NONE, None
    try:
        await _change(ctx, store, ACL_REMOVE, entry)
        log.info("ACL removed by %s (Kafka): %s", who(ctx), entry.describe())
    except TopicError as exc:
        code, message = exc.error, str(exc)
    return cls.DeleteAclsMatchingAcl(
        error_code=int(code),
        error_message=message,
        resource_type=_code(_RESOURCE_TYPES, entry.resource_type),
        resource_name=entry.resource_name,
        pattern_type=_code(_PATTERNS, entry.pattern),
        principal=entry.principal,
        host=WILDCARD,
        operation=_code(_OPERATIONS, entry.operation),
        permission_type=_code(_PERMISSIONS, entry.permission),
    )
