import struct
from collections.abc import Callable
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataResponse

from tests.unit.kafka.kafka_oracle import kp_frame
from vdl.net.kafka import control_codec
from vdl.net.kafka.control_codec import (
    api_versions_response,
    decode_request,
    encode_response,
    make_response,
    request_class,
    response_class,
)
from vdl.net.kafka.errors import MalformedRequest, UnsupportedVersion
from vdl.net.kafka.header import RequestHeader, parse_request_header
from vdl.net.kafka.versions import ADVERTISED, ApiKey, advertised


def hdr(api_key: int, version: int, correlation_id: int = 1) -> RequestHeader:
    return RequestHeader(api_key, version, correlation_id, "c", 0)


# --- ApiVersions ---------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_normal(version: int) -> None:
    out = api_versions_response(hdr(18, version, 31))
    (size,) = struct.unpack_from(">i", out)
    assert size == len(out) - 4
    resp = ApiVersionsResponse.decode(out, version=version, header=True, framed=True)
    assert resp.header.correlation_id == 31
    assert resp.error_code == 0
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got == ADVERTISED


def test_api_versions_header_is_v0_even_when_flexible() -> None:
    out = api_versions_response(hdr(18, 4, 0x01020304))
    # size, correlation id, then straight into the body: error_code int16 = 0,
    # then a compact array length (uvarint), no tagged-field byte in between.
    assert out[4:8] == b"\x01\x02\x03\x04"
    assert out[8:10] == b"\x00\x00"
    assert out[10] == len(ADVERTISED) + 1


@pytest.mark.parametrize("version", [5, 9, 127, -1])
def test_api_versions_fallback(version: int) -> None:
    out = api_versions_response(hdr(18, version, 9))
    # kafka-python's own decoder switches to the v0 layout when the error is set.
    resp = ApiVersionsResponse.decode(out, version=4, header=True, framed=True)
    assert resp.header.correlation_id == 9
    assert resp.error_code == 35
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got[ApiKey.API_VERSIONS] == (0, 4)
    assert got == ADVERTISED
    # And the bytes are exactly the v0 layout.
    v0 = ApiVersionsResponse.decode(out, version=0, header=True, framed=True)
    assert v0.error_code == 35


def test_api_versions_from_real_request_and_sasl_table() -> None:
    req = ApiVersionsRequest(version=3, client_software_name="x", client_software_version="1")
    frame = kp_frame(req, correlation_id=4)
    header = parse_request_header(frame)
    out = api_versions_response(header, advertised(sasl=True))
    resp = ApiVersionsResponse.decode(out, version=3, header=True, framed=True)
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got[ApiKey.SASL_HANDSHAKE] == (0, 1)
    assert got[ApiKey.SASL_AUTHENTICATE] == (0, 1)


# --- request decode / response encode round trips ------------------------------


def metadata_request(v: int) -> Any:
    cls = request_class(3, v)
    fields: dict[str, Any] = {
        "topics": [cls.MetadataRequestTopic(name="a"), cls.MetadataRequestTopic(name="b")]
    }
    if v >= 4:
        fields["allow_auto_topic_creation"] = False
    if v >= 8:
        fields["include_topic_authorized_operations"] = True
    return cls(**fields)


def metadata_response(h: RequestHeader) -> Any:
    cls = response_class(3, h.api_version)
    part = cls.MetadataResponseTopic.MetadataResponsePartition
    return make_response(
        h,
        throttle_time_ms=0,
        brokers=[cls.MetadataResponseBroker(node_id=1, host="localhost", port=9092, rack=None)],
        cluster_id="vdl-cluster",
        controller_id=1,
        topics=[
            cls.MetadataResponseTopic(
                error_code=0,
                name="a",
                is_internal=False,
                partitions=[
                    part(
                        error_code=0,
                        partition_index=0,
                        leader_id=1,
                        leader_epoch=-1,
                        replica_nodes=[1],
                        isr_nodes=[1],
                        offline_replicas=[],
                    )
                ],
                authorized_operations=None,  # kafka-python: a set of bits; None = unknown (bit 31)
            )
        ],
    )


def create_topics_request(v: int) -> Any:
    cls = request_class(19, v)
    topic = cls.CreatableTopic
    return cls(
        topics=[
            topic(
                name="new",
                num_partitions=3,
                replication_factor=1,
                assignments=[],
                configs=[topic.CreatableTopicConfig(name="retention.ms", value="1000")],
            )
        ],
        timeout_ms=30000,
        validate_only=False,
    )


def create_topics_response(h: RequestHeader) -> Any:
    cls = response_class(19, h.api_version)
    return make_response(
        h,
        throttle_time_ms=0,
        topics=[cls.CreatableTopicResult(name="new", error_code=36, error_message="exists")],
    )


def list_offsets_request(v: int) -> Any:
    cls = request_class(2, v)
    t = cls.ListOffsetsTopic
    return cls(
        replica_id=-1,
        isolation_level=1,
        topics=[
            t(
                name="a",
                partitions=[
                    t.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)
                ],
            )
        ],
    )


