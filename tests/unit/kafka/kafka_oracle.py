"""Helpers that build reference encodings with kafka-python (the test oracle)."""

from __future__ import annotations

from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder


def kp_batch(n: int = 3, *, value_size: int = 10, producer_id: int = -1, seq: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=seq,
        batch_size=1 << 24,
    )
    for i in range(n):
        builder.append(
            i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v" * value_size,
            headers=[("h", b"x")],
        )  # fmt: skip
    return bytes(builder.build())


def kp_frame(request: Any, correlation_id: int = 1, client_id: str = "test") -> memoryview:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return memoryview(bytes(request.encode(header=True, framed=False)))
