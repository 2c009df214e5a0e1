"""Request metrics of the Kafka front end, recorded into the node's registry (`STAGES`).

They follow Kafka's `kafka.network:type=RequestMetrics` beans (Kafka's monitoring docs,
"Common monitoring metrics" / "Request metrics"), one series per API named as Kafka names
it (`Produce`, `Fetch`, `Metadata`, ...):

- `kafka_requests{api}`: RequestsPerSec, every request read (also those refused).
- `kafka_request_errors{api,code}`: ErrorsPerSec, one per non-zero error code in a
  response (top level and per entry, as Kafka's `AbstractResponse.errorCounts()` counts
  them), plus one per request refused before it had a response (unsupported version,
  malformed, before SASL authentication, a handler failure), `code` being the Kafka error
  name (`NOT_LEADER_OR_FOLLOWER`), or its number if VDL has no name for it.
- `kafka_request_seconds{api}`: TotalTimeMs, from the request's frame read off the socket
  to its response handed to the connection's writer.

and the socket server's and quota managers' counts: `kafka_bytes_in` / `kafka_bytes_out`
(bytes read from and sent to clients, frames and size prefixes), `kafka_connections_accepted`
/ `kafka_connections_refused` (over max.connections or max.connections.per.ip),
`kafka_authentication_failures` (Kafka's failed-authentication-total) and
`kafka_throttle_seconds{api}` (quota throttle time given to a Produce or Fetch, KIP-219).

Every series is looked up once: an api's counters and histogram hang off its `ApiMetrics`,
cached by api key, so a request costs a dict lookup, an increment and an observation.
"""

from __future__ import annotations

from typing import Any, Final

from kafka.protocol.api_key import ApiKey as _KafkaApiKeys

from vdl.log.error_codes import ErrorCode
from vdl.metrics.stages import STAGES, Counter, Histogram
from vdl.net.kafka.versions import ApiKey

__all__ = [
    "AUTHENTICATION_FAILURES",
    "BYTES_IN",
    "BYTES_OUT",
    "CONNECTIONS_ACCEPTED",
    "CONNECTIONS_REFUSED",
    "ApiMetrics",
    "api_metrics",
    "api_name",
    "code_name",
    "record_response_errors",
]

BYTES_IN: Final = STAGES.counter("kafka_bytes_in")
BYTES_OUT: Final = STAGES.counter("kafka_bytes_out")
CONNECTIONS_ACCEPTED: Final = STAGES.counter("kafka_connections_accepted")
CONNECTIONS_REFUSED: Final = STAGES.counter("kafka_connections_refused")
AUTHENTICATION_FAILURES: Final = STAGES.counter("kafka_authentication_failures")

# An api key Kafka has no name for is labelled with its number; a client sending garbage
# keys must not create series without bound, so past this many such keys they share one.
MAX_UNNAMED_KEYS = 16
UNNAMED_OVERFLOW = "other"

_NAMES: dict[int, str] = {int(key): key.name for key in _KafkaApiKeys}


def api_name(api_key: int) -> str:
    """Kafka's name of the API (the protocol guide's), e.g. `Produce`; else its number."""
    return _NAMES.get(api_key) or str(api_key)


def code_name(code: int) -> str:
    """Kafka's name of an error code (`NOT_LEADER_OR_FOLLOWER`); else its number."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class ApiMetrics:
    """The series of one Kafka API. Its histogram and error counters are made on their
    first use: an API that is never answered (an unsupported key) has no time series."""

    __slots__ = ("_errors", "_seconds", "api", "requests")

    def __init__(self, api: str) -> None:
        self.api = api
        self.requests: Counter = STAGES.counter("kafka_requests", api=api)
        self._seconds: Histogram | None = None
        self._errors: dict[int, Counter] = {}

    def answered(self, received: float) -> None:
        """A request read at `received` (`time.perf_counter()`) has its response now."""
        seconds = self._seconds
        if seconds is None:
            seconds = self._seconds = STAGES.histogram("kafka_request_seconds", api=self.api)
        seconds.since(received)

    def error(self, code: int) -> None:
        """Count one occurrence of error `code` (non-zero) in this API's responses."""
        counter = self._errors.get(code)
        if counter is None:
            counter = STAGES.counter("kafka_request_errors", api=self.api, code=code_name(code))
            self._errors[code] = counter
        counter.inc()


_BY_KEY: dict[int, ApiMetrics] = {}
_unnamed = 0


