"""gRPC status codes and the error that carries one.

The single place where gRPC statuses live: every other module (and the YDB services built on
top) raises or inspects :class:`GrpcError` instead of passing bare integers around.
"""

from __future__ import annotations

from enum import IntEnum


class StatusCode(IntEnum):
    """Canonical gRPC status codes (grpc/doc/statuscodes.md)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16

    @classmethod
    def from_wire(cls, value: int) -> StatusCode:
        """Map a received ``grpc-status`` value; codes we do not know count as UNKNOWN."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class GrpcError(Exception):
    """A call ended with a non-OK status (client side), or a handler aborts with one."""

    def __init__(
        self,
        status: StatusCode,
        message: str = "",
        trailing_metadata: tuple[tuple[str, str | bytes], ...] = (),
    ) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message
        self.trailing_metadata = trailing_metadata

    def __str__(self) -> str:
        return f"{self.status.name}: {self.message}" if self.message else self.status.name


def status_from_http(http_status: int) -> StatusCode:
    """Status for a response that is not HTTP 200 (gRPC's http-grpc-status-mapping.md)."""
    if http_status == 400:
        return StatusCode.INTERNAL
    if http_status == 401:
        return StatusCode.UNAUTHENTICATED
    if http_status == 403:
        return StatusCode.PERMISSION_DENIED
    if http_status == 404:
        return StatusCode.UNIMPLEMENTED
    if http_status in (429, 502, 503, 504):
        return StatusCode.UNAVAILABLE
    return StatusCode.UNKNOWN
