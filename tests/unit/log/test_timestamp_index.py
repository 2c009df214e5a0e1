"""Timestamp lookups: the sparse index never starts a search past the answer, and bounds how
much it reads whatever the timestamps' order; a batch yields its first record at or after
the target (record precision, not batch); and a stream over both backends answers from
the index, reading only around the answer, also after reopening."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from vdl.backends.api import Buffer, LogStore, LogStoreOptions
from vdl.backends.registry import LOG_BACKENDS, LogBackend, open_log_store
from vdl.log import batch_header as bh
from vdl.log.appender import LocalAppender
from vdl.log.flusher import Flusher
from vdl.log.record_batch import (
    COMPRESSION_GZIP,
    COMPRESSION_SNAPPY,
    Record,
    assign_offsets,
    build_batch,
    validate_produced_batch,
)
from vdl.log.stream import LogStream
from vdl.log.timestamp_index import CHECKPOINT_BYTES, TimestampIndex, first_record_at


def _batch(timestamps: list[int], base_offset: int = 0, compression: int = 0) -> bytes:
    records = [Record(None, b"v%d" % i, ts, []) for i, ts in enumerate(timestamps)]
    return build_batch(records, base_offset=base_offset, compression=compression)


# -- the index -------------------------------------------------------------------------


def test_start_never_passes_the_answer_and_reads_at_most_an_interval() -> None:
    rng = random.Random(7)
    interval = 1000
    index = TimestampIndex(checkpoint_bytes=interval)
    batches: list[tuple[int, int, int]] = []  # base offset, max timestamp, size
    offset, clock = 0, 10_000
    for _ in range(3000):
        clock += rng.randint(0, 20)
        # Producers' clocks disagree: CreateTime jumps back and forth around the trend.
        newest = clock + rng.randint(-500, 500)
        size = rng.randint(61, 400)
        index.add(offset, newest, size)
        batches.append((offset, newest, size))
        offset += rng.randint(1, 5)
    assert 100 < len(index) < 3000
    for target in [*range(9_000, clock + 600, 97), clock + 10_000]:
        answer = next((b for b in batches if b[1] >= target), None)
        start = index.start_for(target)
        if answer is None:
            assert start is None
            continue
        assert start is not None and start <= answer[0]
        read = sum(size for base, _, size in batches if start <= base < answer[0])
        assert read < interval + 400, (target, start, answer)


def test_checkpoints_below_the_log_start_are_dropped() -> None:
    index = TimestampIndex(checkpoint_bytes=100)
    for n in range(10):
        index.add(n * 10, 1000 + n, 100)
    assert index.start_for(1005) == 50
    index.drop_before(45)
    assert index.start_for(1005) == 50
    assert index.start_for(1001) == 0  # the caller starts at its log start offset
    assert index.start_for(1010) is None


# -- record precision in one batch --------------------------------------------------------


def test_first_record_at_or_after_the_target_inside_a_batch() -> None:
    batch = _batch([100, 300, 200, 400, 500], base_offset=40)
    assert first_record_at(batch, 50) == (40, 100)
    assert first_record_at(batch, 100) == (40, 100)
    assert first_record_at(batch, 250) == (41, 300)  # not 42: the first record, by offset
    assert first_record_at(batch, 301) == (43, 400)
    assert first_record_at(batch, 500) == (44, 500)


def test_gzip_records_are_decoded_too() -> None:
    batch = _batch([10, 20, 30], base_offset=7, compression=COMPRESSION_GZIP)
    assert first_record_at(batch, 15) == (8, 20)


def test_log_append_time_batches_answer_their_first_record() -> None:
    stamped = assign_offsets(_batch([10, 20, 30]), 90, 1, log_append_time_ms=5_000)
    assert first_record_at(stamped, 4_000) == (90, 5_000)


def test_records_that_cannot_be_decoded_leave_the_batch_offset() -> None:
    batch = bytearray(_batch([10, 20, 30], base_offset=3))
    struct.pack_into(">h", batch, bh.ATTRIBUTES_AT, bh.attributes(batch) | COMPRESSION_SNAPPY)
    bh.write_crc(batch)
    assert first_record_at(batch, 25) == (3, 30)


# -- a stream ----------------------------------------------------------------------------


class _CountingStore:
    """A LogStore that records what a search reads from it."""

    def __init__(self, real: LogStore) -> None:
        self._real = real
        self.reads: list[tuple[int, int]] = []  # (offset asked for, bytes returned)
        self.header_scans = 0

    def read_batches(self, offset: int, max_bytes: int, max_index: int) -> list[Buffer]:
        batches = self._real.read_batches(offset, max_bytes, max_index)
        self.reads.append((offset, sum(len(b) for b in batches)))
        return batches

    def data_headers(self) -> Iterator[tuple[int, bytes]]:
        self.header_scans += 1
        return self._real.data_headers()

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


RECORDS_PER_BATCH = 10
BATCHES = 400


def _fill(stream: LogStream) -> int:
    """BATCHES batches of RECORDS_PER_BATCH records, 1 ms apart; about 1.2 MB."""
    last = -1
    for n in range(BATCHES):
        timestamps = [1_000_000 + n * RECORDS_PER_BATCH + i for i in range(RECORDS_PER_BATCH)]
        records = [Record(None, b"x" * 300, ts, []) for ts in timestamps]
        batch = build_batch(records)
        info = validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
        last = stream.append(batch, info).last_offset
    return last


@pytest.mark.parametrize("backend", LOG_BACKENDS)
async def test_stream_finds_the_record_reading_only_near_it(
    backend: LogBackend, tmp_path: Path
) -> None:
    flusher = Flusher()
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        for reopened in (False, True):
            real = open_log_store(backend, tmp_path / "s", LogStoreOptions())
            store = _CountingStore(real)
            stream = LogStream("t-0", store, LocalAppender.factory(flusher), lambda: 5_000)  # type: ignore[arg-type]
            try:
                if not reopened:
                    await stream.wait_committed(_fill(stream))
                # Only the open reads every header (as it did for producer state).
                assert store.header_scans == 1
                wanted = 3_217  # a record in the middle of batch 321
                assert stream.offset_for_timestamp(1_000_000 + wanted) == wanted
                assert store.reads and store.reads[0][0] > 0  # the start was skipped
                read = sum(n for _, n in store.reads)
                assert read < CHECKPOINT_BYTES + 2 * 64 * 1024, store.reads
                # Before everything: the first record; after everything: none.
                assert stream.offset_for_timestamp(0) == 0
                total = BATCHES * RECORDS_PER_BATCH
                assert stream.offset_for_timestamp(1_000_000 + total) is None
                assert store.header_scans == 1
            finally:
                await stream.close()
        flusher.stop()
