"""The write path's batch encoder writes exactly what the YDB <-> Kafka mapping defines."""

from __future__ import annotations

import pytest

from vdl.log.record_batch import build_batch, iter_records, parse_batch_header
from vdl.log.ydb_mapping import YdbMessage, codec_headers, from_record, to_record
from vdl.net.ydb.write_batch import PendingMessage, SessionBatchEncoder


def _reference(
    messages: list[PendingMessage],
    producer: str,
    group: str,
    meta: dict[str, str],
    now: int,
) -> bytes:
    return build_batch(
        [
            to_record(
                YdbMessage(
                    data=m.data,
                    seq_no=m.seq_no,
                    created_at_ms=m.created_at_ms,
                    message_group_id=group if m.message_group_id is None else m.message_group_id,
                    metadata_items=m.metadata_items,
                    producer_id=producer,
                    written_at_ms=now,
                    write_session_meta=meta,
                )
            )
            for m in messages
        ]
    )


CASES = [
    pytest.param("p", "p", {}, [PendingMessage(b"x" * 1024, 1, 1_700_000_000_000)], id="one"),
    pytest.param(
        "producer-ü",
        "group",
        {"a": "1", "bé": "two"},
        [
            PendingMessage(bytes([i % 256]) * (i * 37), 10 + i, 1_700_000_000_000 + i)
            for i in range(300)
        ],
        id="many-with-meta",
    ),
    pytest.param(
        "",
        "",
        {},
        [
            PendingMessage(b"", 0, 5),
            PendingMessage(b"big" * 30_000, 2**62, 3),  # a negative timestamp delta
            PendingMessage(b"v", -7, 9000, "own-group", (("k", b"v"), ("k2", b""))),
        ],
        id="edge-values",
    ),
    pytest.param(
        "p",
        "g",
        {},
        [PendingMessage(b"a" * 70_000, i, 1_000 + i * 10_000) for i in range(3)],
        id="large-values-and-deltas",
    ),
]


@pytest.mark.parametrize(("producer", "group", "meta", "messages"), CASES)
def test_same_bytes_as_the_mapping(
    producer: str, group: str, meta: dict[str, str], messages: list[PendingMessage]
) -> None:
    now = 1_800_000_000_123
    encoded = SessionBatchEncoder(producer, group, meta).encode(messages, now)
    assert bytes(encoded) == _reference(messages, producer, group, meta, now)
    info = parse_batch_header(encoded)
    assert info.record_count == len(messages)
    decoded = [from_record(r) for r in iter_records(bytes(encoded))]
    assert [d.seq_no for d in decoded] == [m.seq_no for m in messages]
    assert [d.data for d in decoded] == [m.data for m in messages]
    assert all(d.producer_id == producer and d.written_at_ms == now for d in decoded)


def test_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError):
        SessionBatchEncoder("p", "p", {}).encode([], 0)


def test_custom_codec_headers_match_the_mapping() -> None:
    # The write session appends a custom codec's headers after the metadata items.
    items = (("k", b"v"),)
    pending = PendingMessage(b"enc", 5, 1_000, metadata_items=items + codec_headers(10007, 99))
    encoded = SessionBatchEncoder("p", "g", {}).encode([pending], 2_000)
    message = YdbMessage(
        data=b"enc",
        seq_no=5,
        created_at_ms=1_000,
        message_group_id="g",
        metadata_items=items,
        producer_id="p",
        written_at_ms=2_000,
        codec=10007,
        uncompressed_size=99,
    )
    assert bytes(encoded) == build_batch([to_record(message)])
    (back,) = [from_record(r) for r in iter_records(bytes(encoded))]
    assert (back.codec, back.size, back.metadata_items) == (10007, 99, items)
