"""The record read's layout (`vdl/consensus/record_reads.py`): requests within bounds
round-trip, those out of bounds are refused, and batches are split by their own framing."""

from __future__ import annotations

import pytest

from vdl.consensus.record_reads import (
    MAX_READ_BYTES,
    MAX_WAIT_MS,
    REQUEST_HEAD,
    RecordReadError,
    RecordRequest,
    decode_request,
    encode_request,
    split_batches,
    topic_length,
)


def _batch(base: int, payload: bytes) -> bytes:
    # Kafka's batch framing: i64 base offset, i32 length of the rest.
    return base.to_bytes(8, "big") + len(payload).to_bytes(4, "big") + payload


def test_a_request_round_trips_with_its_bounds_applied() -> None:
    request = RecordRequest("orders", 7, 1234, 10**9, 10**8, 55)
    raw = encode_request(request)
    head, topic = raw[: REQUEST_HEAD.size], raw[REQUEST_HEAD.size :]
    assert topic_length(head) == len(b"orders") == len(topic)
    assert decode_request(head, topic) == RecordRequest(
        "orders", 7, 1234, MAX_READ_BYTES, MAX_WAIT_MS, 55
    )


@pytest.mark.parametrize("length", [0, 250, 65535])
def test_topic_names_out_of_bounds_are_refused(length: int) -> None:
    head = REQUEST_HEAD.pack(0x56444C46, length, 0, 0, 0, 0, -1)
    with pytest.raises(ValueError, match="topic name"):
        topic_length(head)


def test_negative_offsets_and_bad_names_are_refused() -> None:
    head = REQUEST_HEAD.pack(0x56444C46, 1, 0, -1, 0, 0, -1)
    with pytest.raises(ValueError, match="negative"):
        decode_request(head, b"t")
    head = REQUEST_HEAD.pack(0x56444C46, 1, 0, 0, 0, 0, -1)
    with pytest.raises(ValueError):
        decode_request(head, b"\xff")
    with pytest.raises(ValueError, match="topic name"):
        encode_request(RecordRequest("x" * 250, 0, 0, 0))


def test_batches_are_split_by_their_framing() -> None:
    batches = [_batch(0, b"a" * 50), _batch(3, b"b" * 61)]
    assert split_batches(b"".join(batches)) == batches
    assert split_batches(b"") == []
    for cut in (b"".join(batches)[:-1], batches[0][:11], _batch(0, b"")[:8] + b"\xff" * 4):
        with pytest.raises(RecordReadError):
            split_batches(cut)
