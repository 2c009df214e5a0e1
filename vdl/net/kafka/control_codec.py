"""Control-plane codec on top of kafka-python 3.0.12's ``kafka.protocol``.

Metadata, groups, offsets, admin, InitProducerId, ApiVersions and SASL are
small and many-versioned; kafka-python's schema-driven classes (generated
from Kafka's own message JSON) get every version and every flexible/tagged
detail right, so they are used here instead of hand-written structs.
Produce and Fetch, the data path, have hand-written
codecs next to this one.

kafka-python ships no type hints, so request and response objects are ``Any``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vdl.net.kafka.errors import ErrorCode, MalformedRequest, UnsupportedVersion
from vdl.net.kafka.header import (
    RequestHeader,
    kafka_request_classes,
    kafka_response_classes,
)
from vdl.net.kafka.request_metrics import api_metrics, record_response_errors
from vdl.net.kafka.versions import ADVERTISED, SASL_ADVERTISED, ApiKey

__all__ = [
    "DECODABLE",
    "api_versions_response",
    "decode_request",
    "encode_response",
    "make_response",
    "request_class",
    "response_class",
    "warm_up",
]

_REQUESTS = kafka_request_classes()
_RESPONSES = kafka_response_classes()

# What decode_request accepts by default: everything advertised, plus the
# SASL pair (decoding them is harmless; whether SASL is on is the server's call).
DECODABLE: dict[int, tuple[int, int]] = {**ADVERTISED, **SASL_ADVERTISED}


def _check(api_key: int, api_version: int, allowed: Mapping[int, tuple[int, int]]) -> None:
    rng = allowed.get(api_key)
    if rng is None or not rng[0] <= api_version <= rng[1]:
        raise UnsupportedVersion(api_key, api_version)
    if api_key not in _REQUESTS:
        raise UnsupportedVersion(api_key, api_version, f"no codec for api_key {api_key}")


def request_class(api_key: int, version: int) -> Any:
    """The versioned kafka-python request class, e.g. for building test requests."""
    return _REQUESTS[api_key][version]


def response_class(api_key: int, version: int) -> Any:
    """The versioned kafka-python response class.

    Nested data classes hang off it by their JSON type name, e.g.
    ``response_class(3, 8).MetadataResponseBroker``; unset fields take the
    schema default.
    """
    return _RESPONSES[api_key][version]


def make_response(header: RequestHeader, **fields: Any) -> Any:
    """Build the response object matching a request header's api and version."""
    return response_class(header.api_key, header.api_version)(**fields)


def decode_request(
    header: RequestHeader,
    frame: memoryview,
    allowed: Mapping[int, tuple[int, int]] = DECODABLE,
) -> Any:
    """Decode the body of ``frame`` (from ``header.body_offset``) into a request object.

    kafka-python decodes any version up to its schema maximum, so the
    advertised ranges are enforced here (UnsupportedVersion).  Anything the
    library raises on bad bytes becomes MalformedRequest.
    """
    _check(header.api_key, header.api_version, allowed)
    cls = _REQUESTS[header.api_key]
    try:
        return cls.decode(frame[header.body_offset :], version=header.api_version)
    # The generated decoders raise whatever the bad bytes provoke (struct.error,
    # IndexError, UnicodeDecodeError, ValueError, ...); untrusted input must
    # map to one exception type so the server can answer it cleanly.
    except Exception as exc:
        raise MalformedRequest(
            f"cannot decode api_key {header.api_key} v{header.api_version}: {exc!r}"
        ) from exc


def encode_response(header: RequestHeader, response: Any) -> bytes:
    """Encode ``response`` framed, with the response header for the request's version.

    kafka-python picks header v1 for flexible versions and forces v0 for
    ApiVersions, which is exactly the rule of KIP-482 and KIP-511. The response's
    error codes are counted (`kafka_request_errors`, request_metrics.py).
    """
    record_response_errors(header.api_key, response)
    # The version must be set before the header exists: kafka-python's version
    # setter also writes request_api_version into the header, which a
    # ResponseHeader does not have.
    if response.API_VERSION != header.api_version:
        response.API_VERSION = header.api_version
    response.with_header(correlation_id=header.correlation_id)
    return bytes(response.encode(header=True, framed=True))


def api_versions_response(
    header: RequestHeader,
    advertised: Mapping[int, tuple[int, int]] = ADVERTISED,
    throttle_time_ms: int = 0,
) -> bytes:
    """The framed ApiVersions answer, with the KIP-511 fallback.

    For an ApiVersions version outside our range, the body uses the v0
    layout with UNSUPPORTED_VERSION and the full api_keys list, so the client
    can retry at a version we support (KIP-511).  The request body is
    not needed either way.
    """
    low, high = advertised[ApiKey.API_VERSIONS]
    version = header.api_version
    error = ErrorCode.NONE
    if not low <= version <= high:
        version = 0
        error = ErrorCode.UNSUPPORTED_VERSION
        api_metrics(ApiKey.API_VERSIONS).error(error)
    cls = response_class(ApiKey.API_VERSIONS, version)
    entries = [
        cls.ApiVersion(api_key=key, min_version=rng[0], max_version=rng[1])
        for key, rng in sorted(advertised.items())
    ]
    fields: dict[str, Any] = {"error_code": int(error), "api_keys": entries}
    if version >= 1:
        fields["throttle_time_ms"] = throttle_time_ms
    response = cls(**fields)
    response.with_header(correlation_id=header.correlation_id)
    return bytes(response.encode(header=True, framed=True))


# What every client sends when it connects, produces, and consumes in a group: compiled at
# start-up. Produce and Fetch have their own codecs; the admin APIs compile on first use.
CLIENT_PATH = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.METADATA,
        ApiKey.LIST_OFFSETS,
        ApiKey.INIT_PRODUCER_ID,
        ApiKey.FIND_COORDINATOR,
        ApiKey.JOIN_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
    }
)


def warm_up(table: Mapping[int, tuple[int, int]] | None = None) -> int:
    """Compile the request decoders and response encoders for every served version of
    `table`'s APIs (by default those of `CLIENT_PATH`).

    kafka-python generates code per (message, version) on first use, which
    costs 1-4 ms each (measured; flexible versions more); paying that at startup keeps it
    off the first client's latency. Doing it for every admin API too would cost each node
    start about half a second more. Returns how many functions were compiled.
    """
    if table is None:
        table = {key: DECODABLE[key] for key in CLIENT_PATH}
    compiled = 0
    for api_key, (low, high) in table.items():
        req = _REQUESTS.get(api_key)
        resp = _RESPONSES.get(api_key)
        for version in range(low, high + 1):
            if req is not None and version <= req.max_version:
                flex = req.flexible_version_q(version)
                # Same cache key ApiMessage.decode uses (data_class = primary class).
                req._struct.compiled_decode_from(version, compact=flex, tagged=flex, data_class=req)
                compiled += 1
            if resp is not None and version <= resp.max_version:
                flex = resp.flexible_version_q(version)
                resp._struct.compiled_encode_into(version, compact=flex, tagged=flex)
                compiled += 1
    return compiled