def list_offsets_response(h: RequestHeader) -> Any:
    cls = response_class(2, h.api_version)
    t = cls.ListOffsetsTopicResponse
    return make_response(
        h,
        throttle_time_ms=0,
        topics=[
            t(
                name="a",
                partitions=[
                    t.ListOffsetsPartitionResponse(
                        partition_index=0, error_code=0, timestamp=-1, offset=42, leader_epoch=-1
                    )
                ],
            )
        ],
    )


def init_producer_id_request(v: int) -> Any:
    return request_class(22, v)(transactional_id=None, transaction_timeout_ms=60000)


def init_producer_id_response(h: RequestHeader) -> Any:
    return make_response(h, throttle_time_ms=0, error_code=0, producer_id=1000, producer_epoch=0)


def describe_configs_request(v: int) -> Any:
    cls = request_class(32, v)
    return cls(
        resources=[
            cls.DescribeConfigsResource(resource_type=2, resource_name="a", configuration_keys=None)
        ],
        include_synonyms=False,
        include_documentation=False,
    )


def describe_configs_response(h: RequestHeader) -> Any:
    cls = response_class(32, h.api_version)
    r = cls.DescribeConfigsResult
    return make_response(
        h,
        throttle_time_ms=0,
        results=[
            r(
                error_code=0,
                error_message=None,
                resource_type=2,
                resource_name="a",
                configs=[
                    r.DescribeConfigsResourceResult(
                        name="retention.ms",
                        value="604800000",
                        read_only=False,
                        config_source=5,
                        is_sensitive=False,
                        synonyms=[],
                        config_type=5,
                        documentation=None,
                    )
                ],
            )
        ],
    )


def same(a: Any, b: Any) -> bool:
    return bytes(a.encode(header=False)) == bytes(b.encode(header=False))


CASES: list[tuple[int, Callable[[int], Any], Callable[[RequestHeader], Any]]] = [
    (ApiKey.METADATA, metadata_request, metadata_response),
    (ApiKey.CREATE_TOPICS, create_topics_request, create_topics_response),
    (ApiKey.LIST_OFFSETS, list_offsets_request, list_offsets_response),
    (ApiKey.INIT_PRODUCER_ID, init_producer_id_request, init_producer_id_response),
    (ApiKey.DESCRIBE_CONFIGS, describe_configs_request, describe_configs_response),
]
ROUND_TRIPS = [
    (key, v, mk_req, mk_resp)
    for key, mk_req, mk_resp in CASES
    for v in range(ADVERTISED[key][0], ADVERTISED[key][1] + 1)
]


@pytest.mark.parametrize(("key", "version", "mk_req", "mk_resp"), ROUND_TRIPS)
def test_round_trip(
    key: int,
    version: int,
    mk_req: Callable[[int], Any],
    mk_resp: Callable[[RequestHeader], Any],
) -> None:
    original = mk_req(version)
    frame = kp_frame(original, correlation_id=1000 + version)
    header = parse_request_header(frame)
    decoded = decode_request(header, frame)
    assert decoded.version == version
    # Compare by re-encoding: only the fields present in this version count.
    assert same(decoded, original)

    response = mk_resp(header)
    out = encode_response(header, response)
    back = response_class(key, version).decode(out, version=version, header=True, framed=True)
    assert back.header.correlation_id == 1000 + version
    assert same(back, response)
    # Exactly the library's framed encoding with a v0 response header.
    assert out[4:8] == struct.pack(">i", 1000 + version)


def test_flexible_response_gets_header_v1() -> None:
    header = hdr(ApiKey.METADATA, 9, 5)
    out = encode_response(header, metadata_response(header))
    assert out[8] == 0  # empty tagged-field section of response header v1
    back = MetadataResponse.decode(out, version=9, header=True, framed=True)
    assert back.header.correlation_id == 5 and back.cluster_id == "vdl-cluster"


def test_unadvertised_versions_rejected() -> None:
    req = metadata_request(13)
    frame = kp_frame(req)
    with pytest.raises(UnsupportedVersion):
        decode_request(parse_request_header(frame), frame)
    with pytest.raises(UnsupportedVersion):
        decode_request(hdr(ApiKey.FETCH, 3), memoryview(b""))
    with pytest.raises(UnsupportedVersion):
        decode_request(hdr(99, 0), memoryview(b""))
    # A caller-provided table widens what is accepted.
    assert same(decode_request(parse_request_header(frame), frame, {3: (0, 13)}), req)


def test_garbage_body_is_malformed() -> None:
    header = RequestHeader(ApiKey.METADATA, 8, 1, None, 0)
    with pytest.raises(MalformedRequest):
        decode_request(header, memoryview(b"\x00\x00\x00\x05\x00"))


def test_warm_up_compiles_the_client_path_or_what_it_is_given() -> None:
    assert control_codec.warm_up() > 2 * len(control_codec.CLIENT_PATH)
    assert control_codec.warm_up(ADVERTISED) > 2 * len(ADVERTISED)
