"""YDB statuses, issues and the unary Operation envelope: the one place for YDB error mapping.

Every unary YDB response is ``{operation = 1}``; success or failure travels in
``Operation.status`` (400000-range codes) with human-readable ``issues``, and the gRPC call
itself always ends OK. Handlers raise :class:`YdbError`; :func:`unary` turns that (and a
returned result) into the envelope.

So gRPC's own metrics see YDB failures as OK calls: every failure status sent (a unary
envelope, or the in-band status a topic stream ends with) is counted in
``ydb_request_errors{method,status}``, ``status`` being the ``StatusIds`` name.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import trio
from google.protobuf.message import Message

from vdl.broker.topics import TopicError
from vdl.log.error_codes import ErrorCode
from vdl.log.stream import StreamError
from vdl.metrics.stages import STAGES, Counter
from vdl.net.grpc import GrpcServer, ServerContext
from vdl.net.grpc.protobuf import decode, encode
from vdl.net.grpc.server import Precheck
from vdl.net.ydb.protos import ydb_issue_message_pb2, ydb_operation_pb2, ydb_status_codes_pb2

log = logging.getLogger(__name__)

RequestT = TypeVar("RequestT", bound=Message)


class StatusIds(enum.IntEnum):
    """``Ydb.StatusIds.StatusCode`` (mirrored so code compares typed values, not literals)."""

    STATUS_CODE_UNSPECIFIED = 0
    SUCCESS = 400000
    BAD_REQUEST = 400010
    UNAUTHORIZED = 400020
    INTERNAL_ERROR = 400030
    ABORTED = 400040
    UNAVAILABLE = 400050
    OVERLOADED = 400060
    SCHEME_ERROR = 400070
    GENERIC_ERROR = 400080
    TIMEOUT = 400090
    BAD_SESSION = 400100
    PRECONDITION_FAILED = 400120
    ALREADY_EXISTS = 400130
    NOT_FOUND = 400140
    SESSION_EXPIRED = 400150
    CANCELLED = 400160
    UNDETERMINED = 400170
    UNSUPPORTED = 400180
    SESSION_BUSY = 400190
    EXTERNAL_ERROR = 400200


WireStatus = ydb_status_codes_pb2.StatusIds.StatusCode


def wire(status: StatusIds) -> WireStatus:
    """The status as the generated messages type their ``status`` fields."""
    return cast(WireStatus, int(status))


# YDB's convention for IssueMessage.severity.
SEVERITY_FATAL = 0
SEVERITY_ERROR = 1


class YdbError(Exception):
    """A request fails with a YDB status; raised by handlers, mapped to the envelope."""

    def __init__(self, status: StatusIds, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def issues(self) -> list[Any]:
        return [issue(self.message)]


def issue(message: str, severity: int = SEVERITY_ERROR) -> Any:
    return ydb_issue_message_pb2.IssueMessage(message=message, severity=severity)


# Broker errors as YDB statuses. SCHEME_ERROR for a missing topic, never NOT_FOUND: the
# SDK retries NOT_FOUND forever.
_FROM_BROKER: dict[ErrorCode, StatusIds] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: StatusIds.SCHEME_ERROR,
    ErrorCode.TOPIC_ALREADY_EXISTS: StatusIds.ALREADY_EXISTS,
    ErrorCode.INVALID_TOPIC_EXCEPTION: StatusIds.BAD_REQUEST,
    ErrorCode.INVALID_PARTITIONS: StatusIds.BAD_REQUEST,
    ErrorCode.INVALID_CONFIG: StatusIds.BAD_REQUEST,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: StatusIds.UNAVAILABLE,
    # A metadata command that did not commit in time, or no metadata leader yet: retry.
    ErrorCode.REQUEST_TIMED_OUT: StatusIds.UNAVAILABLE,
    ErrorCode.NOT_CONTROLLER: StatusIds.UNAVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: StatusIds.UNAVAILABLE,
    ErrorCode.INVALID_REPLICATION_FACTOR: StatusIds.BAD_REQUEST,
    ErrorCode.MESSAGE_TOO_LARGE: StatusIds.BAD_REQUEST,
    ErrorCode.CORRUPT_MESSAGE: StatusIds.BAD_REQUEST,
}


_ERRORS: dict[tuple[str, StatusIds], Counter] = {}


def count_error(method: str, status: StatusIds) -> None:
    """Count a YDB failure status sent for a call of ``method`` (its gRPC path)."""
    key = (method, status)
    counter = _ERRORS.get(key)
    if counter is None:
        counter = STAGES.counter("ydb_request_errors", method=method, status=status.name)
        _ERRORS[key] = counter
    counter.inc()


def status_for_broker_error(error: ErrorCode) -> StatusIds:
    return _FROM_BROKER.get(error, StatusIds.INTERNAL_ERROR)


def from_topic_error(exc: TopicError) -> YdbError:
    return YdbError(status_for_broker_error(exc.error), str(exc))


def operation(
    status: StatusIds = StatusIds.SUCCESS,
    issues: list[Any] | None = None,
    result: Message | None = None,
) -> Any:
    """A ready ``Ydb.Operations.Operation``; ``result`` is packed into an Any whose type URL
    names its full message type (the SDK's Unpack silently yields an empty message on a
    mismatch)."""
    op = ydb_operation_pb2.Operation(ready=True, status=wire(status), issues=issues or [])
    if result is not None:
        op.result.Pack(result)
    return op


Authorize = Callable[[ServerContext], str]
UnaryYdbHandler = Callable[[RequestT, ServerContext], Awaitable[Message | None]]


def unary(
    request_type: type[RequestT],
    response_type: type[Message],
    handler: UnaryYdbHandler[RequestT],
    authorize: Authorize | None,
) -> Callable[[bytes, ServerContext], Awaitable[bytes]]:
    """Adapt ``handler(request, context) -> result message or None`` to a bytes handler
    answering ``response_type{operation}``.

    ``authorize`` (when auth is on) runs before the request is even decoded and raises
    :class:`YdbError` UNAUTHORIZED. A malformed request is a gRPC INTERNAL error, as grpcio
    reports undecodable messages.
    """

    async def wrapped(data: bytes, context: ServerContext) -> bytes:
        try:
            if authorize is not None:
                authorize(context)
            request = decode(request_type, data)
            result = await handler(request, context)
            op = operation(result=result)
        except YdbError as exc:
            count_error(context.method, exc.status)
            op = operation(exc.status, exc.issues())
        except TopicError as exc:
            err = from_topic_error(exc)
            count_error(context.method, err.status)
            op = operation(err.status, err.issues())
        response = response_type()
        response.operation.CopyFrom(op)
        return encode(response)

    return wrapped


def refuse_early(response_type: type[Message], authorize: Authorize) -> Precheck:
    """A precheck for :meth:`GrpcServer.add_unary`: the token is checked from the request
    headers, so a caller without a valid one gets its UNAUTHORIZED envelope before any of
    its request body is received (the handler checks again, for a token expiring between)."""

    def check(context: ServerContext) -> bytes | None:
        try:
            authorize(context)
        except YdbError as exc:
            count_error(context.method, exc.status)
            response = response_type()
            response.operation.CopyFrom(operation(exc.status, exc.issues()))
            return encode(response)
        return None

    return check


def add_unary(
    server: GrpcServer,
    path: str,
    request_type: type[RequestT],
    response_type: type[Message],
    handler: UnaryYdbHandler[RequestT],
    authorize: Authorize | None,
) -> None:
    """Register a YDB unary method (see :func:`unary`), its token checked from the headers."""
    server.add_unary(
        path,
        unary(request_type, response_type, handler, authorize),
        precheck=None if authorize is None else refuse_early(response_type, authorize),
    )


def leaf_error(exc: BaseException) -> BaseException:
    """The one exception that matters in a (nested) exception group from a session's
    nursery: cancellations of sibling tasks are noise. ``exc`` itself when it is not a
    group or holds several real errors."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves: list[BaseException] = []

    def walk(group: BaseExceptionGroup[BaseException]) -> None:
        for inner in group.exceptions:
            if isinstance(inner, BaseExceptionGroup):
                walk(inner)
            else:
                leaves.append(inner)

    walk(exc)
    real = [leaf for leaf in leaves if not isinstance(leaf, trio.Cancelled)]
    if len(real) == 1:
        return real[0]
    return exc


def as_ydb_error(exc: BaseException) -> YdbError | None:
    """The YDB status for an error a stream session reports in-band, if it is one."""
    if isinstance(exc, YdbError):
        return exc
    if isinstance(exc, TopicError):
        return from_topic_error(exc)
    if isinstance(exc, StreamError):
        return YdbError(status_for_broker_error(exc.error), str(exc))
    return None
