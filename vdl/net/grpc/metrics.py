"""Call metrics of the gRPC server, recorded into the node's registry (`STAGES`).

Per method path (`/Ydb.Topic.V1.TopicService/StreamWrite`), as gRPC's own server metrics
split them (gRFC A66, `grpc.server.call.started` / `.duration` by `grpc.method` and
`grpc.status`):

- `grpc_requests{method}`: calls started (their request headers received).
- `grpc_request_errors{method,code}`: calls ended with a status other than OK, `code`
  being the status' canonical name (`UNAVAILABLE`, `DEADLINE_EXCEEDED`, ...). A call the
  client reset, or that a shutdown cancelled, ends CANCELLED.
- `grpc_request_seconds{method}`: unary calls only, request headers received to the
  trailers handed to the connection's writer. A stream lasts as long as its client wants:
  streams are counted, not timed.

A method path nobody registered is counted as method `unknown` (its calls end
UNIMPLEMENTED): a client cannot make up series. And per listener: `grpc_bytes_in` /
`grpc_bytes_out` (HTTP/2 bytes read from and written to client connections, before TLS),
`grpc_connections_accepted` / `grpc_connections_refused` (over max.connections or
max.connections.per.ip).
"""

from __future__ import annotations

from typing import Final

from vdl.metrics.stages import STAGES, Counter, Histogram

from .status import StatusCode

__all__ = [
    "BYTES_IN",
    "BYTES_OUT",
    "CONNECTIONS_ACCEPTED",
    "CONNECTIONS_REFUSED",
    "UNKNOWN_METHOD",
    "MethodMetrics",
    "unknown_method",
]

BYTES_IN: Final = STAGES.counter("grpc_bytes_in")
BYTES_OUT: Final = STAGES.counter("grpc_bytes_out")
CONNECTIONS_ACCEPTED: Final = STAGES.counter("grpc_connections_accepted")
CONNECTIONS_REFUSED: Final = STAGES.counter("grpc_connections_refused")

UNKNOWN_METHOD = "unknown"


class MethodMetrics:
    """The series of one method; error counters are made on their first use."""

    __slots__ = ("_errors", "method", "requests", "seconds")

    def __init__(self, method: str, *, timed: bool) -> None:
        self.method = method
        self.requests: Counter = STAGES.counter("grpc_requests", method=method)
        self.seconds: Histogram | None = (
            STAGES.histogram("grpc_request_seconds", method=method) if timed else None
        )
        self._errors: dict[StatusCode, Counter] = {}

    def finished(self, status: StatusCode, started: float) -> None:
        """A call that started at `started` (`time.perf_counter()`) ended with `status`."""
        if self.seconds is not None:
            self.seconds.since(started)
        if status is not StatusCode.OK:
            counter = self._errors.get(status)
            if counter is None:
                counter = STAGES.counter(
                    "grpc_request_errors", method=self.method, code=status.name
                )
                self._errors[status] = counter
            counter.inc()


_unknown: MethodMetrics | None = None


def unknown_method() -> MethodMetrics:
    """The series of calls to paths no method is registered at."""
    global _unknown
    if _unknown is None:
        _unknown = MethodMetrics(UNKNOWN_METHOD, timed=False)
    return _unknown
