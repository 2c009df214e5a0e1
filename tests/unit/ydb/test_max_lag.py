"""A read session's max_lag spares the timestamp search only where the search would not move
the read offset: the witness's boundary (a batch read past whose maxTimestamp reaches the
window's start), its end at the log start, and a reader that skips the search where the
witness covers it delivering exactly what a reader that searches before every read does,
over producers whose clocks disagree."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from vdl.backends.api import LogStoreOptions
from vdl.backends.registry import open_log_store
from vdl.log.appender import LocalAppender
from vdl.log.flusher import Flusher
from vdl.log.record_batch import Record, build_batch, parse_batch_header, validate_produced_batch
from vdl.log.stream import LogStream
from vdl.net.ydb.max_lag import LagWitness
from vdl.net.ydb.partition_reads import LocalPartition
from vdl.net.ydb.topic_read import decode_messages


@pytest.fixture
async def stream(tmp_path: Path) -> AsyncIterator[LogStream]:
    flusher = Flusher()
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        store = open_log_store("segment", tmp_path / "log", LogStoreOptions())
        opened = LogStream("t-0", store, LocalAppender.factory(flusher), lambda: 5_000)
        try:
            yield opened
        finally:
            await opened.close()
            flusher.stop()


async def _write(stream: LogStream, batches: list[list[int]]) -> None:
    """One batch per list of record timestamps (CreateTime), committed."""
    last = -1
    for n, stamps in enumerate(batches):
        records = [Record(None, b"m%d-%d" % (n, i), ts, []) for i, ts in enumerate(stamps)]
        batch = build_batch(records)
        info = validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
        last = stream.append(batch, info).last_offset
    await stream.wait_committed(last)


async def test_the_witness_covers_up_to_its_timestamp_and_no_further(stream: LogStream) -> None:
    # Batches [0, 1], [2, 3], [4, 5]: the middle one is the newest (maxTimestamp 500).
    await _write(stream, [[100, 110], [120, 500], [130, 140]])
    reader = LocalPartition(stream)
    batches, _ = reader.read(0, 1 << 20)
    witness = LagWitness()
    # A read that stops inside the middle batch has not read past it.
    witness.passed(batches, 3)
    assert witness.newest == 110
    witness.passed(batches, 6)
    assert (witness.newest, witness.base, witness.end) == (500, 2, 4)
    # At its timestamp the search answers inside the witness, below the read offset ...
    assert witness.covers(500, 4, stream.log_start_offset)
    assert stream.offset_for_timestamp(500) == 3
    assert witness.covers(500, 6, stream.log_start_offset)
    # ... and one ms later it finds nothing: the read offset goes to the end.
    assert not witness.covers(501, 6, stream.log_start_offset)
    assert stream.offset_for_timestamp(501) is None
    # A read offset moved back before the witness's end (a new partition session does
    # that) is not covered.
    assert not witness.covers(120, 3, stream.log_start_offset)
    # Once the log start passes the witness's first offset, it may be gone: search again.
    stream.advance_log_start(3)
    assert not witness.covers(120, 6, stream.log_start_offset)
    # A session that read nothing past has no witness.
    assert not LagWitness().covers(-(10**12), 6, 0)


async def test_skipping_covered_searches_reads_what_searching_every_time_reads(
    stream: LogStream,
) -> None:
    rng = random.Random(11)
    clock = 10_000
    batches: list[list[int]] = []
    for _ in range(300):
        clock += rng.randint(0, 30)
        # Producers' clocks disagree: CreateTime jumps back and forth around the trend,
        # now and then far ahead.
        skew = rng.choice([0, 0, 0, 400, -400, 5_000])
        batches.append([clock + skew + rng.randint(-50, 50) for _ in range(rng.randint(1, 5))])
    await _write(stream, batches)
    reader = LocalPartition(stream)
    for max_lag in (50, 300, 2_000):
        searched = spared = 0
        offsets = {True: 0, False: 0}  # with the witness, without
        witness = LagWitness()
        now = 10_000
        delivered: dict[bool, list[int]] = {True: [], False: []}
        while offsets[False] < stream.high_watermark or offsets[True] < stream.high_watermark:
            # The reader keeps up, or stalls now and then (the lag bites).
            now += rng.choice([rng.randint(0, 40)] * 9 + [rng.randint(500, 3_000)])
            budget = rng.randint(1, 400)
            oldest = now - max_lag
            for cached in (False, True):
                read_offset = offsets[cached]
                if cached and witness.covers(oldest, read_offset, stream.log_start_offset):
                    spared += 1
                else:
                    searched += cached
                    found = stream.offset_for_timestamp(oldest)
                    read_offset = max(
                        read_offset, found if found is not None else stream.high_watermark
                    )
                got, aborted = reader.read(read_offset, budget)
                messages, _, next_offset = decode_messages(got, read_offset, budget, aborted)
                if cached:
                    witness.passed(got, next_offset)
                delivered[cached].extend(m.offset for m in messages)
                offsets[cached] = max(read_offset, next_offset)
            assert offsets[True] == offsets[False]
        assert delivered[True] == delivered[False]
        # Skipped records exist (the lag bites), and most searches are spared.
        assert 0 < len(delivered[True]) < stream.high_watermark
        assert spared > searched > 0, (max_lag, spared, searched)


def test_batch_headers_only_are_read() -> None:
    """The witness needs a batch's header only (what a remote read's chunks carry)."""
    batch = build_batch([Record(None, b"x", 7, []), Record(None, b"y", 9, [])], base_offset=40)
    witness = LagWitness()
    witness.passed([batch[:61]], parse_batch_header(batch).next_offset)
    assert (witness.newest, witness.base, witness.end) == (9, 40, 42)
