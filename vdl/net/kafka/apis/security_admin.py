"""What the ACL and SCRAM admin APIs (acls_admin.py, scram_admin.py) share.

Their refusal ladder, as Kafka answers: with security off (no ACL or user store on this
node) SECURITY_DISABLED, as Kafka answers without an authorizer; without the operation on
the cluster (ALTER to change, DESCRIBE to describe) CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TypeVar

from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import RequestContext
from vdl.security.acl import Operation

_Store = TypeVar("_Store")


class Refused(Exception):
    """A request (or one entry of it) answered with `code` and `message`."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def authorize(ctx: RequestContext, store: _Store | None, operation: Operation) -> _Store:
    """`store` once the request may go on; Refused (SECURITY_DISABLED without a store,
    CLUSTER_AUTHORIZATION_FAILED without `operation` on the cluster) otherwise."""
    if store is None:
        raise Refused(ErrorCode.SECURITY_DISABLED, "security is off on this node")
    if not ctx.may_cluster(operation):
        raise Refused(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{operation.name} on the cluster is needed"
        )
    return store


def who(ctx: RequestContext) -> str:
    """The requester as log lines name it."""
    return ctx.principal or "anonymous"
