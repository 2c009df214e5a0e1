from typing import Any

import pytest
from kafka.protocol.producer import ProduceRequest as KPProduceRequest
from kafka.protocol.producer import ProduceResponse as KPProduceResponse

from tests.unit.kafka.kafka_oracle import kp_batch, kp_frame
from vdl.net.kafka.errors import MalformedRequest, UnsupportedVersion
from vdl.net.kafka.header import parse_request_header
from vdl.net.kafka.produce_codec import (
    PartitionProduceResult,
    decode_produce_request,
    encode_produce_response,
)

VERSIONS = range(3, 9)

TopicData = KPProduceRequest.TopicProduceData
PartitionData = TopicData.PartitionProduceData


def kp_request(version: int, txn: str | None = None) -> tuple[KPProduceRequest, list[bytes]]:
    batches = [kp_batch(1), kp_batch(5, value_size=3000), kp_batch(2, producer_id=7, seq=0)]
    req = KPProduceRequest(
        version=version,
        transactional_id=txn,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            TopicData(
                name="orders",
                partition_data=[
                    PartitionData(index=0, records=batches[0]),
                    PartitionData(index=3, records=batches[1]),
                ],
            ),
            TopicData(
                name="ünïcode-topic",
                partition_data=[
                    PartitionData(index=1, records=batches[2]),
                    PartitionData(index=2, records=None),
                ],
            ),
            TopicData(name="empty", partition_data=[]),
        ],
    )
    return req, batches


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("txn", [None, "tx-1"])
def test_decode_matches_kafka_python(version: int, txn: str | None) -> None:
    req, batches = kp_request(version, txn)
    frame = kp_frame(req, correlation_id=99)
    hdr = parse_request_header(frame)
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id) == (0, version, 99)
    got = decode_produce_request(frame[hdr.body_offset :], version)
    assert got.transactional_id == txn
    assert (got.acks, got.timeout_ms) == (-1, 30000)
    assert [t.name for t in got.topics] == ["orders", "ünïcode-topic", "empty"]
    parts = got.topics[0].partitions + got.topics[1].partitions
    assert [p.index for p in parts] == [0, 3, 1, 2]
    assert [None if p.records is None else bytes(p.records) for p in parts] == [*batches, None]
    # Records are slices of the frame, not copies.
    first = parts[0].records
    assert isinstance(first, memoryview) and first.obj is frame.obj


def results(version: int) -> list[tuple[str, list[PartitionProduceResult]]]:
    return [
        (
            "orders",
            [
                PartitionProduceResult(0, 0, 100, -1, 0),
                PartitionProduceResult(
                    3,
                    87,
                    -1,
                    -1,
                    -1,
                    record_errors=[(0, "bad batch"), (1, None)],
                    error_message="exactly one batch",
                ),
            ],
        ),
        ("t2", [PartitionProduceResult(1, 0, 5, 1_700_000_000_123, 2)]),
        ("none", []),
    ]


def kp_response(version: int) -> KPProduceResponse:
    Topic = KPProduceResponse.TopicProduceResponse
    Part = Topic.PartitionProduceResponse
    Err = Part.BatchIndexAndErrorMessage
    topics = []
    for name, parts in results(version):
        kp_parts = []
        for p in parts:
            fields: dict[str, Any] = dict(
                index=p.index,
                error_code=p.error_code,
                base_offset=p.base_offset,
                log_append_time_ms=p.log_append_time_ms,
                log_start_offset=p.log_start_offset,
            )
            if version >= 8:
                fields["record_errors"] = [
                    Err(batch_index=i, batch_index_error_message=m) for i, m in p.record_errors
                ]
                fields["error_message"] = p.error_message
            kp_parts.append(Part(**fields))
        topics.append(Topic(name=name, partition_responses=kp_parts))
    return KPProduceResponse(version=version, responses=topics, throttle_time_ms=12)


@pytest.mark.parametrize("version", VERSIONS)
def test_response_byte_identical(version: int) -> None:
    ours = encode_produce_response(version, 1234, results(version), throttle_time_ms=12)
    ref = kp_response(version)
    ref.with_header(correlation_id=1234)
    assert ours == bytes(ref.encode(header=True, framed=True))


@pytest.mark.parametrize("version", VERSIONS)
def test_response_decodes_with_kafka_python(version: int) -> None:
    ours = encode_produce_response(version, 7, results(version), throttle_time_ms=0)
    decoded = KPProduceResponse.decode(ours, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 7
    part = decoded.responses[0].partition_responses[0]
    assert (part.index, part.error_code, part.base_offset) == (0, 0, 100)


@pytest.mark.parametrize("version", [0, 1, 2, 9])
def test_unserved_versions_rejected(version: int) -> None:
    with pytest.raises(UnsupportedVersion):
        decode_produce_request(memoryview(b""), version)
    with pytest.raises(UnsupportedVersion):
        encode_produce_response(version, 1, [])


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_malformed(version: int) -> None:
    req, _ = kp_request(version, "tx")
    frame = kp_frame(req)
    body = frame[parse_request_header(frame).body_offset :]
    decode_produce_request(body, version)
    for cut in range(len(body)):
        # A cut inside a records field leaves too few bytes: must not be a silent short slice.
        try:
            decode_produce_request(body[:cut], version)
        except MalformedRequest:
            continue
        pytest.fail(f"cut at {cut} decoded without error")