def api_metrics(api_key: int) -> ApiMetrics:
    """The series of `api_key`, made on its first request."""
    metrics = _BY_KEY.get(api_key)
    if metrics is None:
        global _unnamed
        name = _NAMES.get(api_key)
        if name is None:
            _unnamed += 1
            name = str(api_key) if _unnamed <= MAX_UNNAMED_KEYS else UNNAMED_OVERFLOW
        metrics = _BY_KEY[api_key] = ApiMetrics(name)
    return metrics


# Where the error codes of a response are, for the APIs answered with kafka-python's
# message classes (control_codec.py): the list fields leading from the response to
# objects with an `error_code` (() is the response's own). They are the paths to every
# `ErrorCode` field of the responses' message JSON in Kafka's clients/src/main/resources/
# common/message/*Response.json (a unit test checks them against kafka-python's copy).
# Produce and Fetch have hand-written codecs: their handlers count their errors.
ERROR_PATHS: dict[int, tuple[tuple[str, ...], ...]] = {
    ApiKey.LIST_OFFSETS: (("topics", "partitions"),),
    ApiKey.METADATA: ((), ("topics",), ("topics", "partitions")),
    ApiKey.OFFSET_COMMIT: (("topics", "partitions"),),
    ApiKey.OFFSET_FETCH: (
        (),
        ("topics", "partitions"),
        ("groups",),
        ("groups", "topics", "partitions"),
    ),
    ApiKey.FIND_COORDINATOR: ((), ("coordinators",)),
    ApiKey.JOIN_GROUP: ((),),
    ApiKey.HEARTBEAT: ((),),
    ApiKey.LEAVE_GROUP: ((), ("members",)),
    ApiKey.SYNC_GROUP: ((),),
    ApiKey.DESCRIBE_GROUPS: (("groups",),),
    ApiKey.DELETE_GROUPS: (("results",),),
    ApiKey.OFFSET_DELETE: ((), ("topics", "partitions")),
    ApiKey.ELECT_LEADERS: ((), ("replica_election_results", "partition_result")),
    ApiKey.LIST_GROUPS: ((),),
    ApiKey.SASL_HANDSHAKE: ((),),
    ApiKey.API_VERSIONS: ((),),
    ApiKey.CREATE_TOPICS: (("topics",),),
    ApiKey.DELETE_TOPICS: (("responses",),),
    ApiKey.DELETE_RECORDS: (("topics", "partitions"),),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (("topics", "partitions"),),
    ApiKey.CREATE_PARTITIONS: (("results",),),
    ApiKey.INIT_PRODUCER_ID: ((),),
    ApiKey.ADD_PARTITIONS_TO_TXN: ((),),
    ApiKey.ADD_OFFSETS_TO_TXN: ((),),
    ApiKey.END_TXN: ((),),
    ApiKey.TXN_OFFSET_COMMIT: (("topics", "partitions"),),
    ApiKey.DESCRIBE_TRANSACTIONS: (("transaction_states",),),
    ApiKey.LIST_TRANSACTIONS: ((),),
    ApiKey.DESCRIBE_PRODUCERS: (("topics", "partitions"),),
    ApiKey.DESCRIBE_CONFIGS: (("results",),),
    ApiKey.ALTER_CONFIGS: (("responses",),),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (("responses",),),
    ApiKey.DESCRIBE_CLUSTER: ((),),
    ApiKey.DESCRIBE_LOG_DIRS: ((), ("results",)),
    ApiKey.DESCRIBE_ACLS: ((),),
    ApiKey.CREATE_ACLS: (("results",),),
    ApiKey.DELETE_ACLS: (("filter_results",), ("filter_results", "matching_acls")),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: ((), ("results",)),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (("results",),),
    ApiKey.SASL_AUTHENTICATE: ((),),
}


def record_response_errors(api_key: int, response: Any) -> None:
    """Count the non-zero error codes of a kafka-python response object of `api_key`."""
    paths = ERROR_PATHS.get(api_key)
    if paths is None:
        return
    metrics = api_metrics(api_key)
    for path in paths:
        _count(response, path, metrics)


def _count(node: Any, path: tuple[str, ...], metrics: ApiMetrics) -> None:
    if not path:
        code = getattr(node, "error_code", 0)
        if code:
            metrics.error(int(code))
        return
    # A field the response's version does not have reads as its default (or is absent).
    for child in getattr(node, path[0], None) or ():
        _count(child, path[1:], metrics)
