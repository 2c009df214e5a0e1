"""Errors of the client library, and which failures are worth a retry.

The one place where the client classifies YDB statuses and gRPC statuses: writers and
readers reconnect on what :func:`is_retriable` accepts and surface everything else.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio

from vdl.net.grpc import GrpcError, StatusCode
from vdl.net.ydb.protos import ydb_status_codes_pb2

_Status = ydb_status_codes_pb2.StatusIds

SUCCESS = int(_Status.SUCCESS)
UNAVAILABLE = int(_Status.UNAVAILABLE)

# Temporary conditions: the node is restarting, overloaded or moved the session. NOT_FOUND
# is deliberately not here (the YDB SDK retries it forever, which hides real mistakes).
_RETRIABLE_STATUSES = frozenset(
    int(s)
    for s in (
        _Status.INTERNAL_ERROR,
        _Status.ABORTED,
        _Status.UNAVAILABLE,
        _Status.OVERLOADED,
        _Status.BAD_SESSION,
        _Status.SESSION_EXPIRED,
        _Status.CANCELLED,
        _Status.UNDETERMINED,
    )
)
# Statuses whose retry should wait longer: the server asked us to back off.
_SLOW_STATUSES = frozenset(
    int(s) for s in (_Status.OVERLOADED, _Status.ABORTED, _Status.INTERNAL_ERROR)
)
# Transport-level outcomes that say "this connection or call broke", not "your request is
# wrong": the same request may succeed on a new stream.
_RETRIABLE_GRPC = frozenset(
    {
        StatusCode.CANCELLED,
        StatusCode.UNKNOWN,
        StatusCode.DEADLINE_EXCEEDED,
        StatusCode.RESOURCE_EXHAUSTED,
        StatusCode.ABORTED,
        StatusCode.INTERNAL,
        StatusCode.UNAVAILABLE,
    }
)


def status_name(status: int) -> str:
    try:
        return str(_Status.StatusCode.Name(status))
    except ValueError:
        return f"STATUS_{status}"


class ClientError(Exception):
    """Base of every error the client library raises on purpose."""


class ClosedError(ClientError):
    """The writer, reader or connection was closed; no further calls are accepted."""


class ConnectError(ClientError):
    """The endpoint cannot be reached (refused, unresolvable, TLS failure, timeout)."""


class BufferFullError(ClientError, TimeoutError):
    """``write()`` waited its timeout for buffer space that did not free up."""


class CloseTimeoutError(ClientError, TimeoutError):
    """``close()`` gave up waiting for acknowledgements; ``unacked`` messages may be lost."""

    def __init__(self, message: str, unacked: int) -> None:
        super().__init__(message)
        self.unacked = unacked


class CommitError(ClientError):
    """A commit cannot be (or was not) acknowledged: its partition session has ended."""


class ProtocolError(ClientError):
    """The server broke the protocol (an ack out of order, an unexpected message)."""


class YdbStatusError(ClientError):
    """The server answered with a non-success YDB status."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"{status_name(status)}: {message}" if message else status_name(status))

    @property
    def retriable(self) -> bool:
        return self.status in _RETRIABLE_STATUSES

    @classmethod
    def from_reply(cls, status: int, issues: Any) -> YdbStatusError:
        return cls(status, issues_text(issues))


def issues_text(issues: Any) -> str:
    """Issue messages (nested ones included) joined into one line."""
    parts: list[str] = []

    def walk(items: Any) -> None:
        for item in items:
            if item.message:
                parts.append(item.message)
            walk(item.issues)

    walk(issues)
    return "; ".join(parts)


def check_status(status: int, issues: Any) -> None:
    """Raise :class:`YdbStatusError` unless ``status`` is a success (0 counts, as in YDB)."""
    if status not in (0, SUCCESS):
        raise YdbStatusError.from_reply(status, issues)


def is_retriable(exc: BaseException) -> bool:
    """Whether a new call (on a new connection if need be) may succeed where this failed."""
    if isinstance(exc, YdbStatusError):
        return exc.retriable
    if isinstance(exc, GrpcError):
        return exc.status in _RETRIABLE_GRPC
    return isinstance(
        exc,
        ConnectError | OSError | trio.BrokenResourceError | trio.ClosedResourceError,
    )


def is_slow_retry(exc: BaseException) -> bool:
    return isinstance(exc, YdbStatusError) and exc.status in _SLOW_STATUSES


def breaks_connection(exc: BaseException) -> bool:
    """Whether the failure says the HTTP/2 connection itself is unusable (so it should be
    replaced), not just one call."""
    if isinstance(exc, GrpcError):
        return exc.status in (StatusCode.UNAVAILABLE, StatusCode.INTERNAL, StatusCode.UNKNOWN)
    return isinstance(exc, OSError | trio.BrokenResourceError | trio.ClosedResourceError)


def root_error(exc: BaseException) -> BaseException:
    """The one real error inside nested exception groups from a session's nursery (sibling
    tasks' cancellations are noise); ``exc`` itself if it is not a group or holds several."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    real = [leaf for leaf in _leaves(exc) if not isinstance(leaf, trio.Cancelled)]
    return real[0] if len(real) == 1 else exc


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for inner in group.exceptions:
        if isinstance(inner, BaseExceptionGroup):
            found.extend(_leaves(inner))
        else:
            found.append(inner)
    return found


@contextmanager
def timeout_after(seconds: float | None, what: str) -> Iterator[None]:
    """Like ``trio.fail_after`` but raising the builtin TimeoutError (trio's TooSlowError is
    not one), so callers need no trio-specific except clause. None means no limit."""
    with trio.move_on_after(math.inf if seconds is None else seconds) as scope:
        yield
    if scope.cancelled_caught:
        raise TimeoutError(f"{what} did not complete within {seconds} s")
