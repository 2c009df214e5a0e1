import pytest
from kafka.protocol.consumer import FetchRequest as KPFetchRequest
from kafka.protocol.consumer import FetchResponse as KPFetchResponse

from tests.unit.kafka.kafka_oracle import kp_batch, kp_frame
from vdl.net.kafka.errors import MalformedRequest, UnsupportedVersion
from vdl.net.kafka.fetch_codec import (
    FetchPartitionResult,
    decode_fetch_request,
    encode_fetch_response,
)
from vdl.net.kafka.header import parse_request_header

VERSIONS = range(4, 12)

KPTopic = KPFetchRequest.FetchTopic
KPPart = KPTopic.FetchPartition
KPForgotten = KPFetchRequest.ForgottenTopic


def kp_request(version: int) -> KPFetchRequest:
    return KPFetchRequest(
        version=version,
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[
            KPTopic(
                topic="orders",
                partitions=[
                    KPPart(
                        partition=0,
                        current_leader_epoch=3,
                        fetch_offset=42,
                        log_start_offset=7,
                        partition_max_bytes=1048576,
                    ),
                    KPPart(
                        partition=5,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        log_start_offset=-1,
                        partition_max_bytes=100,
                    ),
                ],
            ),
            KPTopic(topic="ß", partitions=[]),
        ],
        forgotten_topics_data=[KPForgotten(topic="old", partitions=[1, 2, 3])],
        rack_id="rack-a",
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_decode_matches_kafka_python(version: int) -> None:
    frame = kp_frame(kp_request(version), correlation_id=3)
    hdr = parse_request_header(frame)
    assert (hdr.api_key, hdr.api_version) == (1, version)
    req = decode_fetch_request(frame[hdr.body_offset :], version)
    assert (req.replica_id, req.max_wait_ms, req.min_bytes, req.max_bytes) == (
        -1,
        500,
        1,
        52428800,
    )
    assert req.isolation_level == 1
    assert [t.name for t in req.topics] == ["orders", "ß"]
    p0, p5 = req.topics[0].partitions
    assert (p0.partition, p0.fetch_offset, p0.partition_max_bytes) == (0, 42, 1048576)
    assert p0.current_leader_epoch == (3 if version >= 9 else -1)
    assert p0.log_start_offset == (7 if version >= 5 else -1)
    assert (p5.partition, p5.fetch_offset, p5.partition_max_bytes) == (5, 0, 100)
    if version >= 7:
        assert (req.session_id, req.session_epoch) == (0, -1)
        assert [(f.name, f.partitions) for f in req.forgotten_topics] == [("old", [1, 2, 3])]
    else:
        assert req.forgotten_topics == []
    assert req.rack_id == ("rack-a" if version >= 11 else "")


def results() -> list[tuple[str, list[FetchPartitionResult]]]:
    b1, b2, b3 = kp_batch(2), kp_batch(1, value_size=5000), kp_batch(3)
    return [
        (
            "orders",
            [
                FetchPartitionResult(0, 0, 100, 99, 0, records=[b1, memoryview(b2), bytearray(b3)]),
                FetchPartitionResult(1, 1, 10, 10, 5),  # out of range, no records
                FetchPartitionResult(2, 0, 7, 7, 0, aborted_transactions=[(11, 3), (12, 4)]),
                FetchPartitionResult(3, 0, 7, 7, 0, aborted_transactions=[], records=[b3]),
            ],
        ),
        ("empty-topic", []),
        ("t2", [FetchPartitionResult(9, 6, -1, -1, -1, preferred_read_replica=2)]),
    ]


def kp_response(version: int) -> KPFetchResponse:
    Topic = KPFetchResponse.FetchableTopicResponse
    Part = Topic.PartitionData
    Aborted = Part.AbortedTransaction
    topics = []
    for name, parts in results():
        kp_parts = []
        for p in parts:
            kp_parts.append(
                Part(
                    partition_index=p.partition,
                    error_code=p.error_code,
                    high_watermark=p.high_watermark,
                    last_stable_offset=p.last_stable_offset,
                    log_start_offset=p.log_start_offset,
                    aborted_transactions=None
                    if p.aborted_transactions is None
                    else [
                        Aborted(producer_id=a, first_offset=b) for a, b in p.aborted_transactions
                    ],
                    preferred_read_replica=p.preferred_read_replica,
                    records=b"".join(bytes(r) for r in p.records),
                )
            )
        topics.append(Topic(topic=name, partitions=kp_parts))
    return KPFetchResponse(
        version=version, throttle_time_ms=5, error_code=0, session_id=0, responses=topics
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_response_byte_identical(version: int) -> None:
    res = results()
    out = encode_fetch_response(version, 77, 5, 0, 0, res)
    ref = kp_response(version)
    ref.with_header(correlation_id=77)
    assert b"".join(out) == bytes(ref.encode(header=True, framed=True))


def test_record_buffers_are_passed_through() -> None:
    res = results()
    out = encode_fetch_response(11, 1, 0, 0, 0, res)
    first = res[0][1][0].records
    # bytes and memoryview buffers appear in the scatter list as the very same objects.
    assert any(piece is first[0] for piece in out)
    assert any(piece is first[1] for piece in out)
    assert all(isinstance(piece, bytes | memoryview) for piece in out)
    assert all(len(piece) for piece in out)


def test_empty_response_is_one_piece() -> None:
    out = encode_fetch_response(11, 1, 0, 0, 0, [("t", [FetchPartitionResult(0, 0, 0, 0, 0)])])
    assert len(out) == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_response_decodes_with_kafka_python(version: int) -> None:
    out = encode_fetch_response(version, 8, 0, 0, 0, results())
    decoded = KPFetchResponse.decode(b"".join(out), version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 8
    part = decoded.responses[0].partitions[0]
    assert part.records == b"".join(bytes(r) for r in results()[0][1][0].records)


@pytest.mark.parametrize("version", [3, 12])
def test_unserved_versions(version: int) -> None:
    with pytest.raises(UnsupportedVersion):
        decode_fetch_request(memoryview(b""), version)
    with pytest.raises(UnsupportedVersion):
        encode_fetch_response(version, 1, 0, 0, 0, [])


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_malformed(version: int) -> None:
    frame = kp_frame(kp_request(version))
    body = frame[parse_request_header(frame).body_offset :]
    decode_fetch_request(body, version)
    for cut in range(len(body)):
        with pytest.raises(MalformedRequest):
            decode_fetch_request(body[:cut], version)
