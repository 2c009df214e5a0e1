"""Which ACL each YDB unary call needs: the YDB half of the rules both front ends share.

CreateTopic needs create (on the cluster or the topic), DescribeTopic and DescribePartition
describe, AlterTopic alter, DropTopic delete, DescribeConsumer describe on the topic and the
consumer's group, CommitOffset read on both; ListDirectory lists only topics the caller may
describe. The streams check theirs when they start (topic_write.py: write; topic_read.py:
read on each topic and on the consumer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message

from vdl.net.grpc import ServerContext
from vdl.net.ydb.auth import Authenticator, Identity, ticket
from vdl.net.ydb.operation import UnaryYdbHandler
from vdl.net.ydb.paths import topic_name
from vdl.security.acl import Operation, ResourceType

Check = Callable[[Authenticator, Identity | None, Any, str], None]


def _topic(op: Operation) -> Check:
    def check(auth: Authenticator, who: Identity | None, request: Any, database: str) -> None:
        auth.require(who, op, ResourceType.TOPIC, topic_name(request.path, database))

    return check


def _create(auth: Authenticator, who: Identity | None, request: Any, database: str) -> None:
    auth.may_create_topic(who, topic_name(request.path, database))


def _topic_and_consumer(op: Operation) -> Check:
    def check(auth: Authenticator, who: Identity | None, request: Any, database: str) -> None:
        auth.require(who, op, ResourceType.TOPIC, topic_name(request.path, database))
        auth.require(who, op, ResourceType.GROUP, request.consumer)

    return check


CHECKS: dict[str, Check] = {
    "CreateTopic": _create,
    "DescribeTopic": _topic(Operation.DESCRIBE),
    "DescribePartition": _topic(Operation.DESCRIBE),
    "AlterTopic": _topic(Operation.ALTER),
    "DropTopic": _topic(Operation.DELETE),
    "DescribeConsumer": _topic_and_consumer(Operation.DESCRIBE),
    "CommitOffset": _topic_and_consumer(Operation.READ),
    "UpdateOffsetsInTransaction": _topic(Operation.READ),
}


def guarded(
    method: str, handler: UnaryYdbHandler[Any], auth: Authenticator, database: str
) -> UnaryYdbHandler[Any]:
    """``handler`` behind the method's ACL check (a no-op while auth is off)."""
    check = CHECKS[method]
    if not auth.enabled:
        return handler

    async def checked(request: Any, context: ServerContext) -> Message | None:
        check(auth, auth.identify(ticket(context)), request, database)
        return await handler(request, context)

    return checked


def filter_listing(handler: UnaryYdbHandler[Any], auth: Authenticator) -> UnaryYdbHandler[Any]:
    """ListDirectory without the topics the caller may not describe."""
    if not auth.enabled:
        return handler

    async def filtered(request: Any, context: ServerContext) -> Message | None:
        result: Any = await handler(request, context)
        who = auth.identify(ticket(context))
        kept = [c for c in result.children if auth.allowed(who, Operation.DESCRIBE, c.name)]
        del result.children[:]
        result.children.extend(kept)
        return result

    return filtered
