"""Message framing, grpc-timeout, grpc-message escaping and metadata conversion."""

from __future__ import annotations

import pytest

from vdl.net.grpc.framing import FramingError, MessageDecoder, encode_message
from vdl.net.grpc.metadata import (
    decode_grpc_message,
    encode_grpc_message,
    headers_from_metadata,
    metadata_from_headers,
)
from vdl.net.grpc.status import StatusCode
from vdl.net.grpc.timeout import format_grpc_timeout, parse_grpc_timeout


def test_decoder_splits_and_joins_across_chunks() -> None:
    wire = encode_message(b"abc") + encode_message(b"") + encode_message(b"x" * 1000)
    for step in (1, 2, 5, 7, 999, len(wire)):
        decoder = MessageDecoder()
        out: list[bytes] = []
        for i in range(0, len(wire), step):
            out += decoder.feed(wire[i : i + step])
        assert out == [b"abc", b"", b"x" * 1000]
        assert decoder.at_message_boundary()


def test_decoder_reports_buffered_bytes() -> None:
    decoder = MessageDecoder()
    assert decoder.feed(encode_message(b"hello")[:3]) == []
    assert decoder.buffered == 3
    assert decoder.feed(encode_message(b"hello")[3:6]) == []
    assert decoder.buffered == 6
    assert not decoder.at_message_boundary()


def test_decoder_rejects_oversized_before_buffering() -> None:
    decoder = MessageDecoder(max_message_size=10)
    with pytest.raises(FramingError) as info:
        decoder.feed(encode_message(b"y" * 11)[:5])
    assert info.value.status is StatusCode.RESOURCE_EXHAUSTED


def test_decoder_rejects_compressed_flag() -> None:
    with pytest.raises(FramingError) as info:
        MessageDecoder().feed(b"\x01\x00\x00\x00\x00")
    assert info.value.status is StatusCode.INTERNAL


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("1S", 1.0), ("100m", 0.1), ("5M", 300.0), ("2H", 7200.0), ("250u", 250e-6), ("7n", 7e-9)],
)
def test_parse_grpc_timeout(value: str, seconds: float) -> None:
    assert parse_grpc_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "S", "1", "1x", "123456789S", "-1S", "1.5S"])
def test_parse_grpc_timeout_rejects(value: str) -> None:
    with pytest.raises(ValueError):
        parse_grpc_timeout(value)


@pytest.mark.parametrize("seconds", [0.1, 1.0, 2.5, 600.0, 31_536_000.0, 1e-9])
def test_format_grpc_timeout_round_trips_without_shrinking(seconds: float) -> None:
    encoded = format_grpc_timeout(seconds)
    assert len(encoded) <= 9
    assert parse_grpc_timeout(encoded) >= seconds * (1 - 1e-9)
    assert parse_grpc_timeout(encoded) == pytest.approx(seconds, rel=1e-6)


def test_grpc_message_percent_encoding() -> None:
    for text in ["", "plain text", "100% sure", "naïve ☃", "line\nbreak"]:
        assert decode_grpc_message(encode_grpc_message(text)) == text
    assert encode_grpc_message("a%b") == b"a%25b"
    assert encode_grpc_message("é") == b"%C3%A9"
    # A stray '%' is kept as is, as gRPC implementations do.
    assert decode_grpc_message(b"50%zz") == "50%zz"


def test_metadata_round_trip_and_reserved_names() -> None:
    headers = headers_from_metadata([("X-Ydb-Database", "/local"), ("trace-bin", b"\x00\x01")])
    assert headers == [(b"x-ydb-database", b"/local"), (b"trace-bin", b"AAE")]
    assert metadata_from_headers(
        [
            (b":path", b"/a/b"),
            (b"grpc-timeout", b"1S"),
            (b"content-type", b"application/grpc"),
            *headers,
        ]
    ) == (("x-ydb-database", "/local"), ("trace-bin", b"\x00\x01"))
    with pytest.raises(ValueError):
        headers_from_metadata([("grpc-status", "0")])
