"""The YDB producer table skips batches it cannot or need not decode."""

from __future__ import annotations

from vdl.log.batch_header import ATTRIBUTES_AT, HEADER_SIZE
from vdl.log.record_batch import COMPRESSION_GZIP, Record, build_batch
from vdl.log.ydb_mapping import PRODUCER_ID, SEQ_NO, YdbProducerTable


def _ydb_batch(producer: bytes, seq_no: int, offset: int) -> bytes:
    headers: list[tuple[str, bytes | None]] = [
        (PRODUCER_ID, producer),
        (SEQ_NO, str(seq_no).encode()),
    ]
    return build_batch([Record(None, b"v", 1_000, headers)], base_offset=offset)


def test_compressed_and_undecodable_batches_are_skipped() -> None:
    table = YdbProducerTable()
    gzip_batch = build_batch(
        [Record(None, b"kafka", 1_000, [])], base_offset=1, compression=COMPRESSION_GZIP
    )
    # A lz4 batch: the codec bits say 3, the records cannot be decoded here.
    lz4 = bytearray(build_batch([Record(None, b"kafka", 1_000, [])], base_offset=2))
    lz4[ATTRIBUTES_AT + 1] |= 3  # the low byte of the big-endian attributes
    # Records that do not parse (the header is fine, the body is junk).
    junk = bytearray(build_batch([Record(None, b"kafka", 1_000, [])], base_offset=3))
    junk[HEADER_SIZE:] = b"\xff" * (len(junk) - HEADER_SIZE)
    table.scan([_ydb_batch(b"p1", 7, 0), gzip_batch, bytes(lz4), bytes(junk)])
    table.scan([_ydb_batch(b"p1", 8, 4)])
    assert table.last_seq_no("p1") == 8
    assert len(table) == 1
