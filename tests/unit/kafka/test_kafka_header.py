import struct

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from vdl.net.kafka.header import (
    FLEXIBLE_FROM,
    MalformedRequest,
    is_flexible,
    parse_request_header,
)


def test_flexible_table_matches_reference() -> None:
    # Reference §1 lists where flexible versions start.
    expected = {
        0: 9, 1: 12, 2: 6, 3: 9, 8: 8, 9: 6, 10: 3, 11: 6, 12: 4, 13: 4, 14: 4,
        18: 3, 19: 5, 20: 4, 22: 2, 32: 4, 36: 2, 23: 4, 60: 0,
    }  # fmt: skip
    for key, first in expected.items():
        assert FLEXIBLE_FROM[key] == first, key
    assert 17 not in FLEXIBLE_FROM  # SaslHandshake is never flexible
    assert not is_flexible(17, 1)
    assert not is_flexible(999, 5)


def test_header_v1() -> None:
    req = MetadataRequest(version=8, topics=None)
    req.with_header(correlation_id=42, client_id="my-client")
    frame = memoryview(bytes(req.encode(header=True, framed=False)))
    hdr = parse_request_header(frame)
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id, hdr.client_id) == (
        3,
        8,
        42,
        "my-client",
    )
    # The body follows immediately: v1 has no tagged fields.
    assert hdr.body_offset == 8 + 2 + len("my-client")
    body = MetadataRequest.decode(frame[hdr.body_offset :], version=8)
    assert body.topics is None


def test_header_v1_null_client_id() -> None:
    raw = struct.pack(">hhih", 1, 11, 7, -1) + b"body"
    hdr = parse_request_header(memoryview(raw))
    assert hdr.client_id is None
    assert hdr.body_offset == 10


def test_header_v2_skips_tagged_fields() -> None:
    req = ApiVersionsRequest(
        version=3, client_software_name="vdl-test", client_software_version="1.0"
    )
    req.with_header(correlation_id=5, client_id="c")
    frame = memoryview(bytes(req.encode(header=True)))
    hdr = parse_request_header(frame)
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id, hdr.client_id) == (18, 3, 5, "c")
    assert hdr.body_offset == 8 + 2 + 1 + 1  # client_id int16 length (not compact) + empty tags
    body = ApiVersionsRequest.decode(frame[hdr.body_offset :], version=3)
    assert body.client_software_name == "vdl-test"


def test_header_v2_with_unknown_tags() -> None:
    # Tagged section: 2 fields, tag 0 (3 bytes), tag 5 (0 bytes).
    tags = bytes([2, 0, 3]) + b"xyz" + bytes([5, 0])
    raw = struct.pack(">hhih", 1, 12, 9, 2) + b"id" + tags + b"BODY"
    hdr = parse_request_header(memoryview(raw))
    assert bytes(memoryview(raw)[hdr.body_offset :]) == b"BODY"


def test_flexible_fetch_header_from_library() -> None:
    req = FetchRequest(
        version=12, max_wait_ms=500, min_bytes=1, topics=[], forgotten_topics_data=[]
    )
    req.with_header(correlation_id=1, client_id="kp")
    frame = memoryview(bytes(req.encode(header=True)))
    hdr = parse_request_header(frame)
    assert hdr.api_version == 12
    FetchRequest.decode(frame[hdr.body_offset :], version=12)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\x03\x00\x08\x00\x00",
        struct.pack(">hhih", 3, 8, 1, 5) + b"abc",  # client id truncated
        struct.pack(">hhih", 3, 8, 1, -2),  # bad length
        struct.pack(">hhih", 3, 9, 1, 0),  # flexible, tag section missing
        struct.pack(">hhih", 3, 9, 1, 0) + bytes([1, 0, 9, 1]),  # tag overruns
        struct.pack(">hhih", 3, 9, 1, 0) + b"\xff\xff\xff\xff\xff\xff",  # runaway varint
    ],
)
def test_truncated_headers(raw: bytes) -> None:
    with pytest.raises(MalformedRequest):
        parse_request_header(memoryview(raw))
